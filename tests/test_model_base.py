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

from clap import prompts
from clap.agent import chat
from clap.agent.tools import ReportTools
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
    cfg["train"]["sft"].update(max_steps=2, logging_steps=1, save_steps=2, per_device_batch_size=2,
                               gradient_accumulation=1)
    m = train_sft.run(cfg, small_loop / "materialized", small_loop / "admission", ["b1"], folder, tmp_path / "sft",
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
    p = json.loads(json.dumps(params))
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
