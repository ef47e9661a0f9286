"""replay: the ABCD application-chain experiment (docs/design.md §4) on the replay cases of every batch.

    clap replay                (DVC stage `replay`, writes data/replay/ and metrics/replay.json)

A: base + RAG, B: adapter + RAG, C: base alone, D: adapter alone (and P: the adapter in prod + RAG,
when one is) — same backbone, same cases, the
application's prompt (retrieved chunks tagged with chunk id, doc and page) for A and B, the
question alone for C and D. If C and D recover values, the corpus leaks answers; if B beats A only
with retrieval, the adapter is a structured-output enhancer that requires RAG. `contrasts` holds
B − A, D − C (and B − P) per answer metric with paired-bootstrap CIs (cases paired across arms). With
`generate.constrained` every arm decodes under the answer schema built from its own prompt. `latency` times B's
requests afresh against the gate's reference (P when an adapter is in prod, else A), interleaved
(`clap.evaluate.latency`): the one timing the gate's `p95_latency_ratio` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from clap import paths
from clap.config import Evaluate, Params, Replay, Retrieval
from clap.domain import prompts
from clap.domain.names import PROD_ARM, REPLAY_ANSWER_METRICS, REPLAY_ARMS, REPLAY_CONTRASTS, REPLAY_METRICS
from clap.evaluate.decoding import answer_schema
from clap.evaluate.engines import reuse_lines, said_extraction_engine
from clap.evaluate.latency import paired_latency
from clap.evaluate.metrics import parse_answer
from clap.evaluate.replay import score_case
from clap.evaluate.stats import p95, paired_bootstrap
from clap.evaluate.summary import abcd_table, contrast_lines, latency_line
from clap.io import atomic_dir, check_output_dir, read_jsonl, require_inputs, write_json, write_jsonl
from clap.retrieval import BM25Index, retrieve
from clap.stages.spec import StageSpec

if TYPE_CHECKING:  # the engine is built in `main` (torch is imported there, not when `clap --help` lists commands)
    from clap.evaluate.generate import Engine


def requests(cases: list[dict], contexts: list[list[dict]], constrained: bool) -> tuple[list, list | None]:
    """The application's requests: each case's question over its retrieved chunks (none for the arms without
    retrieval), and with `constrained` the answer schema built from what the model was shown."""
    convs = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(c["question"], ctx))
             for c, ctx in zip(cases, contexts)]
    return convs, [answer_schema(ctx, with_location=True) for ctx in contexts] if constrained else None


def run(r: Replay, assets: Path, materialized: Path, index_dir: Path, engine: Engine, out: Path,
        metrics_file: Path, *, retrieval: Retrieval, evaluate: Evaluate, batches: list[str], constrained: bool) -> dict:
    """`r`: the `replay` section; `retrieval` finds each case's chunks; `evaluate`: the intervals; `batches`: the
    replay cases' batches (`data.batches`); `constrained`: answers under the answer schema (`generate.constrained`)."""
    check_output_dir(out, (assets, materialized, index_dir))
    chunks = pd.read_parquet(Path(assets) / "chunks.parquet")
    by_id = {c["chunk_id"]: c for c in chunks.to_dict("records")}
    cases = [c for b in batches for c in read_jsonl(Path(materialized) / b / "replay_cases.jsonl")]
    bm25 = BM25Index.load(Path(index_dir) / "bm25")
    hits = retrieve(retrieval, bm25, chunks, [c["question"] for c in cases])
    records, table, asked = [], {}, {}
    arms = REPLAY_ARMS | (PROD_ARM if "prod" in getattr(engine, "adapters", []) else {})
    for arm, (adapter, rag) in arms.items():
        contexts = [[by_id[h] for h in hit] if rag else [] for hit in hits]
        convs, schemas = asked[arm] = requests(cases, contexts, constrained)
        gens = engine.generate(convs, use_adapter=adapter, max_new_tokens=r.max_new_tokens,
                               batch_size=r.batch_size, schemas=schemas)
        rows = []
        for c, ctx, g in zip(cases, contexts, gens):
            scores = score_case(parse_answer(g.text), json.loads(c["target"]), ctx)
            rows.append({"case_id": c["case_id"], "batch": c["batch"], "arm": arm, "output": g.text,
                         "retrieved": [x["chunk_id"] for x in ctx], "latency_ms": round(g.latency_ms, 2), "reused": g.reused, **scores})
        n = len(rows) or 1
        table[arm] = {m: round(sum(x[m] for x in rows) / n, 4) for m in REPLAY_METRICS}
        table[arm]["p95_latency_ms"] = p95([x["latency_ms"] for x in rows])
        records += rows
    by_arm = {arm: [x for x in records if x["arm"] == arm] for arm in arms}
    latency = _latency(r, engine, *asked["B"], prod="P" in arms)
    e = evaluate
    contrasts = {name: {m: paired_bootstrap([x[m] for x in by_arm[ref]], [x[m] for x in by_arm[new]],
                                            n=e.bootstrap, ci=e.ci, seed=17) for m in REPLAY_ANSWER_METRICS}
                 for name, (ref, new) in REPLAY_CONTRASTS.items() if ref in arms}
    failed = [{"case_id": b["case_id"], "batch": b["batch"], "reason": "adapter_with_rag_missed_core_fields",
               "output": b["output"], "target": c["target"]}
              for c, b in zip(cases, [x for x in records if x["arm"] == "B"]) if b["core_fields_exact"] == 0.0]
    with atomic_dir(out, (assets, materialized, index_dir)) as tmp:
        write_jsonl(tmp / "records.jsonl", records)
        write_jsonl(tmp / "failed_cases.jsonl", failed)
    write_json(metrics_file, {"n_cases": len(cases), "constrained": constrained, "arms": table,
                              "contrasts": contrasts, "latency": latency})
    return {"arms": table, "contrasts": contrasts, "latency": latency}


def _latency(r: Replay, engine: Engine, convs: list, schemas: list | None, *, prod: bool) -> dict:
    """{reference: paired timing} of the candidate on B's requests (with retrieval, as B asked them) against the
    gate's reference: prod + RAG when an adapter is in prod, else base + RAG."""
    reference, switch = ("prod", "prod") if prod else ("baseline", False)
    return {reference: paired_latency(engine, convs, schemas, switch, True, r.latency_requests, r.max_new_tokens)}


def main(params: Params, adapter: Path = paths.adapter("sft"), prod: Path | None = None,
         assets: Path = paths.ASSETS, materialized: Path = paths.MATERIALIZED, index_dir: Path = paths.INDEX,
         out: Path = paths.REPLAY, metrics: Path = paths.REPLAY_METRICS) -> Iterator:
    """The ABCD application-chain replay: base/adapter × with/without retrieval (and prod + RAG when in prod)."""
    batches = params.data.batches
    require_inputs([(assets, "dvc repro assetize"), (index_dir, "dvc repro index"), (adapter, "dvc repro train_sft"),
                    *[(materialized / b, f"dvc repro materialize@{b}") for b in batches]])
    engine = yield from said_extraction_engine(params.generate, params.model, adapter, prod)
    result = run(params.replay, assets, materialized, index_dir, engine, out, metrics, retrieval=params.retrieval,
                 evaluate=params.evaluate, batches=batches, constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    yield abcd_table(result["arms"])
    yield from (f"{name}: {line}" for name, line in contrast_lines(result).items())
    yield latency_line(result["latency"])


STAGE = StageSpec(name="replay", group="evaluate", main=main, helps={
    "prod": "restored prod adapter folder (clap prod-adapter): adds arm P, prod + RAG"})
