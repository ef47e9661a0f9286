import json

import pytest

from clap.evaluate.metrics import parse_answer, score_sample

SOURCE = ("恒达精密股份有限公司2023年采购报告，第1页。2023年，公司原材料采购总额为6,076.97万元。"
          "上年同期（2022年）该指标为5,120.40万元。")
GOLD = {"entity": "恒达精密股份有限公司", "metric": "原材料采购总额", "period": "2023", "value": 6076.97, "unit": "万元",
        "evidence": "2023年，公司原材料采购总额为6,076.97万元。"}
W = {"parse_ok": 0.1, "field_accuracy": 0.2, "value_accuracy": 0.3, "evidence_accuracy": 0.2, "target_match": 0.2}


def pred(**kw):
    return json.dumps(GOLD | kw, ensure_ascii=False)


@pytest.mark.parametrize("name, output, expect", [
    ("exact", pred(), {"value_accuracy": 1, "evidence_accuracy": 1, "target_match": 1, "hallucination_rate": 0,
                       "wrong_fact_rate": 0, "pass_rate": 1}),
    ("unit converted", pred(value=60769700, unit="元"), {"value_accuracy": 1, "hallucination_rate": 0,
                                                         "target_match": 0, "wrong_fact_rate": 0}),
    ("English unit spelling", pred(value="6,076.97", unit="RMB 10k"), {"value_accuracy": 1, "field_accuracy": 1}),
    ("fabricated evidence", pred(evidence="公司原材料采购总额为6,076.97万元，同比大增。"),
     {"value_accuracy": 1, "evidence_accuracy": 0, "hallucination_rate": 1, "pass_rate": 0}),
    ("distractor number", pred(value=5120.40, evidence="上年同期（2022年）该指标为5,120.40万元。"),
     {"value_accuracy": 0, "wrong_fact_rate": 1, "hallucination_rate": 0, "evidence_accuracy": 0}),
    ("right number, wrong unit", pred(unit="%"), {"value_accuracy": 0, "wrong_fact_rate": 0, "hallucination_rate": 0,
                                                  "field_accuracy": 0.75}),
    ("invented number", pred(value=9999.0), {"value_accuracy": 0, "hallucination_rate": 1, "wrong_fact_rate": 0}),
    ("value-bearing metric label", pred(metric="6,076.97，原材料采购总额"), {"field_accuracy": 1}),
    ("extra keys ignored", pred(confidence=0.9, note="x"), {"parse_ok": 1, "target_match": 1}),
    ("prose around JSON", "Sure! " + pred() + " Hope this helps.", {"parse_ok": 1, "target_match": 1}),
    ("unparseable", "The revenue was 6,076.97.", {"parse_ok": 0, "value_accuracy": 0, "overall_score": 0}),
    ("truncated JSON", pred()[:40], {"parse_ok": 0}),
    ("wrong period", pred(period="FY2022"), {"field_accuracy": 0.75, "target_match": 0, "value_accuracy": 1}),
])
def test_score_sample_hard_cases(name, output, expect):
    s = score_sample(parse_answer(output), GOLD, SOURCE, W)
    for k, v in expect.items():
        assert s[k] == pytest.approx(v), (name, k, s)


def test_parse_answer_handles_braces_in_strings():
    assert parse_answer('x {"evidence": "a } b", "v": 1} y') == {"evidence": "a } b", "v": 1}
    assert parse_answer("[1, 2]") is None and parse_answer("{bad} {\"ok\": 1}") == {"ok": 1}
