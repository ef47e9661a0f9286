"""The demo's closed loop, round after round, each round a commit: what `make demo` runs.

    clap demo                      # the rounds of `demo.rounds` in conf/, then a rollback drill, then the timeline
    clap demo -S agent.enabled=true   # the same with Hydra overrides on top of conf/ and demo.overrides (checked)

Round k edits `data.batches` and `demo.poisoned_batch` in conf/config.yaml — the change a person would make
in a pull request when new batches arrive — composes params.yaml, runs `dvc repro`, and commits the round's
evidence whatever the gate said; a promote or canary is tagged by `clap release`, so the next round is judged
against it (the `prod_adapter` stage depends on `release/prod.json`). Before a round with `repair_share`, the
SIMULATED annotator (`clap.demo.annotator`, the demo generator's ground truth, not a person) corrects that
share of the previous round's repair queue into `repair/fixed/`, which the round's assetize reads; what the
repair did is measured into `metrics/repair_effect.json`. A round the gate sends to canary is concluded before the
next: the canary serves SIMULATED traffic (the agent canary too, when the version ships an agent adapter of its
own), the sequential analysis decides, and the canary is promoted to prod or rolled back (tags and a commit), so
the next round is judged against what prod then is. After the last round, a rollback drill: prod goes
back to the version before it, restored from the DVC cache and verified against its release bundle — or, when
only one version was ever in prod, to the base model, and that version back from the DVC cache after its
adapter folder is deleted.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from clap import paths, vcs
from clap.config import check as check_config
from clap.config import compose, dump
from clap.demo import annotator, corpus
from clap.errors import UserError
from clap.io import atomic_write_text, loads_strict, read_json, read_jsonl, sha256_file, write_json, write_jsonl
from clap.release import registry as release
from clap.release.bundle import BUNDLE_PATH

CONF = Path("conf/config.yaml")
EVIDENCE = [str(p) for p in (CONF.parent, Path("params.yaml"), vcs.LOCK, paths.METRICS, paths.BUNDLE.parent,
                              paths.REPAIR_QUEUE.parent, paths.ADMISSION)]

_BATCHES = re.compile(r"^(data:\n(?:[ \t]*#.*\n)*  batches:) *\[[^\]\n]*\]", re.M)
_POISONED = re.compile(r"^(  poisoned_batch:) *[A-Za-z0-9_-]+", re.M)


class RoundError(UserError, RuntimeError):
    """A round could not run: the message names the round and the step."""


def set_round(conf_text: str, batches: list[str], poisoned_batch: str) -> str:
    """conf/config.yaml with `data.batches` and `demo.poisoned_batch` set for a round, comments kept.

    Only those two values change (the diff a reviewer sees between rounds); a conf whose layout no longer
    has them where the demo edits them is refused rather than edited somewhere else."""
    text, n_batches = _BATCHES.subn(lambda m: f"{m.group(1)} [{', '.join(batches)}]", conf_text, count=1)
    text, n_poisoned = _POISONED.subn(lambda m: f"{m.group(1)} {poisoned_batch}", text, count=1)
    if not (n_batches and n_poisoned):
        missing = "data.batches (a flow list under `data:`)" if not n_batches else "demo.poisoned_batch"
        raise RoundError(f"{CONF}: cannot set {missing} for the demo's rounds; restore the layout of conf/config.yaml")
    return text


def demo_overrides(from_conf: list[str], from_command_line: list[str]) -> list[str]:
    """The Hydra overrides of every demo round: conf/'s `demo.overrides`, less those whose key the command
    line sets again, then the command line's (`clap demo -S agent.enabled=true` turns the agent track back on)."""
    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    given = {key(o) for o in from_command_line}
    return [o for o in from_conf if key(o) not in given] + list(from_command_line)


def repair_effect(fixed: list[dict], report: dict, materialized: dict[str, dict[str, list[dict]]],
                  eval_records: list[dict]) -> dict:
    """What a round's repaired rows did: how many came in, became verifiable and landed in training or in a
    holdout, and on the repaired holdout samples the score of the model trained before the repair (prod, or
    the base model before the first release) against the candidate trained after it.

    `materialized` maps batch → {"train": rows, "eval": rows}; `eval_records` are evaluate's per-sample
    records of those batches."""
    ids = {r["record_id"] for r in fixed}
    train = sorted(r["record_id"] for rows in materialized.values() for r in rows["train"] if r["record_id"] in ids)
    held = {r["sample_id"]: r["record_id"] for rows in materialized.values() for r in rows["eval"]
            if r["record_id"] in ids}
    scores: dict[str, dict[str, float]] = {}
    for rec in eval_records:
        if rec["sample_id"] in held:
            scores.setdefault(rec["model"], {})[rec["sample_id"]] = rec["overall_score"]
    before = "prod" if any(rec["model"] == "prod" for rec in eval_records) else "baseline"
    paired = sorted(set(scores.get(before, {})) & set(scores.get("candidate", {})))

    def mean(model: str) -> float | None:
        return round(statistics.fmean(scores[model][s] for s in paired), 4) if paired else None

    return {"fixed_rows": len(ids), "repaired_rows_in": report.get("repaired_rows_in", 0),
            "now_verifiable": report.get("repaired_rows_verifiable", 0),
            "in_training": len(set(train)), "in_holdout": len(held), "scored": len(paired),
            "before_model": before, "overall_before": mean(before), "overall_after": mean("candidate")}


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = vcs.git(None, *args)
    if check and r.returncode != 0:
        raise RoundError(f"git {' '.join(args)}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r


def _identity() -> None:
    """A git identity for the demo's commits where the user has none."""
    if _git("config", "user.email", check=False).returncode != 0:
        for k, v in (("NAME", "clap demo"), ("EMAIL", "demo@clap.invalid")):
            os.environ.setdefault(f"GIT_AUTHOR_{k}", v)
            os.environ.setdefault(f"GIT_COMMITTER_{k}", v)


def _commit(message: str) -> str:
    """Commit the loop's tracked evidence (a round is a commit); the short hash of HEAD."""
    _identity()
    _git("add", "--", *[p for p in EVIDENCE if Path(p).exists()])
    if _git("diff", "--cached", "--quiet", check=False).returncode != 0:
        _git("commit", "-q", "-m", message)
    return _git("rev-parse", "--short=10", "HEAD").stdout.strip()


def reachable_remote(root: Path) -> str | None:
    """Make the project's default DVC remote one that a clone of it reaches: a remote folder inside the project
    (the `.dvc-remote/` a relative url names — in a clone, the clone's own empty folder) is written into `.dvc/config`
    by its absolute path, created and committed. Returns that path, or None when the remote lies outside the project
    already, is a URL (s3://…), or there is none. After the demo, `dvc push --all-tags` fills it, and a `git clone`
    of the project can `dvc pull` any release."""
    root = Path(root).resolve()
    got = vcs.dvc(root, "config", "core.remote")
    name = got.stdout.strip()
    if got.returncode != 0 or not name:
        return None
    url = vcs.dvc(root, "config", f"remote.{name}.url").stdout.strip()
    if not url or "://" in url:
        return None
    folder = Path(url).resolve()  # `dvc config` resolves a relative url from .dvc/
    if not folder.is_relative_to(root):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    if vcs.dvc(root, "remote", "modify", name, "url", str(folder)).returncode:
        raise RoundError(f"dvc remote modify {name} url {folder} failed")
    if _git("diff", "--quiet", "--", ".dvc/config", check=False).returncode == 0:
        return None  # already the absolute path
    _git("add", "--", ".dvc/config")
    _git("commit", "-q", "-m", f"clap demo: the DVC remote {name} is {folder} (a clone of this project pulls from it)",
         "--", ".dvc/config")
    return str(folder)


def _measure_repair(root: Path, batches: list[str]) -> dict:
    materialized = {b: {"train": read_jsonl(root / paths.MATERIALIZED / b / "sft_train.jsonl"),
                        "eval": read_jsonl(root / paths.MATERIALIZED / b / "sft_eval.jsonl")} for b in batches
                    if (root / paths.MATERIALIZED / b / "sft_eval.jsonl").exists()}
    records = [r for b in materialized if (root / paths.EVAL / b / "records.jsonl").exists()
               for r in read_jsonl(root / paths.EVAL / b / "records.jsonl")]
    return repair_effect(read_jsonl(root / paths.SIMULATED_FIXES), read_json(root / paths.ASSETS / "report.json"),
                         materialized, records)


def run(rounds: list[dict], overrides: list[str], say: Callable[[str], None],
        after_round: Callable[[int], None] = lambda k: None,
        run_canary: Callable[[int], dict] | None = None) -> dict:
    """Run the rounds from the project root (see the module docstring); returns what each did, the drill, and
    `since`: the commit the demo started from (its timeline is the rounds after it). A round released to canary
    is concluded before the next one by `run_canary(k)` (serve, simulated traffic, sequential analysis, then the
    promote or rollback tags), and that conclusion is a commit of its own."""
    root = Path(".")
    _identity()
    if (remote := reachable_remote(root)) is not None:
        say(f"the DVC remote is {remote}: `dvc push --all-tags` after the demo, and a clone pulls every release")
    start = _git("rev-parse", "HEAD", check=False).stdout.strip() or None  # the history before the demo's rounds
    done = []
    for k, rnd in enumerate(rounds, start=1):
        poisoned = rnd.get("poisoned_batch", "none")
        atomic_write_text(CONF, set_round(CONF.read_text(encoding="utf-8"), rnd["batches"], poisoned))
        params = check_config(compose(overrides), f"round {k}: conf/ with overrides {' '.join(overrides) or '(none)'}")
        atomic_write_text(Path("params.yaml"), dump(params))
        say(f"round {k}: batches {', '.join(rnd['batches'])}" + (f"; {poisoned} arrives poisoned" if poisoned != "none"
                                                                 else ""))
        share = rnd.get("repair_share", 0.0)
        if share > 0:
            if not paths.REPAIR_QUEUE.exists():
                raise RoundError(f"round {k}: repair_share {share} but {paths.REPAIR_QUEUE} is missing: a round before it "
                                 "must run the pipeline first")
            truth = corpus.generate(seed=params["demo"]["seed"], scale=params["demo"]["scale"])["truth"]
            fixed = annotator.annotate(read_jsonl(paths.REPAIR_QUEUE), truth, share, seed=params["demo"]["seed"])
            write_jsonl(paths.SIMULATED_FIXES, fixed)
            say(f"round {k}: SIMULATED annotator (demo ground truth) corrected {len(fixed)} fact rows of the "
                f"repair queue → {paths.SIMULATED_FIXES}")
        if vcs.dvc(None, "repro", capture=False).returncode != 0:
            raise RoundError(f"round {k}: dvc repro failed (see the stage output above)")
        effect = None
        if share > 0:
            effect = _measure_repair(root, rnd["batches"])
            write_json(paths.REPAIR_EFFECT, effect)
        gate = read_json(paths.GATE)
        commit = _commit(f"clap demo round {k}: {', '.join(rnd['batches'])} → gate {gate['decision']}")
        entry = {"round": k, "commit": commit, "decision": gate["decision"], "repair_effect": effect}
        if gate["decision"] in ("promote", "canary"):
            try:
                entry["release"] = release.release(root)
            except release.ReleaseRefused as exc:
                entry["release_refused"] = str(exc)
            if entry.get("release", {}).get("stage") == "canary" and run_canary is not None:
                entry["canary"] = run_canary(k)
                _commit(f"clap demo round {k}: canary {entry['canary']['version']} {entry['canary']['verdict']} → "
                        f"{entry['canary']['action']}")
        done.append(entry)
        after_round(k)
    return {"rounds": done, "drill": drill(root), "since": start}


def drill(root: Path) -> dict:
    """Roll prod back to the version before it, restored from the DVC cache: `clap.release.registry.rollback` assigns it
    only after the bundle committed at that version's tag verified every pinned file, the adapter's bytes
    included. When no earlier version was ever in prod, the drill takes the fallback every deployment has: prod
    is withdrawn to the base model (GTO unassign tags), the version's adapter folder is deleted, and the version is
    brought back from the DVC cache, verified and assigned prod again. Each step is its own commit."""
    cur = release.current(root, "prod")
    if cur is None:
        return {"skipped": "nothing is in prod: no round was released"}
    if release.previous_prod(root) is None:
        return _drill_through_base(root, cur)
    r = release.rollback(root)
    r["adapter_files_identical"] = r["verified"]
    r["drill_commit"] = _commit(f"clap demo rollback drill: prod {r['from']} → {r['to']}")
    return r


def _drill_through_base(root: Path, cur: dict) -> dict:
    withdrawn = release.rollback(root, release.BASE)
    _commit(f"clap demo rollback drill: prod {cur['version']} → the base model")
    pinned = _pinned_adapter_files(root, cur["commit"])
    for path in pinned:
        (root / path).unlink(missing_ok=True)
    restored = release.rollback(root, cur["version"])
    identical = bool(pinned) and all((root / p).is_file() and sha256_file(root / p) == h for p, h in pinned.items())
    restored["adapter_files_identical"] = restored["verified"] and identical
    restored["drill_commit"] = _commit(f"clap demo rollback drill: {cur['version']} restored from the DVC cache to prod")
    return restored | {"from": cur["version"], "to": release.BASE, "tag": withdrawn["tag"], "withdrawn_tags": withdrawn["tags"],
                       "restored": cur["version"], "restore_tag": restored["tag"], "deleted_files": len(pinned)}


def _pinned_adapter_files(root: Path, commit: str) -> dict[str, str]:
    """path → sha256 of the adapter files (extraction and agent) the bundle committed at `commit` pins."""
    shown = _git("-C", str(root), "show", f"{commit}:{BUNDLE_PATH}").stdout
    return {f["path"]: f["sha256"] for f in loads_strict(shown)["files"] if f["role"] in ("adapter", "agent_adapter")}
