"""Agent tasks from verified facts, with gold trajectories a scripted planner writes and the
environment executes; a trajectory is kept only if it passes APIGen's three checks.

    format     every action is a known tool with valid arguments and survives render → parse
    execution  every call runs (the one the task means to fail fails), the search that should find a
               page finds it, the page read holds the value
    answer     the finish answer scores outcome 1 against the gold and is supported by a tool return

Kinds: `lookup` (one value), `change` (a value's change between two years: two lookups and a
subtraction), `convert` (a value in the unit asked: lookup and convert_unit), `compare` (which of two
companies had the higher value), `unanswerable` (a year no report covers: the right action is to say
so) and `tool_error` (the user cites a page that does not exist: the read fails, the agent recovers).
Train and eval tasks never share a company (split by a hash of the entity), so no eval fact, page or
pair was seen in training.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import pandas as pd

from clap.agent import chat, rewards
from clap.agent.tools import ABSTAIN, ReportTools
from clap.domain import quantities as nz
from clap.domain.prompts import json_number
from clap.io import read_jsonl

KINDS = ("lookup", "change", "convert", "compare", "unanswerable", "tool_error")
ABSENT_PERIOD = "2018"  # no report covers it (the demo's reports run 2021–2025; checked per task below)
_CONVERT_TO = {"万元": "百万元", "吨": "千克", "件": "万件"}
_UNIT_WORD = {"百万元": "million yuan", "千克": "kilograms", "万件": "ten-thousand pieces"}


def split_of(entity: str, eval_fraction: float, seed: str) -> str:
    digest = hashlib.sha256(f"{seed}:{entity}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction else "train"


def _num(v: float) -> str:
    return str(json_number(round(v, 6)))


def _lookup_query(f: dict) -> str:
    return f"{f['entity']}{f['period']}年{f['metric']}" if f["lang"] == "zh" else f"{f['entity']} {f['metric']} {f['period']}"


def _find(f: dict) -> list[tuple[str, str, dict]]:
    """Search for a fact, then read its page."""
    return [("Search.", "search_reports", {"query": _lookup_query(f)}),
            ("Read the page.", "read_chunk", {"chunk_id": f["chunk_id"]})]


def _answer(value: float, unit: str) -> str:
    return f"{_num(value)} {unit}".strip()


def plan(kind: str, facts: list[dict], rng: random.Random) -> tuple[str, list[tuple[str, str, dict]], dict] | None:
    """(question, gold steps, task fields) for one kind over its facts, or None when they do not fit it."""
    f = facts[0]
    zh = f["lang"] == "zh"
    metric = f["metric"] if zh else f["metric"][0].lower() + f["metric"][1:]
    if kind == "lookup":
        answer = _answer(f["value"], f["unit"])
        return f["question"], _find(f) + [("Answer.", "finish", {"answer": answer})], \
            {"answer": answer, "answer_type": "number", "needed_values": []}
    if kind == "change":
        a, b = facts
        if not (a["unit"] == b["unit"] and int(a["period"]) < int(b["period"])):
            return None
        diff = round(b["value"] - a["value"], 2)
        answer = _answer(diff, a["unit"])
        q = (f"{a['entity']}{b['period']}年的{metric}比{a['period']}年变化了多少?" if zh else
             f"By how much did {a['entity']}'s {metric} change from FY{a['period']} to FY{b['period']}?")
        steps = _find(a) + _find(b) + [("Subtract.", "calculate",
                                        {"op": "sub", "a": json_number(b["value"]), "b": json_number(a["value"])}),
                                       ("Answer.", "finish", {"answer": answer})]
        return q, steps, {"answer": answer, "answer_type": "number", "needed_values": [diff]}
    if kind == "convert":
        to_unit = _CONVERT_TO.get(f["unit"])
        if to_unit is None:
            return None
        converted = ReportTools.convert_unit(None, f["value"], f["unit"], to_unit)
        answer = _answer(converted, to_unit)
        q = (f"{f['entity']}{f['period']}年的{metric}是多少{to_unit}?" if zh else
             f"What was {f['entity']}'s {metric} for FY{f['period']} in {_UNIT_WORD[to_unit]}?")
        steps = _find(f) + [("Convert.", "convert_unit",
                             {"value": json_number(f["value"]), "from_unit": f["unit"], "to_unit": to_unit}),
                            ("Answer.", "finish", {"answer": answer})]
        return q, steps, {"answer": answer, "answer_type": "number", "needed_values": [converted]}
    if kind == "compare":
        a, b = facts
        if a["unit"] != b["unit"] or a["value"] == b["value"]:
            return None
        winner = a if a["value"] > b["value"] else b
        q = (f"{a['period']}年{a['entity']}和{b['entity']}哪家的{metric}更高?" if zh else
             f"Which company had the higher {metric} in FY{a['period']}: {a['entity']} or {b['entity']}?")
        steps = _find(a) + _find(b) + [("Compare.", "finish", {"answer": winner["entity"]})]
        return q, steps, {"answer": winner["entity"], "answer_type": "entity", "needed_values": []}
    if kind == "unanswerable":
        gone = f | {"period": ABSENT_PERIOD}
        q = (f"{f['entity']}{ABSENT_PERIOD}年的{metric}是多少?" if zh else
             f"What was {f['entity']}'s {metric} for FY{ABSENT_PERIOD}?")
        steps = [("Search.", "search_reports", {"query": _lookup_query(gone)}),
                 (f"No report covers {ABSENT_PERIOD}.", "finish", {"answer": ABSTAIN})]
        return q, steps, {"answer": ABSTAIN, "answer_type": "abstain", "needed_values": []}
    if kind == "tool_error":
        doc, _, page = f["chunk_id"].rpartition("-p")
        cited = f"{doc}-p{int(page) + 7 + rng.randrange(3)}"
        q = (f"报告页面{cited}载有{f['entity']}{f['period']}年的{metric}，是多少?" if zh else
             f"Report page {cited} gives {f['entity']}'s {metric} for FY{f['period']}; what was it?")
        answer = _answer(f["value"], f["unit"])
        steps = [("Read the cited page.", "read_chunk", {"chunk_id": cited}),
                 *_find(f), ("Answer.", "finish", {"answer": answer})]
        return q, steps, {"answer": answer, "answer_type": "number", "needed_values": [], "cited": cited}
    raise ValueError(f"unknown task kind {kind}")


def execute(tools: ReportTools, question: str, steps: list[tuple[str, str, dict]]) -> tuple[list[dict], dict]:
    """Run gold steps in the environment: the conversation and the episode record of `clap.agent.episode`."""
    messages, record = chat.start(question), {"steps": [], "answer": None, "stop": None}
    for thought, tool, arguments in steps:
        action = chat.Action(thought, tool, arguments)
        obs, ok = tools.call(tool, arguments)
        messages += [action.message(), chat.tool_message(tool, obs)] if tool != "finish" else [action.message()]
        record["steps"].append({"text": action.text(), "valid": tools.argument_problem(tool, arguments) is None,
                                "tool": tool, "arguments": arguments, "observation": obs, "ok": ok})
        if tool == "finish":
            record["answer"], record["stop"] = arguments["answer"], "finish"
    return messages, record


def check(tools: ReportTools, task: dict, record: dict, facts: list[dict]) -> str | None:
    """APIGen's three layers on an executed gold trajectory: the first failed layer and why, or None."""
    for s in record["steps"]:
        written = chat.parse_action(s["text"])
        if not s["valid"] or written is None or (written.tool, written.arguments) != (s["tool"], s["arguments"]):
            return f"format: {s['tool']} {s['arguments']}"
    for s in record["steps"]:
        expected_fail = s["tool"] == "read_chunk" and s["arguments"]["chunk_id"] == task.get("cited")
        if s["ok"] == expected_fail:
            return f"execution: {s['tool']} {'ran' if s['ok'] else 'failed'}: {s['observation'][:80]}"
    searches = [json.loads(s["observation"]) for s in record["steps"] if s["tool"] == "search_reports"]
    hits = {h["chunk_id"] for found in searches for h in found}
    if set(task["needed_chunks"]) - hits:
        return "execution: the search does not retrieve the page that holds the value"
    for f in facts:
        if task["answer_type"] != "abstain" and not nz.value_in_text(f["value"], tools.chunks[f["chunk_id"]].text):
            return f"execution: page {f['chunk_id']} does not hold {f['value']}"
    if task["answer_type"] == "abstain":
        if any(ABSENT_PERIOD in r.text for r in tools.chunks.values()):
            return f"answer: a report mentions {ABSENT_PERIOD}"
    if rewards.outcome(record["answer"], task) != 1.0 or not rewards.supported(record["answer"], record):
        return f"answer: {record['answer']!r} is not the supported gold {task['answer']!r}"
    return None


def _candidates(facts: pd.DataFrame, rng: random.Random) -> list[tuple[str, list[dict]]]:
    """(kind, facts) for every kind, drawn from verified facts."""
    rows = facts.to_dict("records")
    out = [(k, [r]) for r in rows for k in ("lookup", "convert", "unanswerable", "tool_error")]
    by_series: dict[tuple, list[dict]] = {}
    by_slot: dict[tuple, list[dict]] = {}
    for r in rows:
        by_series.setdefault((r["entity"], r["metric"]), []).append(r)
        by_slot.setdefault((r["metric"], r["period"]), []).append(r)
    for series in by_series.values():
        series.sort(key=lambda r: r["period"])
        out += [("change", [a, b]) for a, b in zip(series, series[1:])]
    for slot in by_slot.values():
        slot = sorted(slot, key=lambda r: r["entity"])
        out += [("compare", [a, b]) for a, b in zip(slot, slot[1:])]
    rng.shuffle(out)
    return out


def build(facts: pd.DataFrame, tools: ReportTools, cfg: dict) -> tuple[list[dict], dict]:
    """Tasks with checked gold trajectories, at most `cfg['max_tasks_per_batch'][split]` per batch,
    split and kind, and a report of what was generated, kept and dropped (by layer)."""
    rng = random.Random(cfg["seed"])
    facts = facts[facts["verifiable"] & facts["chunk_id"].notna() & facts["unit"].notna()]
    kept, dropped, counts = [], Counter(), Counter()
    for kind, group in _candidates(facts, rng):
        split = split_of(group[0]["entity"], cfg["eval_fraction"], cfg["seed"])
        if any(split_of(f["entity"], cfg["eval_fraction"], cfg["seed"]) != split for f in group):
            continue  # a pair across the split would leak a train company into eval
        batch = max(f["batch"] for f in group)
        if counts[(batch, split, kind)] >= cfg["max_tasks_per_batch"][split]:
            continue
        planned = plan(kind, group, rng)
        if planned is None:
            continue
        question, steps, fields = planned
        task = {"task_id": "", "batch": batch, "split": split, "kind": kind, "lang": group[0]["lang"],
                "question": question, "record_ids": [f["record_id"] for f in group],
                "entities": [f["entity"] for f in group],
                "needed_chunks": [f["chunk_id"] for f in group] if kind != "unanswerable" else [],
                "needed_reads": [a["chunk_id"] for _, t, a in steps if t == "read_chunk"], **fields}
        messages, record = execute(tools, question, steps)
        useful = rewards.productive_steps(record, task | {"gold_steps": len(steps)})
        if not all(useful[:-1]):  # e.g. a second search whose page the first one already found: the gold path is minimal
            steps = [s for s, keep in zip(steps, useful[:-1] + [True]) if keep]
            messages, record = execute(tools, question, steps)
        task |= {"gold_calls": sum(t != "finish" for _, t, _ in steps), "gold_steps": len(steps)}
        problem = check(tools, task, record, group if kind != "unanswerable" else [])
        if problem:
            dropped[problem.split(":")[0]] += 1
            continue
        counts[(batch, split, kind)] += 1
        task["task_id"] = "t" + hashlib.sha256(json.dumps([kind, task["record_ids"]]).encode()).hexdigest()[:12]
        kept.append(task | {"cited": task.get("cited"), "messages": messages})
    report = {"tasks": len(kept), "dropped_by_check": dict(dropped),
              "by_split_kind": {f"{s}/{k}": n for (s, k), n in sorted(Counter((t["split"], t["kind"]) for t in kept).items())}}
    return sorted(kept, key=lambda t: (t["batch"], t["split"], t["kind"], t["task_id"])), report


def load(folder: Path, split: str) -> list[dict]:
    """The tasks of one split in `folder/tasks.jsonl` (the `agent_tasks` stage's output), in file order."""
    return [t for t in read_jsonl(Path(folder) / "tasks.jsonl") if t["split"] == split]
