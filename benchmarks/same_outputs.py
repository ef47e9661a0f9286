"""Does a refactor change what the pipeline writes? The same stages from two commits, each in a fresh clone, and
their outputs' DVC hashes compared.

    python benchmarks/same_outputs.py --before REV --after REV [--stages demo_data,assetize,...] [--work DIR]
    python benchmarks/same_outputs.py --before REV --after REV --tiny      # the whole pipeline, minutes
    python benchmarks/same_outputs.py --before REV --after REV --tiny --compare-only   # the clones already run

Each clone runs `dvc repro -s <stages>` with its own code (PYTHONPATH: its src/); each output dvc.lock records is
hashed by content and the two are printed side by side, stage by stage, with `same` or `DIFFERS`. The default stages are
the demo's data stages (no model): demo_data, assetize, materialize@b1..b5, admit@b1..b5, index, agent_tasks. A
stage that needs the model (train_*, evaluate@*, replay) can be named too; it then takes its real time.

`--tiny` runs every stage (`dvc repro`) on the pipeline test's tiny configuration (`tests/test_e2e_loop.py`
`TINY_OVERRIDES`) with a tiny random model built once, so training, evaluation, the gate and the bundle are
compared too. Wall-clock figures (latency, run time, tokens/s) differ on every run of the same code, so JSON,
JSON lines and Markdown are hashed without them (`TIMING`); every other file byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# wall-clock figures: different on every run of the same code (compared apart from the rest of a metrics file)
TIMING = ("latency", "runtime", "per_s", "per_second", "seconds", "elapsed", "_s_", "wall", "time", "started", "rss")
DATA_STAGES = ["demo_data", "assetize", *[f"materialize@b{i}" for i in range(1, 6)],
               *[f"admit@b{i}" for i in range(1, 6)], "index", "agent_tasks"]


def run(rev: str, work: Path, stages: list[str], overrides: list[str] | None = None, again: bool = True
        ) -> dict[tuple[str, str], str]:
    clone = work / rev
    if not again:  # compare the outputs an earlier run left in its clone
        return outputs(clone, stages)
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
    env = os.environ | {"PYTHONPATH": str(clone / "src"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with (clone / "repro.log").open("w") as log:
        if overrides is not None:
            subprocess.run(["clap", "params", *[a for o in overrides for a in ("-S", o)]], cwd=clone, env=env,
                           stdout=log, stderr=subprocess.STDOUT, check=True)
        subprocess.run(["dvc", "repro", *(["-s", *stages] if stages else [])], cwd=clone, env=env, stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    return outputs(clone, stages)


def outputs(clone: Path, stages: list[str]) -> dict[tuple[str, str], str]:
    """(stage, path) → fingerprint of every output dvc.lock records in `clone` (of `stages`; all when empty)."""
    lock = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    return {(s, o["path"]): _fingerprint(clone / o["path"], o.get("md5"), clone) for s, st in lock.items()
            if not stages or s in stages for o in st.get("outs", [])}


def _fingerprint(path: Path, md5: str | None, clone: Path | None = None) -> str | None:
    """A hash of the output's files with wall-clock figures left out: JSON and JSON lines without the timing keys,
    CSV and TSV without the timing columns, Markdown without the lines naming them, no file named by one
    (DVCLive's `runtime.tsv`); other files byte for byte. An evidence bundle (`release/`) is compared through
    `_bundle_view`. The md5 DVC recorded for an empty output."""
    files = sorted(f for f in ([path] if path.is_file() else path.rglob("*"))
                   if f.is_file() and not any(t in f.stem for t in TIMING))
    digest = hashlib.sha256()
    for f in files:
        raw = f.read_bytes()
        if f.suffix in (".json", ".jsonl", ".md", ".csv", ".tsv"):
            text = raw.decode("utf-8", errors="replace")
            if f.suffix == ".json":
                doc = json.loads(text)
                if clone is not None and isinstance(doc, dict) and {"code_commit", "files"} <= set(doc):
                    doc = _bundle_view(doc, clone)
                kept = json.dumps(_without_timing(doc), sort_keys=True)
            elif f.suffix == ".jsonl":
                kept = "\n".join(json.dumps(_without_timing(json.loads(line)), sort_keys=True)
                                 for line in text.splitlines() if line.strip())
            elif f.suffix in (".csv", ".tsv"):
                kept = _without_timing_columns(text, "," if f.suffix == ".csv" else "\t")
            else:
                kept = "\n".join(line for line in text.splitlines() if not any(t in line for t in TIMING))
            raw = kept.encode()
        digest.update(f.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        digest.update(raw)
    return f"content {digest.hexdigest()[:12]}" if files else md5


def _bundle_view(bundle: dict, clone: Path) -> dict:
    """An evidence bundle as two runs of the same pipeline can agree on: without `code_commit` (each clone's own
    commit, different by design), each file it pins by its own timing-free fingerprint instead of its raw sha256
    (a train record's run time or an evaluation's latencies change the raw hash on every run)."""
    files = [f | {"sha256": _fingerprint(clone / f["path"], None)} for f in bundle["files"]]
    return {k: v for k, v in bundle.items() if k != "code_commit"} | {"files": files}


def _without_timing_columns(text: str, sep: str) -> str:
    rows = [line.split(sep) for line in text.splitlines()]
    keep = [i for i, name in enumerate(rows[0] if rows else []) if not any(t in name for t in TIMING)]
    return "\n".join(sep.join(r[i] for i in keep if i < len(r)) for r in rows)


def _without_timing(value):
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if not any(t in k for t in TIMING)}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def tiny_overrides(work: Path) -> list[str]:
    """The pipeline test's tiny configuration, on a tiny random model made once under `work`."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "src"))
    from tests.test_e2e_loop import TINY_OVERRIDES

    from clap.model import tiny_model_dir

    folder = work / "tiny-model"
    if not (folder / "config.json").exists():
        tiny_model_dir(folder, ROOT / "models" / "base")
    return [*TINY_OVERRIDES, f"model.base={folder}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--stages", default=",".join(DATA_STAGES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/clap-same-outputs"))
    ap.add_argument("--tiny", action="store_true", help="every stage, on the pipeline test's tiny configuration")
    ap.add_argument("--compare-only", action="store_true", help="compare the clones an earlier run left in --work")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    stages, overrides = ([], None) if args.tiny else (args.stages.split(","), None)
    if args.tiny and not args.compare_only:
        overrides = tiny_overrides(args.work)
    again = not args.compare_only
    before, after = (run(rev, args.work, stages, overrides, again) for rev in (args.before, args.after))
    differ = 0
    for key in sorted(set(before) | set(after)):
        same = before.get(key) == after.get(key)
        differ += not same
        print(f"{'same   ' if same else 'DIFFERS'} {key[0]:22s} {key[1]:40s} {before.get(key)}  {after.get(key)}")
    print(f"{len(set(before) | set(after)) - differ} outputs the same, {differ} differ")


if __name__ == "__main__":
    main()
