"""Continuous batching on a tiny model: rows that join a running batch at a later step decode the answers they get
alone (under a grammar and free), a cancelled row leaves without changing the others, and through `clap serve` a
request joins a batch that is already decoding."""

import json

import pytest
from tests.helpers.namesakes import EQUITY_ROWS, asking, saying

from clap.domain import prompts
from clap.evaluate.continuous import Row, RunningBatch
from clap.evaluate.decoding import answer_schema

CHUNK = {"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."}
QUESTIONS = ["Revenue?", "Margin?", "Both?", "Revenue in 2024?", "What was the margin?"]
SCHEMA = answer_schema([CHUNK], with_location=True)


@pytest.fixture(scope="module")
def engine(tiny_dir, sft_start):
    from clap.evaluate.generate import Engine

    adapter, manifest = sft_start
    return Engine(tiny_dir, adapter, manifest)


def _messages(question):
    return prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(question, [CHUNK]))


def _rows(engine, questions, constrained: bool, max_new_tokens: int, done: dict):
    import xgrammar as xgr

    rows = []
    for i, q in enumerate(questions):
        matcher = xgr.GrammarMatcher(engine.grammars.compiled(SCHEMA)) if constrained else None
        rows.append(Row(engine.encode(_messages(q)), max_new_tokens - i, matcher,  # limits differ row to row
                        on_done=lambda row, i=i: done.__setitem__(i, row.tokens),
                        text_of=None if constrained else lambda t: engine.tok.decode(t, skip_special_tokens=True)))
    return rows


def _batch(engine):
    eos = engine.model.generation_config.eos_token_id
    return RunningBatch(engine.model, engine.tok.pad_token_id, set(eos if isinstance(eos, list) else [eos]),
                        vocab_size=engine.grammars.tokenizer_info.vocab_size)


@pytest.mark.parametrize("constrained", [True, False])
def test_rows_that_join_later_decode_the_answers_they_get_alone(engine, constrained):
    from clap.evaluate.generate import truncate_at_json_end

    limit = 20
    alone = [engine.generate([_messages(q)], use_adapter=True, max_new_tokens=limit - i, batch_size=1, progress=False,
                             schemas=[SCHEMA] if constrained else None, use_store=False)[0]
             for i, q in enumerate(QUESTIONS)]
    done: dict[int, list[int]] = {}
    rows = _rows(engine, QUESTIONS, constrained, limit, done)
    batch = _batch(engine)
    with engine.adapter_context(True):
        batch.admit(rows[:2])
        sizes = []
        for step in range(200):
            if step == 3:
                batch.admit(rows[2:4])  # two join a batch three steps in
            if step == 6:
                batch.admit(rows[4:])
            sizes.append(len(batch.rows))
            if not batch.rows and step > 6:
                break
            if batch.rows:
                batch.step()
    assert max(sizes) >= 3  # rows that joined decoded beside the first ones
    got = [truncate_at_json_end(engine.tok.decode(done[i], skip_special_tokens=True)) for i in range(len(QUESTIONS))]
    assert got == [a.text for a in alone]
    assert [len(done[i]) for i in range(len(QUESTIONS))] == [a.new_tokens for a in alone]
    assert min(a.new_tokens for a in alone) > 6  # every row was still decoding when the others joined


def test_a_cancelled_row_leaves_and_the_others_are_unchanged(engine):
    done: dict[int, list[int]] = {}
    rows = _rows(engine, QUESTIONS[:3], True, 20, done)
    stop = {"now": False}
    rows[1].cancelled = lambda: stop["now"]
    batch = _batch(engine)
    with engine.adapter_context(True):
        batch.admit(rows)
        batch.step()
        stop["now"] = True
        while batch.rows:
            batch.step()
    alone = [engine.generate([_messages(q)], use_adapter=True, max_new_tokens=20 - i, batch_size=1, progress=False,
                             schemas=[SCHEMA], use_store=False)[0] for i, q in enumerate(QUESTIONS[:3])]
    assert len(done[1]) <= 2 < alone[1].new_tokens
    assert [engine.tok.decode(done[i], skip_special_tokens=True) for i in (0, 2)] == [alone[0].text, alone[2].text]


def test_a_row_narrows_its_grammar_once_its_metric_is_written_as_the_engine_does(engine):
    """`clap serve`'s running batch narrows a row's evidence to the quotes naming its metric
    (`generate.evidence_names_metric`) the way `Engine.generate` does."""
    from clap.evaluate.generate import truncate_at_json_end

    schema, messages = saying("Total equity"), asking("Total equity")
    engine.evidence_names_metric = True
    try:
        alone = engine.generate([messages], use_adapter=True, max_new_tokens=120, progress=False, schemas=[schema],
                                use_store=False)[0]
        import xgrammar as xgr

        done: dict[int, list[int]] = {}
        row = Row(engine.encode(messages), 120, xgr.GrammarMatcher(engine.grammars.compiled(schema)),
                  on_done=lambda r: done.__setitem__(0, r.tokens), narrowing=engine.narrowing(schema))
        batch = _batch(engine)
        with engine.adapter_context(True):
            batch.admit([row])
            while batch.rows:
                batch.step()
    finally:
        engine.evidence_names_metric = False
    got = truncate_at_json_end(engine.tok.decode(done[0], skip_special_tokens=True))
    assert got == alone.text and json.loads(got)["evidence"] in EQUITY_ROWS
