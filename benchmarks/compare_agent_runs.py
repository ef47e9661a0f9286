"""Two agent runs' adapters compared on the same held-out tasks, paired by task.

    python benchmarks/compare_agent_runs.py RUN_A RUN_B [--model agent_sft] [--label-a joint --label-b two-stage]

RUN_A and RUN_B are project folders after `clap evaluate-agent` (data/agent/tasks.jsonl, data/eval_agent/). The
held-out tasks must be the same; the base model's greedy episodes must be too (a check that both runs decoded
alike). Prints each run's figures with CIs and B − A for every task metric and for task success per kind
(`clap.agent.report`), and writes them as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from clap.agent import report
from clap.io import read_jsonl


def load(run: Path, model: str) -> tuple[dict, dict, dict]:
    tasks = {t["task_id"]: t["kind"] for t in read_jsonl(run / "data/agent/tasks.jsonl") if t["split"] == "eval"}
    episodes = [e for e in read_jsonl(run / "data/eval_agent/episodes.jsonl") if e["run"] == "greedy"]
    calls = read_jsonl(run / "data/eval_agent/next_calls.jsonl")
    evaluated = {e["task_id"] for e in episodes}
    kinds = {t: k for t, k in tasks.items() if t in evaluated}
    values = report.task_values([e for e in episodes if e["model"] == model],
                                [c for c in calls if c.get("model") == model], kinds)
    base = {e["task_id"]: (e["answer"], [s["text"] for s in e["steps"]]) for e in episodes if e["model"] == "base"}
    return values, kinds, base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--model", default="agent_sft")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    a, kinds_a, base_a = load(args.run_a, args.model)
    b, kinds_b, base_b = load(args.run_b, args.model)
    if kinds_a != kinds_b:
        raise SystemExit("the two runs evaluated different held-out tasks")
    same_base = base_a == base_b
    figures = {label: {m: report.interval([v[m][t] for t in sorted(v[m])], args.bootstrap, 0.95)
                       for m in report.TASK_METRICS} for label, v in ((args.label_a, a), (args.label_b, b))}
    delta = report.deltas(a, b, args.bootstrap, 0.95)
    by_kind = report.kind_deltas(a, b, kinds_a, args.bootstrap, 0.95)
    print(f"{len(kinds_a)} held-out tasks; base model's episodes identical in both runs: {same_base}")
    print(f"| metric | {args.label_a} | {args.label_b} | {args.label_b} − {args.label_a} |\n|---|---|---|---|")
    def cell(f: dict) -> str:
        return f"{f['mean']:.3f} [{f['ci_low']:.3f}, {f['ci_high']:.3f}] (n {f['n']})" if f["n"] else "—"

    for m in report.TASK_METRICS:
        fa, fb, d = figures[args.label_a][m], figures[args.label_b][m], delta.get(m)
        print(f"| {m} | {cell(fa)} | {cell(fb)} | " + (f"{d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
                                                     if d else "—") + " |")
    print("\ntask success by kind, B − A:")
    for kind, d in by_kind.items():
        print(f"  {kind}: {d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] (n {d['n']})")
    if args.out:
        args.out.write_text(json.dumps({"tasks": len(kinds_a), "base_identical": same_base, "figures": figures,
                                        "delta": delta, "success_by_kind": by_kind}, indent=1))


if __name__ == "__main__":
    main()
