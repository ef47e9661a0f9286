import json

import pytest
import torch

from clap.domain import prompts
from clap.evaluate.answer_store import AnswerStore, model_id, same_adapter
from clap.evaluate.decoding import answer_schema
from clap.evaluate.generate import Engine

CHUNK = {"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."}
CONVS = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(q, [CHUNK])) for q in ("Revenue?", "Margin?", "Both?")]


def _files(root):
    return sorted(p.name for p in root.rglob("*.json"))


def test_a_greedy_answer_is_decoded_once_and_reused_as_it_was(tiny_dir, tmp_path):
    store = tmp_path / "answers"
    engine = Engine(tiny_dir, answer_store=store)
    first = engine.generate(CONVS[:2], use_adapter=False, max_new_tokens=16, batch_size=2, progress=False)
    assert not any(g.reused for g in first) and len(_files(store)) == 2
    again = Engine(tiny_dir, answer_store=store)  # a later run: only the third question is new
    second = again.generate(CONVS, use_adapter=False, max_new_tokens=16, batch_size=2, progress=False)
    assert [g.reused for g in second] == [True, True, False]
    assert [(g.text, g.new_tokens, g.latency_ms) for g in second[:2]] == \
        [(g.text, g.new_tokens, round(g.latency_ms, 2)) for g in first]
    assert (again.store.hits, again.store.misses) == (2, 1) and len(_files(store)) == 3
    plain = Engine(tiny_dir).generate(CONVS, use_adapter=False, max_new_tokens=16, batch_size=1, progress=False)
    assert [g.text for g in second] == [g.text for g in plain]  # reuse never changes an answer


def test_what_the_answer_depends_on_is_in_the_key(tiny_dir, tmp_path):
    engine = Engine(tiny_dir, answer_store=tmp_path / "answers")
    engine.generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False)
    schema = [answer_schema([CHUNK], with_location=True)]
    for kwargs in ({"max_new_tokens": 8}, {"max_new_tokens": 16, "schemas": schema}):
        assert not engine.generate(CONVS[:1], use_adapter=False, progress=False, **kwargs)[0].reused
    sampled = engine.generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False, temperature=0.7)
    assert not sampled[0].reused and len(_files(tmp_path / "answers")) == 3  # a draw from the global RNG is not stored
    jumping = Engine(tiny_dir, answer_store=tmp_path / "answers", jump_forward=True)  # forced text, other tokens
    assert not jumping.generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False, schemas=schema)[0].reused
    store = AnswerStore(tmp_path / "x")
    base = model_id({"model.safetensors": "aa"})
    adapter = model_id({"model.safetensors": "aa"}, {"adapter_model.safetensors": "cc"})
    keys = {store.key(m, [1, 2], None, 16) for m in (base, model_id({"model.safetensors": "ab"}), adapter)}
    assert len(keys) == 3 and store.key(base, [1, 2], None, 16) == store.key(base, [1, 2], None, 16)
    assert store.key(base, [1, 2], None, 16) != store.key(base, [1, 3], None, 16)
    assert store.key(base, [1, 2], None, 16, "float32") != store.key(base, [1, 2], None, 16, "bfloat16")


def test_a_seeded_sampled_answer_is_stored_and_read_back_under_its_seed(tiny_dir, tmp_path):
    """The agent's pass^k runs sample with a per-request seed: such a draw is the request's own, so it is stored; a
    later run reads it back, and another seed or temperature is another key."""
    store = tmp_path / "answers"
    enum = {"type": "object", "properties": {"pick": {"enum": ["alpha", "beta", "gamma", "delta"]}},
            "required": ["pick"], "additionalProperties": False}

    def sampled(engine, seed, temperature=1.0):
        return engine.generate(CONVS, use_adapter=False, max_new_tokens=16, batch_size=2, progress=False,
                               schemas=[enum] * 3, temperature=temperature, seed=seed)

    first = sampled(Engine(tiny_dir, answer_store=store), 3)
    assert not any(g.reused for g in first) and len(_files(store)) == 3
    later = Engine(tiny_dir, answer_store=store)
    again = sampled(later, 3)
    assert all(g.reused for g in again) and [g.text for g in again] == [g.text for g in first]
    assert not any(g.reused for g in sampled(later, 4)) and not any(g.reused for g in sampled(later, 3, 0.7))
    fresh = sampled(Engine(tiny_dir), 3)  # no store: the same seed draws the same answers
    assert [g.text for g in fresh] == [g.text for g in first]


def test_an_answer_decoded_in_fp32_is_not_reused_in_bf16(tiny_dir, tmp_path):
    fp32 = Engine(tiny_dir, answer_store=tmp_path / "answers", dtype="float32")
    fp32.generate(CONVS[:1], use_adapter=False, max_new_tokens=8, progress=False)
    bf16 = Engine(tiny_dir, answer_store=tmp_path / "answers", dtype="bfloat16")
    assert next(bf16.model.parameters()).dtype == torch.bfloat16 and bf16.precision == "bfloat16"
    assert not bf16.generate(CONVS[:1], use_adapter=False, max_new_tokens=8, progress=False)[0].reused
    assert fp32.generate(CONVS[:1], use_adapter=False, max_new_tokens=8, progress=False)[0].reused


def test_a_ranking_score_is_computed_once_and_equals_the_full_forward(tiny_dir, sft_start, tmp_path):
    """The decision evaluation's log-probabilities: scored from the completion's positions only, stored, read back
    by a later engine, and a different model or completion is a miss."""
    completions = ['{"action": "hold"}', '{"action": "ship"}']
    store = tmp_path / "answers"
    first = Engine(tiny_dir, answer_store=store)
    scores = first.completion_logprobs(CONVS[:2], completions, use_adapter=False)
    assert (first.store.scores_reused, first.store.scores_missed) == (0, 2) and len(_files(store)) == 2
    with torch.inference_mode():  # what the head on every position gives
        for conv, completion, score in zip(CONVS, completions, scores):
            prompt = first.encode(conv)
            full = first.tok.apply_chat_template(conv + [{"role": "assistant", "content": completion}],
                                                 tokenize=True, return_dict=True)["input_ids"]
            logp = torch.log_softmax(first.model(input_ids=torch.tensor([full])).logits[0, :-1].float(), dim=-1)
            expected = logp[len(prompt) - 1:].gather(1, torch.tensor(full[len(prompt):])[:, None]).sum()
            assert score == pytest.approx(float(expected), abs=1e-4)
    later = Engine(tiny_dir, *sft_start, answer_store=store)
    assert later.completion_logprobs(CONVS[:2], completions, use_adapter=False) == scores
    assert (later.store.scores_reused, later.store.scores_missed, later.store.hits) == (2, 0, 0)
    later.completion_logprobs(CONVS[:2], completions[::-1], use_adapter=False)
    later.completion_logprobs(CONVS[:2], completions, use_adapter=True)
    assert later.store.scores_missed == 4 and len(_files(store)) == 6


def test_a_torn_store_file_is_decoded_again(tiny_dir, tmp_path):
    store = tmp_path / "answers"
    engine = Engine(tiny_dir, answer_store=store)
    text = engine.generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False)[0].text
    (path,) = store.rglob("*.json")
    path.write_text('{"text": "half')
    g = Engine(tiny_dir, answer_store=store).generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False)[0]
    assert not g.reused and g.text == text and json.loads(path.read_text())["text"] == text


def test_the_candidate_and_the_base_model_do_not_share_answers(tiny_dir, sft_start, tmp_path):
    adapter, manifest = sft_start
    engine = Engine(tiny_dir, adapter, manifest, answer_store=tmp_path / "answers")
    engine.generate(CONVS[:1], use_adapter=False, max_new_tokens=16, progress=False)
    assert not engine.generate(CONVS[:1], use_adapter=True, max_new_tokens=16, progress=False)[0].reused
    assert engine.generate(CONVS[:1], use_adapter=True, max_new_tokens=16, progress=False)[0].reused


def test_prod_reuses_what_it_answered_as_the_candidate(tiny_dir, sft_start, tmp_path):
    """Round k's candidate is round k+1's prod: the same adapter bytes, pinned by its manifest then by the
    release bundle, which pins the model card too. Only what PEFT loads is in the key."""
    from clap.io import sha256_file

    adapter, manifest = sft_start
    store = tmp_path / "answers"
    first = Engine(tiny_dir, adapter, manifest, answer_store=store).generate(CONVS[:1], use_adapter=True,
                                                                             max_new_tokens=16, progress=False)[0]
    released = manifest | {"files": manifest["files"] | {"README.md": sha256_file(adapter / "README.md")}}
    prod = Engine(tiny_dir, prod_dir=adapter, prod_expected=released, answer_store=store)
    again = prod.generate(CONVS[:1], use_adapter="prod", max_new_tokens=16, progress=False)[0]
    assert again.reused and again.text == first.text
    weights = {"adapter_config.json": "c", "adapter_model.safetensors": "w"}
    assert model_id({"m": "a"}, weights) == model_id({"m": "a"}, weights | {"README.md": "r", "manifest.json": "m"})
    assert model_id({"m": "a"}, weights) != model_id({"m": "a"}, weights | {"adapter_model.safetensors": "x"})


def test_the_engine_knows_when_the_candidate_is_prods_own_adapter(tiny_dir, sft_start, tmp_path):
    """Evaluate writes `candidate_is_prod` from this: a promote of prod's own adapter replaces nothing, so the
    gate's rollback still stands (tests/release/test_gate.py)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from clap.io import sha256_file

    adapter, manifest = sft_start
    assert Engine(tiny_dir, adapter, manifest, prod_dir=adapter, prod_expected=manifest).same_adapter("candidate", "prod")
    other = tmp_path / "other"
    shutil.copytree(adapter, other)
    weights = other / "adapter_model.safetensors"
    save_file({k: v * 2 for k, v in load_file(weights).items()}, weights)
    pinned = manifest | {"files": manifest["files"] | {"adapter_model.safetensors": sha256_file(weights)}}
    engine = Engine(tiny_dir, other, pinned, prod_dir=adapter, prod_expected=manifest)
    assert not engine.same_adapter("candidate", "prod") and not engine.same_adapter("candidate", "missing")


@pytest.mark.parametrize("candidate, prod, same", [
    ({"adapter_config.json": "c", "adapter_model.safetensors": "w"},
     {"adapter_config.json": "c", "adapter_model.safetensors": "w", "README.md": "r"}, True),  # the bundle pins the card too
    ({"adapter_config.json": "c", "adapter_model.safetensors": "w"},
     {"adapter_config.json": "c", "adapter_model.safetensors": "x"}, False),
    ({"adapter_config.json": "c", "adapter_model.safetensors": "w"}, None, False),  # nothing in prod
])
def test_which_adapters_are_the_same_on_every_engine(candidate, prod, same):
    from clap.evaluate.generate_ray import RayEngine

    pins = {"candidate": candidate} | ({"prod": prod} if prod else {})
    assert same_adapter(pins, "candidate", "prod") is same
    ray = RayEngine({"adapter_dir": "a", "expected": {"files": candidate}, "prod_dir": "p" if prod else None,
                     "prod_expected": {"files": prod} if prod else None}, workers=1)
    assert ray.same_adapter("candidate", "prod") is same


@pytest.mark.parametrize("dvc_root, reuse, expected", [
    (None, True, "data/answer_store"),  # outside DVC: the current directory's
    ("/repo", True, "/repo/data/answer_store"),  # `dvc repro`, or a queued experiment's copy: the workspace's
    ("/repo", False, None),  # `generate.reuse_answers=false`: no store at all
])
def test_queued_experiments_share_the_store_of_the_workspace_they_came_from(params, monkeypatch, dvc_root, reuse,
                                                                           expected):
    from clap.evaluate.engines import answer_store

    if dvc_root is None:
        monkeypatch.delenv("DVC_ROOT", raising=False)
    else:
        monkeypatch.setenv("DVC_ROOT", dvc_root)
    store = answer_store(params.generate.model_copy(update={"reuse_answers": reuse}))
    assert (str(store) if store else None) == expected
