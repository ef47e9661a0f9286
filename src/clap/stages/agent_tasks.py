"""agent tasks: tasks with checked gold trajectories from the verified facts of the admitted batches.

    clap agent-tasks            (DVC stage `agent_tasks`, writes data/agent/)

The planner, the environment and the three checks are `clap.agent.tasks`; this stage picks the
batches, adds the trajectories people corrected (repair/agent/*.jsonl: the flywheel — each executed and
checked as the planner's are, refused with its file, line and reason when it fails a check or would leak),
checks that no held-out company, phrasing or tool composition reaches the training tasks
(`clap.agent.tasks.leakage`), validates every task against the `AgentTask` contract and writes tasks.jsonl (one task per
line, its gold conversation in `messages`) and report.json (kept and dropped, by check and kind).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from clap import paths
from clap.agent import tasks as agent_tasks
from clap.agent.tools import ReportTools
from clap.config import AgentTasks, Params
from clap.domain.contracts import AgentTask
from clap.io import atomic_dir, require_inputs, write_json, write_jsonl, write_switched_off
from clap.stages.spec import StageSpec


def run(section: AgentTasks, assets: Path, batches: list[str], out: Path, corrections: Path | None = None) -> dict:
    """`section`: `agent.tasks`; `corrections`: the folder of trajectories people corrected (repair/agent/); those that pass join training."""
    chunks = pd.read_parquet(Path(assets) / "chunks.parquet")
    facts = pd.read_parquet(Path(assets) / "facts.parquet")
    chunks, facts = chunks[chunks["batch"].isin(batches)], facts[facts["batch"].isin(batches)]
    tools = ReportTools(chunks)
    rows, report = agent_tasks.build(facts, tools, section)
    if not rows:
        raise ValueError(f"agent-tasks: no task passed the checks in batches {', '.join(batches)}")
    fixed, ids, refused = agent_tasks.corrected(tools, corrections, rows, sorted(set(facts["entity"].dropna())))
    rows += fixed
    report |= {"corrections": {"kept": ids, "refused": refused}}
    leaks = agent_tasks.leakage(rows)
    if leaks:  # the planner's own output: a leak is a bug, and an evaluation that leaks must not be written
        raise AssertionError(f"agent-tasks: the held-out tasks leak into training ({len(leaks)}): {leaks[0]}")
    AgentTask.validate(agent_tasks.as_frame(rows), lazy=True)  # our own output: a failure here is a bug, not user data
    report |= {"batches": batches, "tools": [s["function"]["name"] for s in tools.schemas]}
    with atomic_dir(out, (Path(assets),)) as tmp:
        write_jsonl(tmp / "tasks.jsonl", rows)
        write_json(tmp / "report.json", report)
    return report


def main(params: Params, assets: Path = paths.ASSETS, out: Path = paths.AGENT_TASKS,
         corrections: Path = paths.AGENT_CORRECTIONS) -> list[str]:
    """Agent tasks with gold trajectories from the verified facts, kept only if they pass the format,
    execution and answer checks, and the corrected trajectories in repair/agent/ that pass them too."""
    if not params.agent.enabled:
        return [write_switched_off("agent-tasks", "agent.enabled", out, ("tasks.jsonl",))]
    require_inputs([(assets, "dvc repro assetize")])
    report = run(params.agent.tasks, assets, params.data.batches, out, corrections)
    lines = [f"agent tasks → {out}: {report['tasks']} kept; dropped by check: {report['dropped_by_check']}"]
    fixes = report["corrections"]
    if fixes["kept"] or fixes["refused"]:
        lines.append(f"corrected trajectories: {len(fixes['kept'])} kept for training, {len(fixes['refused'])} refused")
        lines += [f"  {r['file']}:{r['line']} ({r['correction_id']}): {r['reason']}" for r in fixes["refused"]]
    return [*lines, ", ".join(f"{k}={v}" for k, v in report["by_split_kind"].items())]


STAGE = StageSpec(name="agent_tasks", group="agent", main=main, helps={
    "corrections": "trajectories people corrected (*.jsonl), for training"})
