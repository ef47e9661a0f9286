from clap.domain import prompts
from clap.model import load_tokenizer
from clap.stages.train_sft import split_by_length


def _row(i, prompt):
    return {"batch": "b1", "sample_id": f"s{i}", "system": prompts.system_extract(["万元", "%"]), "prompt": prompt,
            "target": '{"value": 1}'}


def test_rows_longer_than_max_length_are_set_aside_by_name_not_truncated(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    rows = [_row(0, "Source:\nRevenue was 5."), _row(1, "来源：" + "收入为5万元。" * 200), _row(2, "Question: x")]
    fits, too_long = split_by_length(rows, tok, 256)
    assert [r["sample_id"] for r in fits] == ["s0", "s2"]
    assert [r["sample_id"] for r in too_long] == ["s1"] and too_long[0]["tokens"] > 256
    assert split_by_length(rows, tok, None) == (rows, [])  # padding-free: no window, nothing set aside
