"""How the extraction holdout is asked and scored: one definition that `clap evaluate` and the chain's evaluation
(`clap evaluate-decisions`) both answer through, so every step is scored on extraction the same way."""

from __future__ import annotations

import hashlib
import json

from clap.config import Evaluate
from clap.domain import prompts
from clap.evaluate.decoding import answer_schema
from clap.evaluate.metrics import parse_answer, score_sample


def extraction_schemas(constrained: bool, samples: list[dict]) -> list[dict] | None:
    """The answer schema per sample when `constrained` (`generate.constrained`); None: free decoding."""
    return [answer_schema([{"text": s["source"]}], with_location=False) for s in samples] if constrained else None


def answer(e: Evaluate, samples: list[dict], engine, use_adapter, name: str, batch: str,
           schemas: list[dict] | None) -> list[dict]:
    """One model's scored answers to the extraction samples (`use_adapter`: the engine's switch; `name`:
    the model name the records carry; `e`: the `evaluate` section; `schemas`: `extraction_schemas(…)`, built once per
    sample set) — what `evaluate` records per sample, reused by the chain's evaluation so every step is
    scored on extraction the same way."""
    weights = e.weights.model_dump()
    convs = [prompts.messages(s["system"], s["prompt"]) for s in samples]
    gens = engine.generate(convs, use_adapter=use_adapter, max_new_tokens=e.max_new_tokens,
                           batch_size=e.batch_size, schemas=schemas)
    rows = []
    for s, g in zip(samples, gens):
        pred = parse_answer(g.text)
        scores = score_sample(pred, json.loads(s["target"]), s["source"], weights, e.pass_rule)
        rows.append({"sample_id": s["sample_id"], "batch": batch, "model": name,
                     "input_hash": hashlib.sha256((s["system"] + s["prompt"]).encode()).hexdigest(),
                     "output": g.text, "parsed": pred, "new_tokens": g.new_tokens,
                     "latency_ms": round(g.latency_ms, 2), "reused": g.reused, **scores})
    return rows
