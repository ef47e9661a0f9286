"""The demo's printed summary: what the loop found, per stage, read from the files it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _load(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def print_summary(console: Console, root: Path) -> None:
    report = _load(root / "data/assets/report.json")
    if report:
        t = Table(title="assetize")
        for col in ("input", "rows in", "kept", "quarantined"):
            t.add_column(col)
        for name, e in report["inputs"].items():
            t.add_row(name, str(e["rows_in"]), str(e["kept"]), str(e["quarantined"]))
        console.print(t)
        console.print("noise found/fixed: " + ", ".join(f"{k}={v}" for k, v in report["noise"].items() if v))
    batches = sorted(p.name for p in (root / "data/materialized").glob("*") if p.is_dir())
    if batches:
        t = Table(title="materialize (overlap before → after cleaning)")
        for col in ("batch", "train", "holdout", "near-dup overlap", "exact overlap", "repair"):
            t.add_column(col)
        for b in batches:
            q = _load(root / "data/materialized" / b / "data_quality.json")
            t.add_row(b, str(q["train_size"]), str(q["holdout_size"]),
                      f"{q['before']['near_duplicate_overlap']} → {q['after']['near_duplicate_overlap']}",
                      f"{q['before']['exact_input_overlap']} → {q['after']['exact_input_overlap']}",
                      str(q["repair_queue"]))
        console.print(t)
