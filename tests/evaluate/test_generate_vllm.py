"""vLLM backend: the backend choice, and what the engine hands vLLM (a stand-in `vllm` module records it).

The real vLLM run is in tests/test_gpu.py (needs CUDA and the `vllm` extra).
"""

import sys
import types

import pytest

from clap.domain import prompts
from clap.evaluate.generate_vllm import VLLMEngine, choose_backend
from clap.integrity import AdapterRefused


@pytest.mark.parametrize("requested, installed, cuda, expected", [
    ("auto", True, True, "vllm"), ("auto", True, False, "hf"), ("auto", False, True, "hf"), ("auto", False, False, "hf"),
    ("hf", True, True, "hf"), ("vllm", True, True, "vllm"),
])
def test_choose_backend(requested, installed, cuda, expected):
    assert choose_backend(requested, installed, cuda) == expected


@pytest.mark.parametrize("installed, cuda, missing", [
    (False, True, "needs the vllm package (pip install -e '.[vllm]')"),
    (True, False, "needs a CUDA device"),
    (False, False, "needs the vllm package (pip install -e '.[vllm]') and a CUDA device"),
])
def test_asking_for_vllm_without_it_says_what_is_missing(installed, cuda, missing):
    with pytest.raises(RuntimeError) as refused:
        choose_backend("vllm", installed, cuda)
    assert missing in str(refused.value)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="auto, hf or vllm"):
        choose_backend("tgi", True, True)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module whose LLM answers a JSON object followed by chatter, and records every call."""
    calls = {"init": [], "generate": []}

    class LLM:
        def __init__(self, **kwargs):
            calls["init"].append(kwargs)

        def generate(self, prompts_, params, lora_request=None, use_tqdm=True):
            calls["generate"].append({"prompts": prompts_, "params": params, "lora": lora_request})
            answer = calls.get("answer", lambda _: '{"value": 1, "unit": "%"} and then more words')
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=answer(p), token_ids=list(range(12)))])
                    for p in params]

    class SamplingParams:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class LoRARequest:
        def __init__(self, name, int_id, path):
            self.name, self.int_id, self.path = name, int_id, path

    class StructuredOutputsParams:
        def __init__(self, json):
            self.json = json

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = StructuredOutputsParams
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    return calls


def test_engine_sends_our_prompt_ids_greedy_and_cuts_at_the_json_end(fake_vllm, tiny_dir):
    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), q) for q in ["Source:\nRevenue was 5.", "短的问题？", "Question: x"]]
    engine = VLLMEngine(tiny_dir)
    got = engine.generate(convs, use_adapter=False, max_new_tokens=40, batch_size=2, progress=False)
    init = fake_vllm["init"][0]
    assert init["trust_remote_code"] is False and init["enable_lora"] is False and init["model"] == str(tiny_dir)
    sent = [p["prompt_token_ids"] for call in fake_vllm["generate"] for p in call["prompts"]]
    assert sent == [engine.encode(m) for m in convs]
    assert [len(c["prompts"]) for c in fake_vllm["generate"]] == [2, 1]  # groups of the configured concurrency
    assert all(p.temperature == 0.0 and p.max_tokens == 40 and c["lora"] is None and not hasattr(p, "structured_outputs")
               for c in fake_vllm["generate"] for p in c["params"])
    assert [g.text for g in got] == ['{"value": 1, "unit": "%"}'] * 3
    assert all(0 < g.new_tokens < 12 for g in got)  # tokens up to the JSON end, not the chatter after it
    with pytest.raises(ValueError, match="no adapter"):
        engine.generate(convs, use_adapter=True, progress=False)


def test_each_request_carries_its_own_json_schema(fake_vllm, tiny_dir):
    """Constrained decoding in vLLM: one structured-output request per prompt, its own schema."""
    from clap.evaluate.decoding import answer_schema

    chunks = [{"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 5."},
              {"chunk_id": "c2-p1", "doc_id": "c2", "page": 1, "text": "Margin was 7%."}]
    schemas = [answer_schema([c], with_location=True) for c in chunks]
    convs = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("q", [c])) for c in chunks]
    VLLMEngine(tiny_dir).generate(convs, use_adapter=False, batch_size=1, progress=False, schemas=schemas)
    sent = [p.structured_outputs.json for c in fake_vllm["generate"] for p in c["params"]]
    assert sent == schemas


def test_candidate_runs_as_a_verified_lora_request(fake_vllm, tiny_dir, tmp_path, monkeypatch):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    checked = []
    monkeypatch.setattr("clap.evaluate.generate_vllm.verify_adapter", lambda d, expected, ident: checked.append((d, expected)))
    pinned = {"files": {"adapter_model.safetensors": "ab" * 32}, "base": "tiny"}
    engine = VLLMEngine(tiny_dir, adapter, pinned, base_identity={"base": "tiny"})
    engine.generate([prompts.messages(prompts.system_extract(["万元", "%"]), "q")], use_adapter=True, progress=False)
    engine.generate([prompts.messages(prompts.system_extract(["万元", "%"]), "q")], use_adapter=False, progress=False)
    assert checked == [(adapter, pinned)]
    assert not engine.same_adapter("candidate", "prod")  # no prod loaded
    assert fake_vllm["init"][0]["enable_lora"] is True
    first, second = fake_vllm["generate"]
    assert first["lora"].path == str(adapter) and second["lora"] is None


def test_adapter_without_pinned_evidence_is_refused_before_vllm_loads(fake_vllm, tiny_dir, tmp_path):
    (tmp_path / "adapter").mkdir()
    with pytest.raises(AdapterRefused, match="no pinned evidence"):
        VLLMEngine(tiny_dir, tmp_path / "adapter")
    assert fake_vllm["init"] == []


def test_an_answer_quoting_a_namesake_of_its_metric_is_decoded_again_under_the_narrowed_schema(fake_vllm, tiny_dir):
    """`generate.evidence_names_metric` on vLLM, which cannot change a request's grammar mid-answer: an answer whose
    evidence does not name the metric it wrote, where another quote does, is asked again under the narrowed schema
    (greedy: the answer the HF engine's narrowing gives in one pass); one that names it is asked once."""
    import json

    from clap.evaluate.decoding import answer_schema, naming_alternatives

    page = "US$’000\nTotal assets | 2019: 383,665\nEquity: Total equity | 2019: 228,144"
    schema = answer_schema([{"text": page}], with_location=False)
    narrowed = naming_alternatives(schema, "Total equity")

    def answer(params) -> str:  # the model quotes the first quote its grammar offers
        first = params.structured_outputs.json.get("anyOf", [params.structured_outputs.json])[0]["properties"]
        return json.dumps({"entity": "X", "metric": "Total equity", "period": "2019",
                           "evidence": first["evidence"]["const"], "value": 1, "unit": ""})

    fake_vllm["answer"] = answer
    convs = [prompts.messages(prompts.system_extract(["thousand USD"]), f"Source:\n{page}\nQuestion: {q}")
             for q in ("Total equity?", "Equity?")]
    got = VLLMEngine(tiny_dir, evidence_names_metric=True).generate(convs, use_adapter=False, progress=False,
                                                                     schemas=[schema, narrowed])
    assert [json.loads(g.text)["evidence"] for g in got] == ["Equity: Total equity | 2019: 228,144"] * 2
    asked = [[p.structured_outputs.json for p in c["params"]] for c in fake_vllm["generate"]]
    assert asked == [[schema, narrowed], [narrowed]]  # the first answer again, narrowed; the second stood
    fake_vllm["generate"].clear()
    VLLMEngine(tiny_dir).generate(convs, use_adapter=False, progress=False, schemas=[schema, narrowed])
    assert len(fake_vllm["generate"]) == 1  # without the setting every answer is asked once
