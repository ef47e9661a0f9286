"""SIMULATED raters for the demo's human-evaluation round trip — not people, and not for real data.

    clap demo-label --tasks feedback/human/export/tasks.json --out /tmp/label-studio-export.json

They read the blind tasks as a person would (the source, the question, the answer) and judge the
answer against the demo generator's gold answer: correct when its value is the gold value (for an agent
episode: when its final answer is the task's gold answer, as the task's outcome reward scores it); usefulness
5 for correct with the right evidence chunk or quote, 4 correct, 2 a wrong value, 1 no parseable
answer; fluency 4 for parseable JSON, else 2; safety 5. Each rater replaces a label by a uniformly
random one with probability `noise`, so agreement falls as noise rises. The output is Label Studio's
JSON export format, so `clap human import` cannot tell it from a real project's export; the raters' names
(`simulated-rater<N>@demo.invalid`) say what they are wherever the labels go.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from clap import paths
from clap.agent.rewards import outcome
from clap.evaluate.metrics import parse_answer, value_correct
from clap.feedback.labelstudio import CHOICES, CORRECTNESS, SCALES
from clap.io import read_jsonl


def gold_answers(root: Path, batches: list[str]) -> dict[tuple[str, str], dict]:
    """(question, source head) → gold answer, for the evaluation and replay questions of every batch."""
    gold = {}
    for b in batches:
        for r in read_jsonl(Path(root) / paths.MATERIALIZED / b / "sft_eval.jsonl"):
            gold[r["question"]] = json.loads(r["target"])
        for c in read_jsonl(Path(root) / paths.MATERIALIZED / b / "replay_cases.jsonl"):
            gold[c["question"]] = json.loads(c["target"])
    tasks = Path(root) / paths.AGENT_TASKS / "tasks.jsonl"
    for t in read_jsonl(tasks) if tasks.exists() and tasks.read_text().strip() else []:
        if t["split"] == "eval" and t["batch"] in batches:
            gold[t["question"]] = {"agent_task": t}
    return gold


def judge_episode(text: str, task: dict) -> dict:
    """One careful rater's labels for an agent episode as `clap human export` shows it (its calls, what they
    returned, `Final answer: …`): correct when the final answer is the task's gold answer."""
    final = next((line.removeprefix("Final answer: ") for line in reversed(text.splitlines())
                  if line.startswith("Final answer: ")), None)
    correct = final is not None and not final.startswith("(none") and outcome(final, task) == 1.0
    return {"usefulness": 5 if correct else 2, "safety": 5, "fluency": 4 if final and not final.startswith("(none") else 2,
            CORRECTNESS: "correct" if correct else "incorrect"}


def judge(answer: str, gold: dict | None) -> dict:
    """One careful rater's labels for an answer."""
    pred = parse_answer(answer)
    if pred is None:
        return {"usefulness": 1, "safety": 5, "fluency": 2, CORRECTNESS: "incorrect"}
    correct = gold is not None and value_correct(pred, gold)
    located = gold is not None and (pred.get("chunk_id") == gold.get("chunk_id") if "chunk_id" in gold
                                    else str(pred.get("evidence", "")).strip() == gold.get("evidence"))
    return {"usefulness": (5 if located else 4) if correct else 2, "safety": 5, "fluency": 4,
            CORRECTNESS: "correct" if correct else "incorrect"}


def label(tasks: list[dict], gold: dict, raters: int, noise: float, seed: int = 0) -> list[dict]:
    """Label Studio's JSON export of `tasks` annotated by `raters` simulated raters."""
    rng = np.random.default_rng(seed)
    out = []
    for i, task in enumerate(tasks, start=1):
        known = gold.get(task["data"]["question"])
        truth = judge_episode(task["data"]["answer"], known["agent_task"]) if known and "agent_task" in known \
            else judge(task["data"]["answer"], known)
        anns = []
        for r in range(raters):
            labels = dict(truth)
            for name in (*SCALES, CORRECTNESS):
                if rng.random() < noise:
                    labels[name] = str(rng.choice(CHOICES)) if name == CORRECTNESS else int(rng.integers(1, 6))
            result = [{"from_name": s, "to_name": "answer", "type": "rating", "value": {"rating": labels[s]}}
                      for s in SCALES]
            result.append({"from_name": CORRECTNESS, "to_name": "answer", "type": "choices",
                           "value": {"choices": [labels[CORRECTNESS]]}})
            anns.append({"id": i * 100 + r, "completed_by": {"id": r + 1, "email": f"simulated-rater{r + 1}@demo.invalid"},
                         "was_cancelled": False, "result": result, "task": i})
        out.append({"id": i, "data": task["data"], "annotations": anns})
    return out
