"""gate: gather the evidence and apply the release policy (`clap.gate.decide`).

    clap gate                  (DVC stage `gate`, writes metrics/gate.json)

Reads admission records, guard reports of every trainer that ran, per-batch evaluation metrics
and deltas, and the ABCD replay; the policy is `conf/gate/<name>.yaml`. When the current prod
adapter is the candidate itself (re-gating after new data), a drop yields `rollback`.
"""

from __future__ import annotations

from pathlib import Path

from clap.gate import decide
from clap.io import read_json, write_json
from clap.schemas import GateDecision


def run(cfg: dict, root: Path, out: Path, candidate: str = "sft") -> GateDecision:
    root = Path(root)
    batches = cfg["data"]["batches"]
    admission = {b: read_json(root / "data/admission" / f"{b}.json") for b in batches}
    trainers = [candidate] + [t for t in ("dpo", "grpo") if cfg["train"][t]["enabled"] and t != candidate]
    guards = {t: (read_json(p) if (p := root / "models" / t / "guard_report.json").exists() else None)
              for t in trainers}
    evaluation = {}
    for b in batches:
        m = root / "metrics/eval" / f"{b}.json"
        if m.exists():
            data = read_json(m)
            evaluation[b] = {"baseline": data["baseline"], "candidate": data["candidate"], "deltas": data["deltas"]}
    replay_file = root / "metrics/replay.json"
    replay = read_json(replay_file) if replay_file.exists() else None
    decision = decide(cfg["gate"], admission, guards, evaluation, replay, candidate=candidate)
    write_json(out, decision.model_dump())
    return decision
