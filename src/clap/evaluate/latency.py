"""Paired latency: the candidate and the gate's reference timed in one run, on the same requests, interleaved.

Answers read back from the answer store carry the latency measured when they were first decoded — rounds
ago for prod and the base model, on whatever else the machine was doing then. A ratio of such timings
measures the machine's load, not the adapters. `paired_latency` decodes a few requests afresh (the store
bypassed), one request at a time, alternating which model goes first, and reports both p95s and their
ratio; the gate's latency rule reads only that (`clap.release.gate._latency_rule`).

The replay times it once per candidate, on the application's own requests (retrieved chunks and all), against
the reference the gate judges by (prod when an adapter is in prod, else the base model): latency belongs to
the pair of models, not to a batch, so a timing per batch would repeat one measurement.
"""

from __future__ import annotations

import time

from clap.evaluate.stats import p95


def spread(n: int, k: int) -> list[int]:
    """`min(k, n)` indices of `n` requests spread evenly from the first (pure): 5 of 10 → 0, 2, 4, 6, 8; so the
    timed requests come from every batch of the cases, not the first batch's alone."""
    k = min(k, n)
    return [i * n // k for i in range(k)]


def fresh_generate(engine, conversations: list[list[dict]], use_adapter, max_new_tokens: int,
                   schemas: list[dict] | None):
    """One decode that never reads the answer store (engines without a store decode afresh anyway)."""
    return engine.generate(conversations, use_adapter=use_adapter, max_new_tokens=max_new_tokens, batch_size=1,
                           progress=False, schemas=schemas, use_store=False)


def paired_latency(engine, conversations: list[list[dict]], schemas: list[dict] | None, reference, candidate,
                   requests: int, max_new_tokens: int) -> dict:
    """{n, reference_p95_ms, candidate_p95_ms, p95_ratio} over `requests` conversations spread over the list, each
    decoded by both models back to back (the reference first on even requests, the candidate first on odd ones);
    or {abstained: why} when nothing was timed. `reference` / `candidate`: the engine's adapter switches."""
    picked = spread(len(conversations), requests)
    if not picked:
        return {"abstained": "no request timed (replay.latency_requests is 0)" if requests == 0
                else "no request to time"}
    times: dict[str, list[float]] = {"reference": [], "candidate": []}
    for n, i in enumerate(picked):
        order = [("reference", reference), ("candidate", candidate)]
        for name, switch in (order if n % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            fresh_generate(engine, [conversations[i]], switch, max_new_tokens, None if schemas is None else [schemas[i]])
            times[name].append((time.perf_counter() - t0) * 1000)
    ref, cand = p95(times["reference"]), p95(times["candidate"])
    return {"n": len(picked), "reference_p95_ms": ref, "candidate_p95_ms": cand,
            "p95_ratio": round(cand / ref, 4) if ref else None, "interleaved": True}
