"""agent tasks: tasks with checked gold trajectories from the verified facts of the admitted batches.

    clap agent-tasks            (DVC stage `agent_tasks`, writes data/agent/)

The planner, the environment and the three checks are `clap.agent.tasks`; this stage picks the
batches, checks that no held-out company, phrasing or tool composition reaches the training tasks
(`clap.agent.tasks.leakage`), validates every task against the `AgentTask` contract and writes tasks.jsonl (one task per
line, its gold conversation in `messages`) and report.json (kept and dropped, by check and kind).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from clap.agent import tasks as agent_tasks
from clap.agent.tools import ReportTools
from clap.domain.contracts import AGENT_LIST_FIELDS, AgentTask
from clap.io import atomic_dir, write_json, write_jsonl


def as_frame(rows: list[dict]) -> pd.DataFrame:
    """Tasks as the contract's flat table: list fields as JSON text."""
    frame = pd.DataFrame([{k: v for k, v in r.items() if k not in AGENT_LIST_FIELDS} for r in rows])
    for field in AGENT_LIST_FIELDS:
        frame[f"{field}_json"] = [json.dumps(r[field], ensure_ascii=False) for r in rows]
    return frame


def run(cfg: dict, assets: Path, batches: list[str], out: Path) -> dict:
    chunks = pd.read_parquet(Path(assets) / "chunks.parquet")
    facts = pd.read_parquet(Path(assets) / "facts.parquet")
    chunks, facts = chunks[chunks["batch"].isin(batches)], facts[facts["batch"].isin(batches)]
    tools = ReportTools(chunks)
    rows, report = agent_tasks.build(facts, tools, cfg["agent"]["tasks"])
    if not rows:
        raise ValueError(f"agent-tasks: no task passed the checks in batches {', '.join(batches)}")
    leaks = agent_tasks.leakage(rows)
    if leaks:  # the planner's own output: a leak is a bug, and an evaluation that leaks must not be written
        raise AssertionError(f"agent-tasks: the held-out tasks leak into training ({len(leaks)}): {leaks[0]}")
    AgentTask.validate(as_frame(rows), lazy=True)  # our own output: a failure here is a bug, not user data
    report |= {"batches": batches, "tools": [s["function"]["name"] for s in tools.schemas]}
    with atomic_dir(out, (Path(assets),)) as tmp:
        write_jsonl(tmp / "tasks.jsonl", rows)
        write_json(tmp / "report.json", report)
    return report
