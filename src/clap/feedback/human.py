"""Human evaluation round trip through Label Studio.

    clap human export                     # feedback/human/export/{tasks.json,config.xml} + feedback/human/keys/<id>.json
    clap human import EXPORT.json         # Label Studio's JSON export → metrics/human.json + the flywheel inbox

Export samples, per batch, evaluation questions (the extraction holdout), replay cases (the
application's prompt) and held-out agent tasks (the episode: its tool calls, what they returned and its
final answer, beside the pages the task needs) and makes one task per answer of every model — blind: a task shows the source,
the question and an answer, and an opaque uid (a salted hash) in place of the model. The mapping stays
apart in `feedback/human/keys/<export_id>.json` (git-tracked, never sent to annotators), with the
sha256 of every task's answer, so an import is checked against what was exported: an answer that
changed on the way is refused, a task that was never exported is reported and left out.

Import computes, per model, the mean of each 1–5 scale and the correct rate with bootstrap CIs; the
candidate − reference deltas (reference: prod when it was rated, else base) paired by question;
inter-annotator agreement per scale; and the calibration of the automatic metrics against the
human labels. Answers the people rated low or incorrect go to the flywheel inbox
(`feedback/production.jsonl`), which the repair queue reads. The labelled agent episodes, each with its
whole conversation (checked against the hash its export recorded), go to feedback/human/agent_labels.jsonl:
the reward model's check against people (`clap train agent-rm`) reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from clap import paths, vcs
from clap.config import Params
from clap.data.repair import replace_in_inbox
from clap.domain.names import AGENT_CHAIN
from clap.errors import UserError
from clap.evaluate.stats import mean_interval, paired_bootstrap
from clap.feedback import agreement as agr
from clap.feedback import argilla
from clap.feedback.labelstudio import CORRECTNESS, SCALES, labeling_config, parse_export
from clap.io import InputFileError, read_json, read_jsonl, sha256_file, write_json

EVAL_MODELS = {"baseline": "base", "candidate": "candidate", "prod": "prod"}  # evaluate's model names
REPLAY_ARMS = {"A": "base", "B": "candidate", "P": "prod"}  # the replay's RAG arms: the application's answers
AGENT_MODELS = {"base": "agent_base", "prod": "agent_prod",  # evaluate_agent's models: prod is the agent adapter in prod
                **{name: name for name in AGENT_CHAIN}}
AUTOMATIC = {"extraction": ("pass_rate", "overall_score"), "application": ("core_fields_exact", "value_exact"),
             "agent": ("success", "reward")}
COMPARED = (("candidate", None), *((a, ref) for ref in ("agent_base", "agent_prod") for a in AGENT_CHAIN))  # None: prod,
                                                                                                          # else base
SOURCES = (("evaluate@{batch}", "models/sft", "train_sft"), ("replay", "models/sft", "train_sft"),
           ("evaluate_agent", "models/agent_sft", "train_agent_sft"))  # stage, adapter dep, the stage writing it
AGENT_EPISODES = paths.AGENT_EVAL / "episodes.jsonl"
OBSERVATION_CHARS = 400  # a tool result shown to the annotator is cut here


class HumanEvalError(UserError, ValueError):
    pass


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _items(root: Path, batches: list[str]) -> list[dict]:
    """Every question with the answers of each model: {item_id, kind, batch, record_id, source, question, answers}."""
    replay = root / paths.REPLAY / "records.jsonl"
    items, text = [], _chunk_text(root) if replay.exists() or (root / AGENT_EPISODES).exists() else {}
    for b in batches:
        rows = {r["sample_id"]: r for r in read_jsonl(root / paths.MATERIALIZED / b / "sft_eval.jsonl")}
        answers: dict[str, dict] = {}
        for rec in read_jsonl(root / paths.EVAL / b / "records.jsonl") if (root / paths.EVAL / b).exists() else []:
            answers.setdefault(rec["sample_id"], {})[EVAL_MODELS[rec["model"]]] = rec
        for sid, by_model in answers.items():
            row = rows[sid]
            items.append({"item_id": f"eval:{sid}", "kind": "extraction", "batch": b, "record_id": row.get("record_id"),
                          "source": row["source"], "question": row["question"], "answers": by_model})
    if replay.exists():
        cases = {c["case_id"]: c for b in batches for c in read_jsonl(root / paths.MATERIALIZED / b / "replay_cases.jsonl")}
        answers = {}
        for rec in read_jsonl(replay):
            if rec["arm"] in REPLAY_ARMS:
                answers.setdefault(rec["case_id"], {})[REPLAY_ARMS[rec["arm"]]] = rec
        for cid, by_model in answers.items():
            case, first = cases[cid], next(iter(by_model.values()))
            items.append({"item_id": f"replay:{cid}", "kind": "application", "batch": case["batch"],
                          "record_id": case.get("record_id"), "question": case["question"],
                          "source": "\n\n".join(f"[{c}] {text.get(c, '')}" for c in first["retrieved"]),
                          "answers": by_model})
    return items + _agent_items(root, batches, text)


def _chunk_text(root: Path) -> dict[str, str]:
    """chunk_id → text from the assets (replay and agent items show chunks as their source)."""
    chunks = pd.read_parquet(root / paths.ASSETS / "chunks.parquet", columns=["chunk_id", "text"])
    return dict(zip(chunks["chunk_id"], chunks["text"]))


def _episode_text(episode: dict) -> str:
    """What the agent did, as an annotator reads it: each call, what it returned, the final answer."""
    lines = []
    for n, step in enumerate(episode["steps"], start=1):
        if not step.get("valid"):
            lines.append(f"{n}. (not a valid action) {step['text'][:OBSERVATION_CHARS]}")
            continue
        args = ", ".join(f"{k}={v!r}" for k, v in (step.get("arguments") or {}).items())
        lines.append(f"{n}. {step['tool']}({args})")
        if step["tool"] != "finish":
            lines.append(f"   → {str(step.get('observation'))[:OBSERVATION_CHARS]}")
    lines.append(f"Final answer: {episode['answer'] if episode['answer'] is not None else '(none: ' + str(episode['stop']) + ')'}")
    return "\n".join(lines)


def _agent_items(root: Path, batches: list[str], text: dict[str, str]) -> list[dict]:
    """Held-out agent tasks with every model's greedy episode; the source is the pages the task needs
    (`text`: chunk_id → text)."""
    episodes = root / AGENT_EPISODES
    if not episodes.exists():
        return []
    tasks = {t["task_id"]: t for t in read_jsonl(root / paths.AGENT_TASKS / "tasks.jsonl")}
    answers: dict[str, dict] = {}
    for ep in read_jsonl(episodes):
        if ep["run"] == "greedy" and ep["batch"] in batches:
            answers.setdefault(ep["task_id"], {})[AGENT_MODELS[ep["model"]]] = ep | {"output": _episode_text(ep)}
    return [{"item_id": f"agent:{tid}", "kind": "agent", "batch": tasks[tid]["batch"],
             "record_id": ",".join(tasks[tid]["record_ids"]), "question": tasks[tid]["question"],
             "source": "\n\n".join(f"[{c}] {text.get(c, '')}" for c in tasks[tid]["needed_chunks"])
             or "(the reports hold no answer to this question)", "answers": by_model}
            for tid, by_model in answers.items()]


def stale_sources(root: Path, batches: list[str]) -> list[str]:
    """The stages (evaluate@bN, replay, evaluate_agent) whose answers an older adapter gave: in dvc.lock
    they did not run on the adapter its training stage last wrote (models/sft, whose manifest the key
    names; models/agent_sft). Outside a DVC project nothing records which adapter answered, and nothing
    is called stale."""
    stages = vcs.stages(vcs.read_lock(Path(root)))
    if not stages:
        return []

    def md5(stage: str, key: str, path: str) -> str | None:
        return next((o.get("md5") for o in (stages.get(stage) or {}).get(key, []) if o["path"] == path), None)

    names = [(name.format(batch=b), adapter, trainer) for name, adapter, trainer in SOURCES
             for b in (batches if "{batch}" in name else [None])]
    return [name for name, adapter, trainer in names if md5(name, "deps", adapter) != md5(trainer, "outs", adapter)]


def _source_stage(item: dict) -> str:
    return {"extraction": f"evaluate@{item['batch']}", "application": "replay", "agent": "evaluate_agent"}[item["kind"]]


def _rank(seed: str, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def export(cfg: Params, root: Path, out: Path, keys: Path) -> dict:
    """Write the Label Studio import file and config to `out`, the blind mapping to `keys`/<export_id>.json."""
    root, h = Path(root), cfg.human
    stale = stale_sources(root, cfg.data.batches)
    items = [i for i in _items(root, cfg.data.batches) if _source_stage(i) not in stale]
    if not items:
        raise HumanEvalError(f"{root / paths.EVAL}: no current evaluation or replay answers to export "
                             f"({', '.join(stale) or 'none recorded'} did not run on the current models/sft: `dvc repro`)")
    chosen = []
    for group in sorted({(i["batch"], i["kind"]) for i in items}):
        pool = sorted((i for i in items if (i["batch"], i["kind"]) == group), key=lambda i: _rank(h.seed, i["item_id"]))
        chosen += pool[:h.items_per_batch]
    export_id, salt = os.urandom(6).hex(), os.urandom(16).hex()
    tasks, mapping = [], {}
    for item in chosen:
        for model, rec in sorted(item["answers"].items()):
            uid = _rank(salt, f"{item['item_id']}:{model}")[:20]
            tasks.append({"data": {"uid": uid, "export_id": export_id, "source": item["source"],
                                   "question": item["question"], "answer": rec["output"]}})
            mapping[uid] = {"item_id": item["item_id"], "kind": item["kind"], "batch": item["batch"],
                            "record_id": item["record_id"], "model": model, "answer_sha256": _sha(rec["output"]),
                            "automatic": {m: rec[m] for m in AUTOMATIC[item["kind"]]}}
    tasks.sort(key=lambda t: _rank(salt, t["data"]["uid"]))  # the order tells nothing about the model either
    out.mkdir(parents=True, exist_ok=True)
    (out / "tasks.json").write_text(json.dumps(tasks, ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "config.xml").write_text(labeling_config(), encoding="utf-8")
    argilla.write(out / "argilla", tasks, f"clap-human-{export_id}")
    manifest = root / paths.adapter("sft") / paths.MANIFEST
    key = {"export_id": export_id, "salt": salt, "tasks_sha256": sha256_file(out / "tasks.json"),
           "candidate_manifest_sha256": sha256_file(manifest) if manifest.exists() else None,
           "items": len(chosen), "tasks": mapping}
    write_json(keys / f"{export_id}.json", key)
    return {"export_id": export_id, "items": len(chosen), "tasks": len(tasks), "stale_left_out": stale,
            "models": sorted({m["model"] for m in mapping.values()})}


def _load_export(file: Path) -> list:
    try:
        return read_json(file)
    except FileNotFoundError:
        raise HumanEvalError(f"{file}: no such file") from None
    except InputFileError as exc:  # not JSON, or a key repeated inside one object
        raise HumanEvalError(str(exc)) from None


def _key_for(tasks: list, keys: Path, file: Path) -> tuple[dict, Path]:
    ids = {(t.get("data") or {}).get("export_id") for t in tasks if isinstance(t, dict)} - {None}
    if len(ids) != 1:
        raise HumanEvalError(f"{file}: tasks come from {len(ids)} exports ({', '.join(sorted(ids)) or 'none'}); "
                             "import one `clap human export` at a time")
    path = keys / f"{ids.pop()}.json"
    if not path.exists():
        raise HumanEvalError(f"{file}: its export key {path} is missing (the mapping `clap human export` wrote)")
    return read_json(path), path


def _mean_ci(values: list[float], cfg: Params) -> dict:
    """Mean with its bootstrap CI (`stats.mean_interval`)."""
    return mean_interval(values, n=cfg.evaluate.bootstrap, ci=cfg.evaluate.ci, seed=5)


def import_(cfg: Params, root: Path, file: Path, keys: Path, out: Path, inbox: Path) -> dict:
    """Check a Label Studio export against its key, then write `out` (metrics/human.json) and append flagged answers to `inbox`."""
    h = cfg.human
    tasks = _load_export(file)
    try:
        parsed = parse_export(tasks, str(file))
    except ValueError as exc:
        raise HumanEvalError(str(exc)) from None
    key, key_path = _key_for(tasks, keys, Path(file))
    labels, problems = _checked_labels(tasks, parsed, key, key_path, Path(file))
    rows = [{"uid": lab.task_uid, "annotator": lab.annotator, **key["tasks"][lab.task_uid],
             **{s: lab.ratings.get(s) for s in SCALES},
             CORRECTNESS: None if lab.correct is None else float(lab.correct)} for lab in labels]
    df = pd.DataFrame(rows)
    per_task = df.groupby("uid").agg({**dict.fromkeys([*SCALES, CORRECTNESS], "mean"), "model": "first",
                                      "item_id": "first", "kind": "first"})
    models = sorted(per_task["model"].unique())
    result = {"imported": True, "export_id": key["export_id"], "key_sha256": sha256_file(key_path),
              "export_sha256": sha256_file(file), "candidate_manifest_sha256": key["candidate_manifest_sha256"],
              "tasks_exported": len(key["tasks"]), "tasks_labelled": int(per_task.shape[0]), "labels": len(labels),
              "annotators": sorted(df["annotator"].unique()), "cancelled": len(parsed.cancelled),
              "missing_labels": {s: int(df[s].isna().sum()) for s in [*SCALES, CORRECTNESS]},
              "problems": problems, "models": {}, "deltas": {}, "agreement": {}, "calibration": {}}
    for m in models:
        sub = per_task[per_task["model"] == m]
        result["models"][m] = {s: _mean_ci(sub[s].dropna().tolist(), cfg) for s in [*SCALES, CORRECTNESS]}
    ref = "prod" if "prod" in models else "base"
    if "candidate" in models and ref in models:
        result["reference"] = ref
    result["deltas"] = _human_deltas(per_task, models, ref, cfg)
    result["agreement"] = _agreement(df)
    result["calibration"] = _calibration(per_task, key, h.calibration_threshold)
    inbox_rows = _flagged(per_task, key, h)
    replace_in_inbox(inbox, inbox_rows, f"human:{key['export_id']}")
    result["flagged_to_inbox"] = len(inbox_rows)
    agent_rows, agent_problems = _agent_labels(Path(root), per_task, key, df)
    if agent_rows or agent_problems:
        replace_in_inbox(Path(root) / paths.AGENT_HUMAN_LABELS, agent_rows, f"human:{key['export_id']}")
    result["agent_episodes_labelled"] = len(agent_rows)
    result["problems"] += agent_problems
    write_json(out, _finite(result))
    return result


def _checked_labels(tasks: list[dict], parsed, key: dict, key_path: Path, file: Path) -> tuple[list, list[str]]:
    """The labels of tasks the key exported, after refusing an export whose shown answer differs from the one
    exported; the problems found (labels left out, and why)."""
    problems = list(parsed.problems)
    for t in tasks:
        uid, answer = t["data"].get("uid"), t["data"].get("answer")
        if uid in key["tasks"] and _sha(str(answer)) != key["tasks"][uid]["answer_sha256"]:
            raise HumanEvalError(f"{file}: task {t.get('id')} shows an answer that differs from the one exported "
                                 f"(uid {uid}, key {key_path}); refusing the import")
    unknown = sorted({lab.task_id for lab in parsed.labels if lab.task_uid not in key["tasks"]}, key=str)
    problems += [f"task {t}: never exported in {key['export_id']}; its labels left out" for t in unknown]
    labels = [lab for lab in parsed.labels if lab.task_uid in key["tasks"]]
    if not labels:
        raise HumanEvalError(f"{file}: no usable annotation (cancelled {len(parsed.cancelled)}, "
                             f"problems {len(problems)})")
    return labels, problems


def _human_deltas(per_task: pd.DataFrame, models: list[str], ref: str, cfg: Params) -> dict:
    """Each compared pair's paired-bootstrap delta per scale, over the items both were rated on."""
    pivot = {s: per_task.pivot_table(index="item_id", columns="model", values=s) for s in [*SCALES, CORRECTNESS]}
    deltas = {}
    for model, against in ((m, a or ref) for m, a in COMPARED):
        if {model, against} <= set(models):
            deltas[f"{model}-{against}"] = {
                s: paired_bootstrap(p[against].tolist(), p[model].tolist(), n=cfg.evaluate.bootstrap,
                                    ci=cfg.evaluate.ci, seed=7)
                for s, p in ((s, p.dropna(subset=[against, model])) for s, p in pivot.items()
                             if {against, model} <= set(p.columns))}
    return deltas


def _agreement(df: pd.DataFrame) -> dict:
    """Inter-annotator agreement per scale (Krippendorff's alpha; interval scales and nominal correctness)."""
    annotators = sorted(df["annotator"].unique())
    out = {}
    for s, level in [*((s, "interval") for s in SCALES), (CORRECTNESS, "nominal")]:
        wide = df.pivot_table(index="uid", columns="annotator", values=s, aggfunc="first").reindex(columns=annotators)
        units = [[None if pd.isna(v) else v for v in row] for row in wide.to_numpy().tolist()]
        out[s] = agr.agreement(units, level) if len(annotators) > 1 \
            else {"units": len(units), "raters_per_unit": [1], "krippendorff_alpha": None}
    return out


def _calibration(per_task: pd.DataFrame, key: dict, threshold: float) -> dict:
    """How well each automatic metric predicts the people's correctness and usefulness, per kind of task."""
    tasks_df = per_task.join(pd.DataFrame.from_dict(
        {u: key["tasks"][u]["automatic"] for u in per_task.index}, orient="index"))
    out: dict = {}
    for kind, metrics in AUTOMATIC.items():
        sub = tasks_df[tasks_df["kind"] == kind]
        for metric in (m for m in metrics if m in sub and not sub.empty):
            for label, target in ((CORRECTNESS, sub[CORRECTNESS]), ("usefulness", (sub["usefulness"] - 1) / 4)):
                ok = target.notna() & sub[metric].notna()
                if ok.any():
                    out.setdefault(kind, {})[f"{metric}~{label}"] = agr.calibration(
                        sub.loc[ok, metric].tolist(), target[ok].tolist(), threshold)
    return out


def _agent_labels(root: Path, per_task: pd.DataFrame, key: dict, df: pd.DataFrame) -> tuple[list[dict], list[str]]:
    """The labelled agent episodes with their conversations (for the reward model's check against people), each
    found again in data/eval_agent/episodes.jsonl and checked against the hash of the text its raters saw; an
    episode that changed or went since the export is left out and named."""
    agent = per_task[per_task["kind"] == "agent"]
    if agent.empty:
        return [], []
    model_of = {v: k for k, v in AGENT_MODELS.items()}
    file = root / AGENT_EPISODES
    episodes = {(ep["task_id"], ep["model"]): ep for ep in (read_jsonl(file) if file.exists() else [])
                if ep["run"] == "greedy"}
    rows, problems = [], []
    for uid, r in agent.iterrows():
        ep = episodes.get((r["item_id"].removeprefix("agent:"), model_of[r["model"]]))
        if ep is None or "messages" not in ep or _sha(_episode_text(ep)) != key["tasks"][uid]["answer_sha256"]:
            problems.append(f"agent episode {r['item_id']} of {r['model']}: not in {file} as exported; "
                            "its labels are not kept for the reward model's check")
            continue
        rows.append({"export_id": key["export_id"], "uid": uid, "task_id": ep["task_id"], "model": ep["model"],
                     "correct": None if pd.isna(r[CORRECTNESS]) else float(r[CORRECTNESS]),
                     "usefulness": None if pd.isna(r["usefulness"]) else float(r["usefulness"]),
                     "annotators": sorted(df.loc[df["uid"] == uid, "annotator"].unique().tolist()),
                     "messages": ep["messages"], "steps": [{"text": s["text"]} for s in ep["steps"]]})
    return [x for x in rows if x["correct"] is not None], problems


def _flagged(per_task: pd.DataFrame, key: dict, h: dict) -> list[dict]:
    """The inbox rows of answers people flagged: rated low, or no majority of its raters called it correct."""
    flagged = per_task[(per_task["usefulness"] <= h.flag_usefulness_at_most) | (per_task[CORRECTNESS] <= 0.5)]
    flagged = flagged[flagged["model"].isin(["candidate", "prod", "agent_prod", *AGENT_CHAIN])]
    return [{"source": "human_flagged", "export_id": key["export_id"], "uid": u,
             "reason": "rated incorrect" if r[CORRECTNESS] <= 0.5 else f"usefulness {r['usefulness']:.1f}",
             "record_id": key["tasks"][u]["record_id"], "item_id": r["item_id"], "model": r["model"]}
            for u, r in flagged.iterrows()]


def _finite(obj):
    """NaN (a scale nobody rated) → None, so metrics/human.json stays strict JSON."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj
