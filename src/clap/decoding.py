"""Schema-constrained decoding: the JSON schema of an answer, built per request, and its xgrammar grammar.

Evaluation and replay decode the way serving does: vLLM's default structured-output backend is
xgrammar, and `Engine.generate(..., schemas=...)` applies the same grammars through xgrammar's
Hugging Face logits processor. The schema comes from the contract (`prompts.ANSWER_KEYS`, the
canonical units) and, because the task is extractive, from what the model was shown: the evidence
is one sentence of the given sources, the value one of the numbers written in them, and `chunk_id` /
`doc_id` / `page` those of the retrieved chunks. A constrained model can still pick the wrong sentence or number; it can no longer invent a
quote, repeat a key or write `c08-annual-2022-p2 doc_id=… page=2` as a chunk id.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from clap.normalize import UNITS, numbers_in
from clap.prompts import ANSWER_KEYS, LOCATION_KEYS, RISK_FOCUS, json_number

# A sentence ends at 。！？； or at . ! ? ; followed by white space (so 332,291.58 and "Co." inside a
# company name stay whole). A sentence of a source is what an evidence quote may be.
_ABBREVIATIONS = ("Co", "Corp", "Inc", "Ltd", "No", "Nos", "vs", "approx")
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?;])" + "".join(rf"(?<!\b{a}\.)" for a in _ABBREVIATIONS) + r"\s+")
MAX_LABEL_CHARS = 40  # entity and metric are short labels; bounds a runaway string (CJK tokenises long)
MAX_PERIOD_CHARS = 16
MAX_FREE_QUOTE_CHARS = 120  # a quote with no source to pick from (the no-RAG arms); bounds its length
MAX_ACTION_CHARS = 100  # a recommended action is one imperative sentence


def sentences(text: str) -> list[str]:
    """The sentences of a source text, in order, without duplicates (pure)."""
    out: list[str] = []
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def answer_schema(sources: list[dict], with_location: bool) -> dict:
    """JSON schema of one answer to a question over `sources` (chunks with text, and for the
    application chain chunk_id / doc_id / page). No sources (the no-RAG arms) leaves evidence and
    location free but bounded: the model must still answer in the contract's shape."""
    quotes = [s for src in sources for s in sentences(src["text"])]
    numbers = sorted({json_number(v) for src in sources for v in numbers_in(src["text"])})
    short = {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS}
    props = {"entity": short, "metric": short,
             "period": {"type": "string", "minLength": 1, "maxLength": MAX_PERIOD_CHARS},
             "value": {"enum": numbers} if numbers else {"type": "number"},
             "unit": {"enum": sorted(UNITS)},
             "evidence": {"enum": quotes} if quotes else {"type": "string", "minLength": 1, "maxLength": MAX_FREE_QUOTE_CHARS}}
    if with_location:
        if sources:
            props |= {"chunk_id": {"enum": sorted({s["chunk_id"] for s in sources})},
                      "doc_id": {"enum": sorted({s["doc_id"] for s in sources})},
                      "page": {"enum": sorted({int(s["page"]) for s in sources})}}
        else:
            props |= {"chunk_id": short, "doc_id": short, "page": {"type": "integer", "minimum": 1}}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def decision_schema(cause_fields: list[str], actions: list[str] | None = None) -> dict:
    """JSON schema of a recommendation: the action one of the playbook's `actions` (a bounded free
    sentence without one), the cause one of the case's cause fields, the risk focus one of the
    contract's (`prompts.RISK_FOCUS`); keys in `prompts.DECISION_KEYS` order."""
    props = {"action": {"enum": list(actions)} if actions else
             {"type": "string", "minLength": 1, "maxLength": MAX_ACTION_CHARS},
             "cause": {"enum": list(cause_fields)} if cause_fields else
             {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS},
             "risk_focus": {"enum": list(RISK_FOCUS)}}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def contract_valid(answer: dict | None, with_location: bool = False) -> bool:
    """Whether a parsed answer has exactly the contract's keys, in order, with values of the right type (pure)."""
    keys = ANSWER_KEYS + (LOCATION_KEYS if with_location else ())
    if not isinstance(answer, dict) or tuple(answer) != keys:
        return False
    text_ok = all(isinstance(answer[k], str) and answer[k].strip() for k in ("entity", "metric", "period", "evidence"))
    number_ok = isinstance(answer["value"], int | float) and not isinstance(answer["value"], bool)
    location_ok = not with_location or (isinstance(answer["chunk_id"], str) and isinstance(answer["doc_id"], str)
                                        and isinstance(answer["page"], int) and not isinstance(answer["page"], bool))
    return text_ok and number_ok and answer["unit"] in UNITS and location_ok


class GrammarCache:
    """Compiles schemas for one tokenizer with xgrammar, once per distinct schema."""

    def __init__(self, tokenizer, vocab_size: int):
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info, max_threads=2)
        self._compile = lru_cache(maxsize=4096)(self._compile_text)

    def _compile_text(self, schema_text: str):
        # Compact separators: the training targets are `json.dumps` output, keys in contract order.
        return self._compiler.compile_json_schema(schema_text, any_whitespace=False, strict_mode=True)

    def compiled(self, schema: dict):
        return self._compile(json.dumps(schema, ensure_ascii=False, sort_keys=False))

    def processor(self, schemas: list[dict]):
        """A fresh logits processor for one `generate` call, one grammar per row."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor([self.compiled(s) for s in schemas])
