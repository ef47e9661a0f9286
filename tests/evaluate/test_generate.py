import pytest

from clap import prompts
from clap.evaluate.generate import Engine, json_end, plain_generate_loop, truncate_at_json_end
from clap.model import load_model, load_tokenizer


@pytest.mark.parametrize("text, end", [('{"a": 1} tail', 8), ('x {"a": "}"} y', 12), ('{"a": {"b": 2}}', 15),
                                       ('{"a": 1', None), ("no json", None), ('{"s": "\\"}"}z', 12)])
def test_json_end(text, end):
    assert json_end(text) == end


def test_batched_engine_matches_plain_loop(tiny_dir):
    convs = [prompts.messages(prompts.SYSTEM_EXTRACT, q) for q in
             ["Source:\nRevenue was 5.", "Source:\nA much longer source text, with several clauses; " * 4 + "\nQuestion: x",
              "短的问题？", "Question: what?", "Source:\n" + "数字 1,234.5 万元。" * 3]]
    engine = Engine(tiny_dir)
    got = [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=12, batch_size=3, progress=False)]
    ref = plain_generate_loop(load_model(tiny_dir), load_tokenizer(tiny_dir), convs, max_new_tokens=12)
    assert got == ref
    assert got == [truncate_at_json_end(t) for t in got]
