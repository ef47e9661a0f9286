"""The demo's production traffic: the held-out replay questions, sent to the canary server as the
application sends them (retrieved chunks in the prompt, the answer schema as `response_format`), each
answer scored against its gold answer and the outcome posted back as feedback.

    clap canary traffic [--paired] [--limit N]

Split (default): the server routes each request by its share. Paired: each question is sent to both
arms (`"model": "prod"` and `"canary"`), a paired A/B that needs half the questions for the same power.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from clap import paths
from clap.config import Params
from clap.domain import prompts
from clap.errors import UserError
from clap.evaluate.decoding import answer_schema
from clap.evaluate.metrics import parse_answer
from clap.evaluate.replay import score_case
from clap.io import read_jsonl
from clap.retrieval import BM25Index, retrieve


class TrafficError(UserError, RuntimeError):
    pass


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise TrafficError(f"{url}: HTTP {exc.code}: {exc.read().decode('utf-8', 'replace')[:200]}") from None
    except urllib.error.URLError as exc:
        raise TrafficError(f"{url}: no canary server answers ({exc.reason}); start `clap canary serve`") from None


def requests_from_replay(cfg: Params, root: Path, limit: int | None) -> list[dict]:
    """The application's requests for the held-out replay cases: {case, messages, schema, context}."""
    root = Path(root)
    cases = [c for b in cfg.data.batches for c in read_jsonl(root / paths.MATERIALIZED / b / "replay_cases.jsonl")]
    if limit and limit < len(cases):  # spread over every batch, not the first batch's cases
        cases = cases[::len(cases) // limit][:limit]
    chunks = pd.read_parquet(root / paths.ASSETS / "chunks.parquet")
    by_id = {c["chunk_id"]: c for c in chunks.to_dict("records")}
    hits = retrieve(cfg.retrieval, BM25Index.load(root / paths.INDEX / "bm25"), chunks, [c["question"] for c in cases])
    out = []
    for case, hit in zip(cases, hits):
        ctx = [by_id[h] for h in hit]
        out.append({"case": case, "context": ctx,
                    "messages": prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(case["question"], ctx)),
                    "schema": answer_schema(ctx, with_location=True) if cfg.generate.constrained else None})
    return out


def send(cfg: Params, root: Path, url: str, paired: bool, limit: int | None,
         decided: Callable[[], bool] | None = None) -> dict:
    """Send the traffic, score each answer with the replay's metric `canary.outcome`, post the outcome.
    `decided` is asked after every question: traffic stops once it answers True (the sequential
    analysis has reached a verdict), so a canary costs the requests its evidence needs, no more."""
    metric = cfg.canary.outcome
    counts: dict[str, list[int]] = {"prod": [], "canary": []}
    for r in requests_from_replay(cfg, root, limit):
        body = {"messages": r["messages"]}
        if r["schema"] is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": r["schema"]}}
        for arm in (("prod", "canary") if paired else ("clap",)):
            resp = post(f"{url}/v1/chat/completions", body | {"model": arm})
            text = resp["choices"][0]["message"]["content"]
            scores = score_case(parse_answer(text), json.loads(r["case"]["target"]), r["context"])
            ok = scores[metric]
            post(f"{url}/v1/feedback", {"request_id": resp["id"], "outcome": int(ok),
                                        "reason": None if ok else f"{metric} missed",
                                        "record_id": r["case"].get("record_id"), "scores": scores})
            counts[resp["model"]].append(int(ok))
        if decided is not None and decided():
            break
    return {arm: {"requests": len(v), "success": sum(v)} for arm, v in counts.items()}
