"""The decision evaluation: hand-computed scores and ranking, comparisons, records; the log-probability
the ranking rests on, on a tiny model."""

import json

import pytest
import torch

from clap.config import Rewards
from clap.domain import prompts
from clap.evaluate.generate import Engine, Generation
from clap.io import read_json, read_jsonl, write_jsonl
from clap.stages import evaluate_decisions as stage
from clap.train import decision_eval

REF = {"action": "Expedite the delayed supplier", "cause": "supplier_delay_days", "risk_focus": "delivery"}
NEAR = {**REF, "cause": "demand_drop_pct", "risk_focus": "cash"}
REJ = {"action": "Cut the next purchase order", "cause": "demand_drop_pct", "risk_focus": "cash"}
REWARDS = Rewards(weights={"outcome": 0.5, "format": 0.2, "grounding": 0.2, "efficiency": 0.1}, max_chars=400)


def case(i, batch="b1"):
    graded = [{"role": r, "text": json.dumps(t), "reward": 0.0} for r, t in (("chosen", REF), ("near_miss", NEAR),
                                                                            ("rejected", REJ))]
    return {"case_id": f"dc-d{i}", "record_id": f"d{i}", "batch": batch,
            "prompt": prompts.decision_prompt("Plant 1 holds backlog.", json.dumps(
                {"demand_drop_pct": 3, "excess_safety_stock_days": 2, "supplier_delay_days": 30})),
            "reference_json": json.dumps(REF), "candidates_json": json.dumps(graded)}


class FakeEngine:
    """Canned answers and log-probabilities per model: base answers prose, sft gets the cause wrong on
    d1, dpo is right everywhere and ranks every case in order."""

    def __init__(self):
        self.calls = []

    def generate(self, convs, use_adapter, max_new_tokens, batch_size, schemas):
        self.calls.append((use_adapter, schemas))
        out = []
        for conv in convs:
            d1 = "Plant 2" in conv[-1]["content"]
            text = {False: "Expedite.", "sft": json.dumps(NEAR if d1 else REF), "dpo": json.dumps(REF),
                    "grpo": json.dumps(REF)}[use_adapter]
            out.append(Generation(text=text, new_tokens=10, latency_ms=5.0))
        return out

    def completion_logprobs(self, convs, completions, use_adapter):
        rank = {"chosen": 0, "near_miss": 1, "rejected": 2}
        role = {json.dumps(REF): "chosen", json.dumps(NEAR): "near_miss", json.dumps(REJ): "rejected"}
        order = {False: (-3.0, -2.0, -1.0), "sft": (-1.0, -2.0, -3.0), "dpo": (-1.0, -4.0, -9.0),
                 "grpo": (-1.0, -2.0, -3.0)}[use_adapter]
        return [order[rank[role[c]]] for c in completions]


def test_run_writes_metrics_deltas_and_regressions(params, tmp_path):
    files = {}
    for b, cases in (("b1", [case(0, "b1")]), ("b2", [case(1, "b2") | {"prompt": case(1)["prompt"].replace(
            "Plant 1", "Plant 2")}])):
        files[b] = tmp_path / b / "decision_eval.jsonl"
        files[b].parent.mkdir()
        write_jsonl(files[b], cases)
    engine = FakeEngine()
    result = stage.run(params.evaluate_decisions, files, engine, ["base", "sft", "dpo"], tmp_path / "out", tmp_path / "decisions.json", evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
    assert result == read_json(tmp_path / "decisions.json") | {}
    m = result["models"]
    assert m["base"]["decision_pass"] == 0.0 and m["base"]["rank_accuracy"] == 0.0
    assert m["sft"]["decision_pass"] == 0.5 and m["sft"]["rank_accuracy"] == 1.0
    assert m["dpo"]["decision_pass"] == 1.0 and m["dpo"]["margin_chosen_rejected"] == 8.0
    assert result["deltas"]["dpo-sft"]["decision_pass"]["delta"] == 0.5
    assert result["per_batch"]["b2"]["sft"]["cause_accuracy"] == 0.0
    assert result["per_batch_deltas"]["b2"]["dpo-sft"]["decision_score"]["delta"] > 0
    regressed = read_jsonl(tmp_path / "out" / "regressed.jsonl")
    assert regressed == [] and result["regressed_cases"] == {"sft": 0, "dpo": 0}
    records = read_jsonl(tmp_path / "out" / "records.jsonl")
    assert len(records) == 6 and {r["model"] for r in records} == {"base", "sft", "dpo"}
    schema = engine.calls[0][1][0]
    assert schema["properties"]["cause"]["enum"] == ["demand_drop_pct", "excess_safety_stock_days", "supplier_delay_days"]
    assert schema["properties"]["risk_focus"]["enum"] == list(prompts.RISK_FOCUS)


def test_run_lists_a_step_that_fails_where_sft_passed(params, tmp_path):
    class Worse(FakeEngine):
        def generate(self, convs, use_adapter, **kw):
            gens = super().generate(convs, use_adapter, **kw)
            return [Generation(json.dumps(REJ), 1, 1.0) for _ in gens] if use_adapter == "dpo" else gens

    f = tmp_path / "b1.jsonl"
    write_jsonl(f, [case(0)])
    result = stage.run(params.evaluate_decisions, {"b1": f}, Worse(), ["base", "sft", "dpo"], tmp_path / "o", tmp_path / "m.json", evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
    (row,) = read_jsonl(tmp_path / "o" / "regressed.jsonl")
    assert row["model"] == "dpo" and row["reason"] == "dpo_failed_where_sft_passed"
    assert result["regressed_cases"]["dpo"] == 1


def test_completion_logprobs_is_the_sum_over_the_answer_tokens(tiny_dir):
    engine = Engine(tiny_dir)
    conv = prompts.messages(prompts.SYSTEM_DECIDE, "Case: x\nCause fields: {}")
    answer = json.dumps(REF)
    (lp,) = engine.completion_logprobs([conv], [answer], use_adapter=False)
    prompt = engine.encode(conv)
    full = engine.tok.apply_chat_template(conv + [{"role": "assistant", "content": answer}], tokenize=True,
                                          return_dict=True)["input_ids"]
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([full])).logits[0]
    expected = sum(torch.log_softmax(logits[i - 1].float(), -1)[full[i]].item() for i in range(len(prompt), len(full)))
    assert lp == pytest.approx(expected, abs=1e-3) and lp < 0


def test_the_playbook_is_the_training_cases_actions_and_the_schema_offers_only_those(params, tmp_path):
    (tmp_path / "b1").mkdir()
    write_jsonl(tmp_path / "b1" / "decision_eval.jsonl", [case(0)])
    write_jsonl(tmp_path / "b1" / "grpo_groups.jsonl", [
        {"group_id": f"g{i}", "record_id": f"d{9 + i}", "prompt": "p", "candidates_json": "[]",
         "reference_json": json.dumps({**REF, "action": a})} for i, a in enumerate(["B act", "A act", "B act"])])
    assert stage.playbook({"b1": tmp_path / "b1" / "decision_eval.jsonl"}) == ["A act", "B act"]
    engine = FakeEngine()
    result = stage.run(params.evaluate_decisions, {"b1": tmp_path / "b1" / "decision_eval.jsonl"}, engine, ["base"], tmp_path / "o",
                       tmp_path / "m.json", evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
    assert engine.calls[0][1][0]["properties"]["action"] == {"enum": ["A act", "B act"]}
    assert result["action_playbook"] == ["A act", "B act"]


def _extraction_sample(i, batch):
    source = f"Acme Co. Annual Report 2021, page 1. Revenue for FY2021 was {100 + i} million yuan."
    target = {"entity": "Acme Co.", "metric": "Revenue", "period": "2021", "value": 100 + i, "unit": "百万元",
              "evidence": source.split(". ", 1)[1]}
    return {"sample_id": f"s{batch}{i}", "record_id": f"f{i}", "batch": batch, "system": prompts.system_extract(["万元", "%"]),
            "prompt": f"Source:\n{source}\nQuestion: Acme's revenue in FY2021?", "source": source,
            "target": json.dumps(target, ensure_ascii=False)}


def test_later_steps_are_scored_on_extraction_against_the_sft_answers_evaluate_recorded(params, tmp_path):
    """DPO answers the extraction holdout right, GRPO answers prose; SFT's answers are evaluate's candidate
    records (not generated again). The deltas are step − SFT, pooled and per batch."""
    from clap.evaluate.metrics import score_sample

    class Engine(FakeEngine):
        def generate(self, convs, use_adapter, **kw):
            if "Source:" not in convs[0][-1]["content"]:
                return super().generate(convs, use_adapter, **kw)
            self.calls.append((use_adapter, "extraction"))
            gold = {s["prompt"]: s["target"] for s in samples}
            return [Generation(gold[c[-1]["content"]] if use_adapter == "dpo" else "Revenue grew.", 5, 1.0)
                    for c in convs]

    cases, extraction_files, samples = {}, {}, []
    for b in ("b1", "b2"):
        (tmp_path / b).mkdir()
        write_jsonl(tmp_path / b / "decision_eval.jsonl", [case(int(b[1]), b)])
        cases[b] = tmp_path / b / "decision_eval.jsonl"
        batch = [_extraction_sample(i, b) for i in range(3)]
        samples += batch
        write_jsonl(tmp_path / b / "sft_eval.jsonl", batch)
        sft_rows = [{"sample_id": s["sample_id"], "batch": b, "model": m, **score_sample(
            {"entity": "Acme Co.", "value": 1}, json.loads(s["target"]), s["source"], params.evaluate.weights.model_dump(),
            params.evaluate.pass_rule)} for s in batch for m in ("baseline", "candidate")]
        write_jsonl(tmp_path / b / "records.jsonl", sft_rows)
        extraction_files[b] = (tmp_path / b / "sft_eval.jsonl", tmp_path / b / "records.jsonl")
    engine = Engine()
    result = stage.run(params.evaluate_decisions, cases, engine, ["base", "sft", "dpo", "grpo"], tmp_path / "out", tmp_path / "m.json",
                       extraction_files, evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
    ext = result["extraction"]
    assert ext["n"] == 6 and [c for c in engine.calls if c[1] == "extraction"] == [
        ("dpo", "extraction"), ("grpo", "extraction")] * 2  # SFT is read, not generated
    assert ext["models"]["dpo"]["overall_score"] == 1.0 and ext["models"]["grpo"]["parse_ok"] == 0.0
    assert ext["deltas"]["dpo-sft"]["overall_score"]["delta"] > 0 > ext["deltas"]["grpo-sft"]["overall_score"]["delta"]
    assert ext["per_batch_deltas"]["b2"]["grpo-sft"]["overall_score"]["n"] == 3
    records = read_jsonl(tmp_path / "out" / "extraction_records.jsonl")
    assert len(records) == 12 and {r["model"] for r in records} == {"dpo", "grpo"}
    (tmp_path / "b2" / "records.jsonl").write_text("")
    with pytest.raises(decision_eval.ExtractionRecordsMissing, match=r"b2/records.jsonl: the SFT adapter's answer to sb20"):
        stage.run(params.evaluate_decisions, cases, Engine(), ["base", "sft", "dpo"], tmp_path / "out", tmp_path / "m.json", extraction_files, evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
