"""`clap serve` compiles a request's schema in a child process it can stop: the grammar is the one the engine would
compile itself, and a schema past the time or memory limit stops the child, not the server, and the next schema
compiles in a fresh one."""

import time

import pytest

from clap.evaluate.decoding import GrammarCache, answer_schema
from clap.serve.grammar_worker import GrammarLimit, GrammarWorker

CHUNK = {"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."}
SLOW = {"type": "object", "properties": {"a": {"enum": [f"value number {i} here" for i in range(10_000)]}},
        "required": ["a"]}  # seconds to compile for a 49k vocabulary: inside check_schema's bound, past a 1 s limit


@pytest.fixture(scope="module")
def grammars(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    return GrammarCache(tok, len(tok))


def test_the_worker_compiles_the_grammar_the_engine_would(grammars, tiny_dir):
    """Same rules, and the same token mask at every step of a valid answer (the serialised masks' unused bits differ
    from process to process, so the bytes are not compared)."""
    import json

    import xgrammar as xgr
    from transformers import AutoTokenizer

    worker = GrammarWorker(grammars.tokenizer_info, timeout_s=60, memory_mb=4096)
    try:
        schema = answer_schema([CHUNK], with_location=True)
        theirs, ours = worker.compile(schema), grammars.compiled(schema)
    finally:
        worker.close()
    assert str(theirs.grammar) == str(ours.grammar)
    small = {"type": "object", "properties": {"value": {"type": "number"}, "unit": {"enum": ["%", "万元"]}},
             "required": ["value", "unit"]}
    worker = GrammarWorker(grammars.tokenizer_info, timeout_s=60, memory_mb=4096)
    try:
        theirs, ours = worker.compile(small), grammars.compiled(small)
    finally:
        worker.close()
    tokens = AutoTokenizer.from_pretrained(tiny_dir)(json.dumps({"value": 7, "unit": "%"}))["input_ids"]
    matchers = [xgr.GrammarMatcher(theirs), xgr.GrammarMatcher(ours)]
    masks = xgr.allocate_token_bitmask(2, grammars.tokenizer_info.vocab_size)
    for token in tokens:
        for row, matcher in enumerate(matchers):
            matcher.fill_next_token_bitmask(masks, row)
        assert masks[0].equal(masks[1])
        assert [m.accept_token(token) for m in matchers] == [True, True]


def test_a_schema_past_the_time_limit_stops_the_child_and_the_next_compiles(grammars):
    worker = GrammarWorker(grammars.tokenizer_info, timeout_s=1.0, memory_mb=4096)
    try:
        worker.compile({"type": "object"})  # the child is up: the limit counts the compile alone
        started = time.perf_counter()
        with pytest.raises(GrammarLimit, match=r"did not compile within 1 s \(--grammar-timeout-s\)"):
            worker.compile(SLOW)
        assert time.perf_counter() - started < 15 and worker.stopped == 1
        assert worker.compile({"type": "object", "properties": {"b": {"type": "integer"}}}) is not None
    finally:
        worker.close()


def test_a_schema_past_the_memory_limit_is_refused_naming_it(grammars):
    worker = GrammarWorker(grammars.tokenizer_info, timeout_s=120, memory_mb=1024)
    try:
        worker.compile({"type": "object"})
        huge = {"type": "object", "properties": {"a": {"enum": [f"v{i} " * 40 for i in range(40_000)]}}}
        with pytest.raises(GrammarLimit, match=r"more than the 1024 MB compile limit \(--grammar-memory-mb\)"):
            worker.compile(huge)
        assert worker.compile({"type": "object"}) is not None  # a fresh child
    finally:
        worker.close()


def test_a_schema_xgrammar_refuses_is_a_value_error_not_a_limit(grammars):
    worker = GrammarWorker(grammars.tokenizer_info, timeout_s=60, memory_mb=4096)
    try:
        with pytest.raises(ValueError, match="response_format schema: ") as refused:
            worker.compile({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})
        assert not isinstance(refused.value, GrammarLimit) and worker.stopped == 0
    finally:
        worker.close()
