"""Two base-model families through one round of the extraction loop, on one machine and one seed.

    python benchmarks/bench_base_models.py [--profiles smollm2-135m,gemma3-270m] [--batches b1,b2,b3]
                                           [--work /tmp/clap-bases] [--out FILE] [--rev C] [--resume | --collect]

For each profile (conf/model/), in a fresh clone of this repository's HEAD: `clap params -S model=<profile>` with
the demo's first round (batches b1–b3, the extraction track: agent, DPO and GRPO off), then `dvc repro`, every
output line stamped. Prints per profile the stage times (base model, SFT, evaluation, replay), and beside each
other: per batch the holdout's overall score of the base and of the candidate with the candidate − base delta and
its 95 % paired-bootstrap CI, the replay's ABCD arms with the adapter + RAG − base + RAG delta and its CI, and the
gate's decision. Run it alone (two torch jobs on two cores slow each other ~5×); `make gemma` first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from clap.evaluate.intervals import ci_text  # noqa: E402
from time_demo import split, stamp  # noqa: E402

REPLAY_METRICS = ("value_exact", "evidence_chunk_exact", "core_fields_exact")  # arms: A base + RAG, B adapter + RAG, C base, D adapter


def run_round(profile: str, batches: list[str], work: Path, targets: list[str], rev: str, resume: bool = False) -> dict:
    """One round of `profile` in a clone of `rev`, run with the clone's own code (PYTHONPATH: the `clap` this
    environment installed may be a newer working tree). `resume`: continue the clone a stopped run left (DVC
    skips the stages it finished; their times come from the first log)."""
    clone = work / profile
    env = os.environ | {"PYTHONPATH": str(clone / "src")}
    logs = sorted(clone.glob("repro*.log")) if resume and clone.exists() else []
    if not logs:
        if clone.exists():
            subprocess.run(["rm", "-rf", str(clone)], check=True)
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
        overrides = [f"model={profile}", f"data.batches=[{','.join(batches)}]", "agent.enabled=false",
                     "train.dpo.enabled=false", "train.grpo.enabled=false"]  # the demo's round 1, extraction track
        subprocess.run(["clap", "params", *[a for o in overrides for a in ("-S", o)]], cwd=clone, check=True, env=env)
    log = clone / f"repro{'-resumed' * len(logs)}.log"
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(["dvc", "repro", *targets], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        fh.write(f"[{0:7.0f}s 00:00:00] ─ round 1: {profile}\n")
        stamp(proc.stdout, fh)
        rc = proc.wait()
    return collect(profile, batches, work, targets, rev, rc)


def collect(profile: str, batches: list[str], work: Path, targets: list[str], rev: str, rc: int = 0) -> dict:
    """The results of `profile`'s round from its clone's stamped logs and metrics (also of a run that finished
    after its bench process was gone: `--collect`)."""
    clone = work / profile
    logs = sorted(clone.glob("repro*.log"), key=lambda p: p.name.count("-resumed"))  # the first run's log first
    log = logs[-1]
    stages, wall = {}, 0
    for each in logs:  # a stage the resumed run did again is timed by its last run
        timing = split(each.read_text(encoding="utf-8").splitlines())
        stages |= timing["rounds"].get("1", {}).get("stages", {})
        wall += timing["wall_s"]
    result = {"profile": profile, "rc": rc, "commit": rev, "targets": targets or ["all"], "stages_s": stages,
              "wall_s": wall, "resumed": len(logs) > 1}
    if rc != 0:
        result["log_tail"] = log.read_text(encoding="utf-8").splitlines()[-15:]
        return result
    metrics = clone / "metrics"
    result["eval"] = {b: json.loads((metrics / "eval" / f"{b}.json").read_text()) for b in batches}
    result["train_sft"] = json.loads((metrics / "train_sft.json").read_text())
    if not targets:  # the whole round: the replay and the gate too (the clone's committed ones are stale otherwise)
        result["replay"] = json.loads((metrics / "replay.json").read_text())
        result["gate"] = json.loads((metrics / "gate.json").read_text())
    return result


def _ci(d: dict | None) -> str:
    return ci_text(d) if d else "n/a"


def table(results: list[dict], batches: list[str]) -> str:
    head = "| | " + " | ".join(r["profile"] for r in results) + " |"
    rows = [head, "|---" * (len(results) + 1) + "|"]

    def row(label, fn):
        cells = []
        for r in results:
            try:
                cells.append(fn(r))
            except (KeyError, TypeError):
                cells.append("n/a")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    for stage in ("base_model", "train_sft", *[f"evaluate@{b}" for b in batches], "replay"):
        row(f"{stage} (s)", lambda r, s=stage: str(r["stages_s"][s]))
    row("train steps / loss", lambda r: f"{r['train_sft']['steps']} / {r['train_sft'].get('train_loss', float('nan')):.3f}")
    for b in batches:
        row(f"{b} overall score: base → candidate (n)", lambda r, b=b: f"{r['eval'][b]['baseline']['overall_score']:.3f} → "
            f"{r['eval'][b]['candidate']['overall_score']:.3f} ({r['eval'][b]['n']})")
        row(f"{b} candidate − base [95 % CI]", lambda r, b=b: _ci(r["eval"][b]["deltas"]["overall_score"]))
    for metric in REPLAY_METRICS:
        row(f"replay {metric}: A / B / C / D", lambda r, m=metric: " / ".join(f"{r['replay']['arms'][a][m]:.2f}"
                                                                            for a in "ABCD"))
        row(f"replay {metric}: B − A [95 % CI]", lambda r, m=metric: _ci(r["replay"]["contrasts"]["B-A"][m]))
    row("gate", lambda r: r["gate"]["decision"])
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--batches", default="b1,b2,b3")
    ap.add_argument("--work", type=Path, default=Path("/tmp/clap-bases"))
    ap.add_argument("--out", type=Path, default=None, help="results as JSON (default: WORK/base-models.json)")
    ap.add_argument("--targets", default="", help="dvc repro only these stages (e.g. train_sft,evaluate@b1), not the "
                                                  "whole round; the replay and gate are then not reported")
    ap.add_argument("--rev", default=None, help="the commit to run (default: HEAD); compare two profiles on one")
    ap.add_argument("--append", action="store_true", help="add to the results already in --out (one table)")
    ap.add_argument("--resume", action="store_true", help="continue each profile's clone where a stopped run left it")
    ap.add_argument("--collect", action="store_true", help="run nothing: read the finished clones in --work (give "
                                                             "--rev the commit they ran)")
    args = ap.parse_args()
    args.out = args.out or args.work / "base-models.json"
    batches = args.batches.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.out.read_text()) if args.append and args.out.exists() else []
    rev = args.rev or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout.strip()
    targets = [t for t in args.targets.split(",") if t]
    for profile in args.profiles.split(","):
        if args.collect:
            results.append(collect(profile, batches, args.work, targets, rev))
        else:
            results.append(run_round(profile, batches, args.work, targets, rev, args.resume))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str))
        print(f"{profile}: rc {results[-1]['rc']}, {results[-1]['wall_s']} s", flush=True)
    print(table(results, batches))


if __name__ == "__main__":
    main()
