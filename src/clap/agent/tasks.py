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
Two more kinds are held-out tool compositions, evaluation only: `change_convert` (a change, then
converted to the unit asked: subtraction and convert_unit in one plan) and `total` (two years added:
the `add` operation, which no training plan uses).

What evaluation holds out, so that a success is a skill and not a memory:
    companies    train and eval tasks never share one (split by a hash of the entity): no eval fact,
                 page or pair was seen in training;
    phrasings    each kind's training phrasing (`TEMPLATES[kind, lang][0]`) never phrases an eval task,
                 which takes one of the others;
    compositions the held-out kinds' plans (`HELD_OUT_KINDS`) never appear among the training tasks.
`leakage(tasks)` checks all three from the questions and gold plans themselves (not from the labels the
planner wrote), and the `agent_tasks` stage refuses to write tasks that leak.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from clap.agent import chat, rewards
from clap.agent.tools import ABSTAIN, ReportTools
from clap.config import AgentTasks
from clap.domain import names
from clap.domain import quantities as nz
from clap.domain.contracts import AGENT_LIST_FIELDS
from clap.domain.prompts import json_number
from clap.io import read_jsonl

KINDS, TRAIN_KINDS, HELD_OUT_KINDS = names.AGENT_KINDS, names.AGENT_TRAIN_KINDS, names.AGENT_HELD_OUT_KINDS

# Question phrasings per (kind, language), fields filled by `str.format`: the first is the training
# phrasing, the rest are held out for evaluation (an eval task takes one of them, chosen by a hash of its
# facts). A lookup's training question is the corpus's own (`facts.question`), hence None.
TEMPLATES: dict[tuple[str, str], tuple[str | None, ...]] = {
    ("lookup", "en"): (None, "Look up the {metric} {entity} reported for fiscal year {period}.",
                       "In fiscal {period}, what {metric} did {entity} report?"),
    ("lookup", "zh"): (None, "请查一下{entity}在{period}年报告的{metric}。", "{period}财年{entity}披露的{metric}为多少?"),
    ("change", "en"): ("By how much did {entity}'s {metric} change from FY{period} to FY{period_b}?",
                       "What is the difference in {entity}'s {metric} between fiscal {period} and fiscal {period_b} "
                       "(later minus earlier)?",
                       "Compute how much {entity}'s {metric} moved from FY{period} to FY{period_b}."),
    ("change", "zh"): ("{entity}{period_b}年的{metric}比{period}年变化了多少?", "从{period}年到{period_b}年，{entity}的{metric}增减了多少?",
                       "请计算{entity}{metric}在{period}年至{period_b}年间的变化量。"),
    ("convert", "en"): ("What was {entity}'s {metric} for FY{period} in {unit_word}?",
                        "Express {entity}'s FY{period} {metric} in {unit_word}.",
                        "How many {unit_word} was {entity}'s {metric} in fiscal {period}?"),
    ("convert", "zh"): ("{entity}{period}年的{metric}是多少{to_unit}?", "{entity}{period}年的{metric}换算成{to_unit}是多少?",
                        "请以{to_unit}为单位给出{entity}{period}年的{metric}。"),
    ("compare", "en"): ("Which company had the higher {metric} in FY{period}: {entity} or {entity_b}?",
                        "Between {entity} and {entity_b}, whose FY{period} {metric} was larger?",
                        "Did {entity} or {entity_b} report more {metric} for fiscal {period}?"),
    ("compare", "zh"): ("{period}年{entity}和{entity_b}哪家的{metric}更高?", "{entity}与{entity_b}相比，{period}年谁的{metric}更大?",
                        "{period}年的{metric}，{entity}和{entity_b}哪一家更多?"),
    ("unanswerable", "en"): ("What was {entity}'s {metric} for FY{period}?", "Look up {entity}'s {metric} for fiscal {period}.",
                             "How much {metric} did {entity} report in FY{period}?"),
    ("unanswerable", "zh"): ("{entity}{period}年的{metric}是多少?", "请查一下{entity}在{period}年的{metric}。",
                             "{period}财年{entity}的{metric}为多少?"),
    ("tool_error", "en"): ("Report page {cited} gives {entity}'s {metric} for FY{period}; what was it?",
                           "According to page {cited}, what was {entity}'s FY{period} {metric}?",
                           "Check page {cited} for {entity}'s {metric} in fiscal {period} and tell me the figure."),
    ("tool_error", "zh"): ("报告页面{cited}载有{entity}{period}年的{metric}，是多少?", "根据报告第{cited}页，{entity}{period}年的{metric}是多少?",
                           "请查看页面{cited}，告诉我{entity}{period}年的{metric}。"),
    ("change_convert", "en"): (None, "By how much did {entity}'s {metric} change from FY{period} to FY{period_b}, "
                                     "in {unit_word}?",
                               "In {unit_word}, how much did {entity}'s {metric} move between fiscal {period} and "
                               "fiscal {period_b}?"),
    ("change_convert", "zh"): (None, "{entity}的{metric}从{period}年到{period_b}年变化了多少{to_unit}?",
                               "以{to_unit}计，{entity}{period_b}年的{metric}比{period}年增减了多少?"),
    ("total", "en"): (None, "What was {entity}'s combined {metric} over FY{period} and FY{period_b}?",
                      "Add up {entity}'s {metric} for fiscal {period} and fiscal {period_b}."),
    ("total", "zh"): (None, "{entity}{period}年和{period_b}年的{metric}合计是多少?", "请把{entity}{period}年与{period_b}年的{metric}相加。"),
}
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


def phrasing(kind: str, lang: str, split: str, key: str) -> int:
    """Which of `TEMPLATES[kind, lang]` phrases a task: the training phrasing (0) in train, one of the held-out
    ones in eval, chosen by a hash of `key` (the task's facts) so the choice is stable and draws no randomness."""
    if split == "train":
        return 0
    held_out = len(TEMPLATES[(kind, lang)]) - 1
    return 1 + int.from_bytes(hashlib.sha256(f"{kind}:{key}".encode()).digest()[:4], "big") % held_out


def plan(kind: str, facts: list[dict], rng: random.Random, template: int = 0
         ) -> tuple[str, list[tuple[str, str, dict]], dict] | None:
    """(question, gold steps, task fields) for one kind over its facts, phrased by `TEMPLATES[kind, lang][template]`,
    or None when the facts do not fit the kind."""
    f = facts[0]
    zh = f["lang"] == "zh"
    metric = f["metric"] if zh else f["metric"][0].lower() + f["metric"][1:]
    words = {"entity": f["entity"], "metric": metric, "period": f["period"]}

    def ask(**more) -> str:
        phrase = TEMPLATES[(kind, f["lang"])][template]
        return f["question"] if phrase is None else phrase.format(**(words | more))

    if kind == "lookup":
        answer = _answer(f["value"], f["unit"])
        return ask(), _find(f) + [("Answer.", "finish", {"answer": answer})], \
            {"answer": answer, "answer_type": "number", "needed_values": []}
    if kind in ("change", "change_convert", "total"):
        return _two_years(kind, facts, ask)
    if kind == "convert":
        to_unit = _CONVERT_TO.get(f["unit"])
        if to_unit is None:
            return None
        converted = ReportTools.convert_unit(None, f["value"], f["unit"], to_unit)
        answer = _answer(converted, to_unit)
        steps = _find(f) + [_convert_step(f["value"], f["unit"], to_unit), ("Answer.", "finish", {"answer": answer})]
        return ask(to_unit=to_unit, unit_word=_UNIT_WORD[to_unit]), steps, \
            {"answer": answer, "answer_type": "number", "needed_values": [converted]}
    if kind == "compare":
        a, b = facts
        if a["unit"] != b["unit"] or a["value"] == b["value"]:
            return None
        winner = a if a["value"] > b["value"] else b
        steps = _find(a) + _find(b) + [("Compare.", "finish", {"answer": winner["entity"]})]
        return ask(entity_b=b["entity"]), steps, {"answer": winner["entity"], "answer_type": "entity", "needed_values": []}
    if kind == "unanswerable":
        gone = f | {"period": ABSENT_PERIOD}
        steps = [("Search.", "search_reports", {"query": _lookup_query(gone)}),
                 (f"No report covers {ABSENT_PERIOD}.", "finish", {"answer": ABSTAIN})]
        return ask(period=ABSENT_PERIOD), steps, {"answer": ABSTAIN, "answer_type": "abstain", "needed_values": []}
    if kind == "tool_error":
        doc, _, page = f["chunk_id"].rpartition("-p")
        cited = f"{doc}-p{int(page) + 7 + rng.randrange(3)}"
        answer = _answer(f["value"], f["unit"])
        steps = [("Read the cited page.", "read_chunk", {"chunk_id": cited}),
                 *_find(f), ("Answer.", "finish", {"answer": answer})]
        return ask(cited=cited), steps, {"answer": answer, "answer_type": "number", "needed_values": [], "cited": cited}
    raise ValueError(f"unknown task kind {kind}")


def _convert_step(value: float, unit: str, to_unit: str) -> tuple[str, str, dict]:
    return ("Convert.", "convert_unit", {"value": json_number(value), "from_unit": unit, "to_unit": to_unit})


def _two_years(kind: str, facts: list[dict], ask) -> tuple[str, list[tuple[str, str, dict]], dict] | None:
    """A change between two years of one series (`change`), that change in another unit (`change_convert`), or
    the two years added (`total`): both values looked up, then computed on."""
    a, b = facts
    if not (a["unit"] == b["unit"] and int(a["period"]) < int(b["period"])):
        return None
    to_unit = _CONVERT_TO.get(a["unit"])
    if kind != "change" and to_unit is None:  # a sum or a conversion of a ratio or a share means nothing
        return None
    op, result = ("add", round(a["value"] + b["value"], 2)) if kind == "total" else ("sub", round(b["value"] - a["value"], 2))
    steps = _find(a) + _find(b) + [("Add." if op == "add" else "Subtract.", "calculate",
                                    {"op": op, "a": json_number(b["value"]), "b": json_number(a["value"])})]
    needed, unit, words = [result], a["unit"], {"period_b": b["period"]}
    if kind == "change_convert":
        result = ReportTools.convert_unit(None, result, a["unit"], to_unit)
        steps.append(_convert_step(needed[0], a["unit"], to_unit))
        needed, unit = needed + [result], to_unit
        words |= {"to_unit": to_unit, "unit_word": _UNIT_WORD[to_unit]}
    answer = _answer(result, unit)
    return ask(**words), steps + [("Answer.", "finish", {"answer": answer})], \
        {"answer": answer, "answer_type": "number", "needed_values": needed}


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


def _candidates(facts: pd.DataFrame, rng: random.Random, split) -> list[tuple[str, list[dict]]]:
    """(kind, facts) for every kind, drawn from verified facts; `split(entity)` keeps a compared pair in one split."""
    rows = facts.to_dict("records")
    out = [(k, [r]) for r in rows for k in ("lookup", "convert", "unanswerable", "tool_error")]
    by_series: dict[tuple, list[dict]] = {}
    by_slot: dict[tuple, list[dict]] = {}
    for r in rows:
        by_series.setdefault((r["entity"], r["metric"]), []).append(r)
        by_slot.setdefault((r["metric"], r["period"], split(r["entity"])), []).append(r)
    for series in by_series.values():
        series.sort(key=lambda r: r["period"])
        out += [(k, [a, b]) for a, b in zip(series, series[1:]) for k in ("change", *HELD_OUT_KINDS)]
    for slot in by_slot.values():
        slot = sorted(slot, key=lambda r: r["entity"])
        out += [("compare", [a, b]) for a, b in zip(slot, slot[1:]) if a["entity"] != b["entity"]]
    rng.shuffle(out)
    return out


def build(facts: pd.DataFrame, tools: ReportTools, cfg: AgentTasks) -> tuple[list[dict], dict]:
    """Tasks with checked gold trajectories, at most `cfg.max_tasks_per_batch[split]` per batch,
    split and kind, and a report of what was generated, kept and dropped (by layer)."""
    rng = random.Random(cfg.seed)
    facts = facts[facts["verifiable"] & facts["chunk_id"].notna() & facts["unit"].notna()]
    kept, dropped, counts = [], Counter(), Counter()

    def split_of_entity(entity: str) -> str:
        return split_of(entity, cfg.eval_fraction, cfg.seed)

    for kind, group in _candidates(facts, rng, split_of_entity):
        split = split_of_entity(group[0]["entity"])
        if any(split_of_entity(f["entity"]) != split for f in group):
            continue  # a pair across the split would leak a train company into eval
        if split == "train" and kind in HELD_OUT_KINDS:
            continue  # a held-out composition is never trained on
        batch = max(f["batch"] for f in group)
        if counts[(batch, split, kind)] >= cfg.max_tasks_per_batch[split]:
            continue
        template = phrasing(kind, group[0]["lang"], split, json.dumps([f["record_id"] for f in group]))
        planned = plan(kind, group, rng, template)
        if planned is None:
            continue
        question, steps, fields = planned
        task = {"task_id": "", "batch": batch, "split": split, "kind": kind, "lang": group[0]["lang"],
                "template": f"{kind}/{group[0]['lang']}/{template}",
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
              "by_split_kind": {f"{s}/{k}": n for (s, k), n in sorted(Counter((t["split"], t["kind"]) for t in kept).items())},
              "by_split_template": {f"{s}/{p}": n for (s, p), n in
                                    sorted(Counter((t["split"], t["template"]) for t in kept).items())}}
    return sorted(kept, key=lambda t: (t["batch"], t["split"], t["kind"], t["task_id"])), report


def from_correction(tools: ReportTools, row: dict, companies: list[str]) -> tuple[dict | None, str | None]:
    """A trajectory a person corrected (`repair/agent/*.jsonl`: `correction_id`, `question`, `actions` — each
    {thought, tool, arguments}, the last a finish) as a training task, or why it is refused. It is executed in the
    environment and must pass APIGen's checks as the planner's are: every action a valid call of a known tool,
    every call run, a final finish whose answer a tool return supports (or an abstention). What it needs — the
    pages it read and found, the values it computed — is read off the trajectory; `companies` (every company the
    facts name) gives the ones its question names, which the leakage check keeps out of evaluation."""
    cid, question, actions = row.get("correction_id"), row.get("question"), row.get("actions")
    if not (isinstance(cid, str) and cid and isinstance(question, str) and question and isinstance(actions, list)
            and actions and all(isinstance(a, dict) for a in actions)):
        return None, "format: needs correction_id, question and a non-empty list of actions"
    steps = [(a.get("thought", ""), a.get("tool"), a.get("arguments")) for a in actions]
    for thought, tool, arguments in steps:
        problem = tools.argument_problem(tool, arguments) if isinstance(tool, str) else "no tool"
        if problem or not isinstance(thought, str):
            return None, f"format: {tool}: {problem or 'thought is not text'}"
    if steps[-1][1] != "finish" or any(t == "finish" for _, t, _ in steps[:-1]):
        return None, "format: the last action, and only it, must be finish"
    messages, record = execute(tools, question, steps)
    failed = next((s for s in record["steps"] if not s["ok"] and s["tool"] != "finish"), None)
    if failed:
        return None, f"execution: {failed['tool']} failed: {failed['observation'][:80]}"
    answer = record["answer"]
    if not rewards.supported(answer, record):
        return None, f"answer: {answer!r} is not supported by any tool return"
    calls = [s for s in record["steps"] if s["tool"] != "finish"]
    reads = [s["arguments"]["chunk_id"] for s in calls if s["tool"] == "read_chunk"]
    kind = "abstain" if rewards.is_abstention(answer) else "number" if nz.parse_quantity(answer) else "entity"
    lang = "zh" if re.search(r"[\u4e00-\u9fff]", question) else "en"
    task = {"task_id": "c" + hashlib.sha256(json.dumps([cid, question, actions], sort_keys=True).encode()).hexdigest()[:12],
            "batch": "corrections", "split": "train", "kind": names.AGENT_CORRECTED, "lang": lang,
            "template": f"{names.AGENT_CORRECTED}/{lang}/0",
            "question": question, "record_ids": [], "entities": [c for c in companies if c in question],
            "answer": answer, "answer_type": kind, "needed_chunks": list(dict.fromkeys(reads)), "needed_reads": reads,
            "needed_values": [float(s["observation"]) for s in calls if s["tool"] in ("calculate", "convert_unit")],
            "gold_calls": len(calls), "gold_steps": len(steps), "cited": None, "messages": messages}
    return task, None


def _pattern(template: str) -> re.Pattern:
    """A phrasing as a regular expression: its fixed words literal, each field any text."""
    return re.compile("^" + ".+?".join(map(re.escape, re.split(r"\{\w+\}", template))) + "$", re.S)


_PATTERNS = {(kind, lang, i): _pattern(t) for (kind, lang), ts in TEMPLATES.items() for i, t in enumerate(ts) if t}


def phrasings_matched(question: str) -> set[tuple[str, str, int]]:
    """Every phrasing of `TEMPLATES` the question's text fits, read from the text alone."""
    return {key for key, pattern in _PATTERNS.items() if pattern.match(question)}


def composition(task: dict) -> tuple[str, ...]:
    """The computing part of a task's gold plan, read from its gold conversation: each calculate (with its
    operation) and convert_unit call in order — what makes `change_convert` and `total` new plans."""
    ops = []
    for m in task["messages"]:
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            if fn["name"] == "calculate":
                ops.append(f"calculate:{fn['arguments']['op']}")
            elif fn["name"] == "convert_unit":
                ops.append("convert_unit")
    return tuple(ops)


def leakage(tasks: list[dict]) -> list[str]:
    """How the eval tasks leak into training, one line each (empty when they do not): a company in both
    splits, a training question that fits a held-out phrasing, a training plan with a held-out composition.
    Read from the questions and gold conversations, so a planner that mislabels its tasks is still caught."""
    train = [t for t in tasks if t["split"] == "train"]
    held = [t for t in tasks if t["split"] == "eval"]
    problems = [f"company {e!r} is in train and eval" for e in
                sorted({e for t in train for e in t["entities"]} & {e for t in held for e in t["entities"]})]
    held_out_phrasings = {key for key in _PATTERNS if key[2] > 0}
    for t in train:
        seen = phrasings_matched(t["question"]) & held_out_phrasings
        if seen:
            kind, lang, i = sorted(seen)[0]
            problems.append(f"train task {t['task_id']} is phrased as held-out {kind}/{lang}/{i}: {t['question']!r}")
    held_out_plans = {composition(t) for t in held if t["kind"] in HELD_OUT_KINDS}
    problems += [f"train task {t['task_id']} has a held-out plan {' → '.join(composition(t))}"
                 for t in train if composition(t) in held_out_plans]
    return problems


def load(folder: Path, split: str) -> list[dict]:
    """The tasks of one split in `folder/tasks.jsonl` (the `agent_tasks` stage's output), in file order."""
    return [t for t in read_jsonl(Path(folder) / "tasks.jsonl") if t["split"] == split]


def by_kind_round_robin(tasks: list[dict], limit: int | None) -> list[dict]:
    """At most `limit` tasks, one kind after another, so a small evaluation still covers every kind."""
    if limit is None or limit >= len(tasks):
        return tasks
    queues: dict[str, list[dict]] = {}
    for t in tasks:
        queues.setdefault(t["kind"], []).append(t)
    out: list[dict] = []
    while len(out) < limit:
        for kind in sorted(queues):
            if queues[kind] and len(out) < limit:
                out.append(queues[kind].pop(0))
    return out


def gold_states(tools: ReportTools, tasks: list[dict]) -> list[dict]:
    """One row per agent turn of every task's gold trajectory: the conversation before it (`prefix`), the steps
    the gold trajectory ran before it (`prefix_steps`, executed in `tools`) and the task — the states `clap train agent-rloo` samples actions in."""
    out = []
    for task in tasks:
        gold = [(m["content"], m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["function"]["arguments"])
                for m in task["messages"] if m["role"] == "assistant"]
        _, record = execute(tools, task["question"], gold)
        turns = [i for i, m in enumerate(task["messages"]) if m["role"] == "assistant"]
        for j, i in enumerate(turns):
            out.append({"task": task, "turn": j, "prefix": task["messages"][:i], "prefix_steps": record["steps"][:j]})
    return out


def as_frame(rows: list[dict]) -> pd.DataFrame:
    """Tasks as the contract's flat table: list fields as JSON text."""
    frame = pd.DataFrame([{k: v for k, v in r.items() if k not in AGENT_LIST_FIELDS} for r in rows])
    for field in AGENT_LIST_FIELDS:
        frame[f"{field}_json"] = [json.dumps(r[field], ensure_ascii=False) for r in rows]
    return frame


def corrected(tools: ReportTools, folder: Path | None, rows: list[dict], companies: list[str]
              ) -> tuple[list[dict], dict[str, str], list[dict]]:
    """The corrected trajectories in `folder/*.jsonl` that pass the checks and leak nothing into evaluation, as
    training tasks; {correction_id: task_id} of those kept; the refused ones, each with its file, line and why."""
    kept, ids, refused = [], {}, []
    for file in sorted(Path(folder).glob("*.jsonl")) if folder is not None and Path(folder).is_dir() else []:
        for line_no, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row, task, why = {}, None, "format: not a JSON object"
            else:
                task, why = from_correction(tools, row, companies) if isinstance(row, dict) \
                    else (None, "format: not a JSON object")
            if task is not None and task["task_id"] in {t["task_id"] for t in rows + kept}:
                task, why = None, "duplicate: the same correction is already in"
            if task is not None and (leaks := leakage(rows + kept + [task])):
                task, why = None, f"leakage: {leaks[0]}"
            if task is None:
                refused.append({"file": str(file), "line": line_no, "correction_id": row.get("correction_id")
                                if isinstance(row, dict) else None, "reason": why})
                continue
            kept.append(task)
            ids[row["correction_id"]] = task["task_id"]
    return kept, ids, refused
