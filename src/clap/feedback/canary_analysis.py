"""`clap canary analyze`: canary vs prod on the logged outcomes, ending like an Argo Rollouts analysis run —
successful (promote the canary to prod), failed (roll the canary back) or inconclusive (keep collecting).

Pairs: requests both arms answered (same messages) pair by request hash; otherwise the i-th outcome
of each arm pairs in arrival order. An agent episode (`clap canary serve --agent`) is one request here: its turns
collapse into one row whose outcome is the task success posted on it and whose hash is its opening's (`episodes`). On them: Wald's SPRT over the discordant pairs (it stops as soon
as the evidence suffices), McNemar's exact test, and a bootstrap CI of the success-rate difference.
Nothing ends before `min_requests` scored requests per arm — neither a success nor a failure. Latency is
looked at once, on each arm's first `min_requests` requests (`latency_look`): a canary whose p95 there exceeds
prod's by more than `canary.max_latency_ratio`, significantly (one-sided Mann–Whitney at `alpha`), fails whatever
its outcomes. The SPRT is valid at every look (Wald); the latency rule has one look. A canary as good as prod
therefore fails with probability ≤ β/(1 − α) + α however often the analysis runs
(`tests/feedback/test_canary.py` simulates it). Requests without an outcome are counted, never silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

from clap.config import Params
from clap.errors import UserError
from clap.evaluate.stats import p95, paired_bootstrap
from clap.feedback.canary import FEEDBACK, REQUESTS
from clap.feedback.sequential import discordant, mcnemar, pairs_by_key, pairs_in_order, pairs_until, sprt
from clap.release.evidence import finite

ARMS = ("prod", "canary")


class CanaryLogError(UserError, ValueError):
    pass


def load_logs(folder: Path) -> tuple[list[dict], list[dict]]:
    folder = Path(folder)
    if not (folder / REQUESTS).exists():
        raise CanaryLogError(f"{folder / REQUESTS}: no request log (serve traffic with `clap canary serve` first)")
    out = []
    for name in (REQUESTS, FEEDBACK):
        rows, path = [], folder / name
        for n, line in enumerate(path.open(encoding="utf-8") if path.exists() else [], start=1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise CanaryLogError(f"{path}: line {n} is not JSON") from None
        out.append(rows)
    return out[0], out[1]


def rescore(feedback: list[dict], metric: str) -> list[dict]:
    """The feedback with its outcome read from another of the logged scores (the demo traffic logs every
    replay metric): the definition of success is a policy choice, the logs keep what it needs."""
    out = []
    for f in feedback:
        if metric not in (f.get("scores") or {}):
            raise CanaryLogError(f"feedback on request {f['request_id']} logs no score {metric!r} to re-score by")
        ok = f["scores"][metric]
        out.append(f | {"outcome": int(ok), "reason": None if ok else f"{metric} missed"})
    return out


def usable_evidence(requests: list[dict], feedback: list[dict]) -> tuple[list[dict], list[dict], list[str]]:
    """(requests, feedback, problems): the log rows the analysis can read as evidence, and one line naming each it
    cannot — an outcome that is not 0/1 (or true/false), a latency that is not a finite number ≥ 0, a request without
    its id or arm. The analysis leaves those out and cannot end `successful` while any is there."""
    problems, kept_requests, kept_feedback = [], [], []
    for i, r in enumerate(requests, start=1):
        lat = r.get("latency_ms")
        if not isinstance(r.get("request_id"), str) or r.get("arm") not in ARMS:
            problems.append(f"{REQUESTS} row {i}: request_id/arm missing or unknown")
        elif not finite(lat) or lat < 0:
            problems.append(f"{REQUESTS} row {i} ({r['request_id']}): latency_ms is {lat!r}")
        else:
            kept_requests.append(r)
    for i, f in enumerate(feedback, start=1):
        if f.get("outcome") in (0, 1):  # NaN, null, a string or 2 is no outcome
            kept_feedback.append(f)
        else:
            problems.append(f"{FEEDBACK} row {i} ({f.get('request_id')}): outcome is {f.get('outcome')!r}, not 0 or 1")
    return kept_requests, kept_feedback, problems


def episodes(requests: list[dict]) -> list[dict]:
    """The request log with each agent episode as one row (pure): the turns that share an arm and an `episode_id`
    become the row of its first turn, with every turn's request id (`request_ids`: the outcome is posted on one of
    them, the last in practice), the hash of the episode's opening as its request hash (paired traffic asks both arms
    the same question, so their episodes pair), the turns' summed latency and their count. Rows without an
    `episode_id` (the extraction canary's requests) pass unchanged."""
    out, by_episode = [], {}
    for r in requests:
        if not r.get("episode_id"):
            out.append(r)
            continue
        key = (r["arm"], r["episode_id"])
        if key in by_episode:
            row = by_episode[key]
            row["request_ids"].append(r["request_id"])
            row["latency_ms"] += r["latency_ms"]
            row["turns"] += 1
        else:
            by_episode[key] = r | {"request_hash": r.get("opening_hash", r.get("request_hash")),
                                   "request_ids": [r["request_id"]], "turns": 1}
            out.append(by_episode[key])
    return out


def analyze(requests: list[dict], feedback: list[dict], cfg: Params) -> dict:
    c = cfg.canary
    requests, feedback, invalid = usable_evidence(requests, feedback)
    requests = episodes(requests)
    by_request = {f["request_id"]: int(f["outcome"]) for f in feedback}  # the last feedback on a request counts
    outcome = {}
    for r in requests:
        posted = [by_request[i] for i in r.get("request_ids", [r["request_id"]]) if i in by_request]
        if posted:
            outcome[r["request_id"]] = posted[-1]
    served = {a: [r for r in requests if r["arm"] == a] for a in ARMS}
    versions = {a: sorted({r.get("version") or "base" for r in rows}) for a, rows in served.items()}
    for a, vs in versions.items():
        if len(vs) > 1:
            raise CanaryLogError(f"the {a} arm served {len(vs)} versions ({', '.join(vs)}): analyse one canary at a "
                                 "time (move the old logs away)")
    scored = {a: [r | {"outcome": outcome[r["request_id"]]} for r in rows if r["request_id"] in outcome]
              for a, rows in served.items()}
    by_hash = {a: {r["request_hash"]: r["outcome"] for r in rows} for a, rows in scored.items()}
    if by_hash["prod"].keys() & by_hash["canary"].keys():
        pairing, pairs = "by_request", pairs_by_key(by_hash["prod"], by_hash["canary"])
    else:
        pairing = "arrival_order"
        pairs = pairs_in_order([r["outcome"] for r in scored["prod"]], [r["outcome"] for r in scored["canary"]])
    test = sprt(discordant(pairs), c.p_worse, c.p_better, c.alpha, c.beta)
    latency = {a: p95([r["latency_ms"] for r in rows]) for a, rows in served.items()}
    delta = paired_bootstrap([p for p, _ in pairs], [q for _, q in pairs], n=cfg.evaluate.bootstrap,
                             ci=cfg.evaluate.ci, seed=11)
    reasons = [{"rule": "evidence_invalid", "observed": f"{len(invalid)} log row(s): {invalid[0]}",
                "threshold": "finite numbers, outcomes 0/1", "outcome": "inconclusive"}] if invalid else []
    few = min(len(scored["prod"]), len(scored["canary"])) < c.min_requests
    slow = latency_look(served, c)
    if slow is not None:
        reasons.append(slow)
    if test.outcome in ("accept_h0", "accept_h1"):
        ended = "failed" if test.outcome == "accept_h0" else "successful"
        reasons.append({"rule": "sprt", "observed": f"canary won {test.canary_wins} of {test.discordant_seen} discordant",
                        "threshold": f"H{0 if ended == 'failed' else 1} p={c.p_worse if ended == 'failed' else c.p_better}",
                        "outcome": "inconclusive" if few else ended})
    if few:  # neither a success nor a failure on fewer requests: a handful of answers never ends a canary
        reasons.append({"rule": "min_requests", "observed": min(len(scored['prod']), len(scored['canary'])),
                        "threshold": c.min_requests, "outcome": "inconclusive"})
    if test.outcome == "continue":
        reasons.append({"rule": "sprt", "observed": f"llr {test.llr:.3f} within ({test.lower:.3f}, {test.upper:.3f})",
                        "threshold": "a bound", "outcome": "inconclusive"})
    order = ["failed", "inconclusive", "successful"]
    verdict = min((r["outcome"] for r in reasons), key=order.index)
    kind = "agent" if any(r.get("episode_id") for r in requests) else "extraction"
    return {"verdict": verdict, "kind": kind, "reasons": reasons,
            "versions": {a: v[0] if v else None for a, v in versions.items()},
            "requests": {a: len(rows) for a, rows in served.items()},
            "without_outcome": {a: len(served[a]) - len(scored[a]) for a in ARMS},
            "success_rate": {a: round(sum(r["outcome"] for r in rows) / len(rows), 6) if rows else None
                             for a, rows in scored.items()},
            "pairing": pairing, "pairs": len(pairs), "delta_canary_minus_prod": delta, "mcnemar": mcnemar(pairs),
            "sprt": test.as_dict() | {"pairs_read": len(pairs) if test.outcome == "continue"
                                      else pairs_until(pairs, test.discordant_seen), "p_worse": c.p_worse, "p_better": c.p_better, "alpha": c.alpha,
                                      "beta": c.beta},
            "p95_latency_ms": latency}


def joint(analysis: dict, others: list[dict]) -> dict:
    """The verdict `clap canary conclude` acts on (pure): `analysis`, joined by each of `others` (the extraction and
    the agent canary) that judged the same canary version — failed when any failed, inconclusive when any is, else
    successful; the others' reasons follow, their rule names prefixed by the analysis they come from."""
    same = [o for o in others if (o.get("versions") or {}).get("canary") == (analysis.get("versions") or {}).get("canary")]
    if not same:
        return analysis
    order = ["failed", "inconclusive", "successful"]
    verdict = min([analysis["verdict"], *(o["verdict"] for o in same)], key=order.index)
    reasons = analysis["reasons"] + [r | {"rule": f"{o.get('kind', 'canary')}:{r['rule']}"}
                                     for o in same for r in o["reasons"]]
    return analysis | {"verdict": verdict, "reasons": reasons}


def latency_look(served: dict[str, list[dict]], c: dict) -> dict | None:
    """The latency rule, looked at once: on the first `min_requests` requests of each arm (a fixed sample, so
    re-running the analysis after every request does not re-test a noisy statistic), the canary fails when its
    p95 exceeds prod's by more than `max_latency_ratio` and a one-sided Mann–Whitney test at level `alpha` says its
    latencies run higher. Before that many requests it says nothing; None when it passes."""
    from scipy.stats import mannwhitneyu

    k = c.min_requests
    if min(len(served["prod"]), len(served["canary"])) < k:
        return None
    first = {a: [r["latency_ms"] for r in served[a][:k]] for a in ARMS}
    ratio = p95(first["canary"]) / p95(first["prod"]) if p95(first["prod"]) else None
    if ratio is None or ratio <= c.max_latency_ratio:
        return None
    p_value = float(mannwhitneyu(first["canary"], first["prod"], alternative="greater").pvalue)
    if p_value >= c.alpha:
        return None
    return {"rule": "p95_latency_ratio", "observed": f"{ratio:.3f} on the first {k} requests (Mann-Whitney p "
            f"{p_value:.3g})", "threshold": c.max_latency_ratio, "outcome": "failed"}


def decided(logs: Path, cfg: Params) -> bool:
    """True once the logged traffic ends the analysis (successful or failed): the demo's stopping rule."""
    requests, feedback = load_logs(logs)
    served = {r["arm"] for r in requests}
    return set(ARMS) <= served and analyze(requests, feedback, cfg)["verdict"] != "inconclusive"


def failed_cases(requests: list[dict], feedback: list[dict]) -> list[dict]:
    """Canary requests whose last outcome failed: the flywheel inbox rows, each with its reason."""
    arm = {r["request_id"]: r for r in requests}
    last = {f["request_id"]: f for f in feedback}
    return [{"source": "canary_failed", "request_id": f["request_id"], "reason": f.get("reason") or "outcome 0",
             "record_id": f.get("record_id"), "version": arm[f["request_id"]].get("version"),
             **({"episode_id": arm[f["request_id"]]["episode_id"]} if arm[f["request_id"]].get("episode_id") else {})}
            for f in last.values() if not f["outcome"] and arm.get(f["request_id"], {}).get("arm") == "canary"]
