"""assetize: raw chunks, facts and decisions → validated, normalised, content-addressed assets.

    clap assetize --raw data/raw --out data/assets [--engine local|ray]     (DVC stage `assetize`)

Reads `chunks`, `facts`, `decisions` as .jsonl, .csv or .parquet, streaming, so that memory follows
`assetize.memory_budget_mb` and not the input:
  A. read (clap.data.stream): each table in blocks of `assetize.read_rows`; types coerced, contract
     checked; valid rows spilled to Parquet by unit of work (clap.data.spill), bad rows quarantined;
  B. global steps out of core in DuckDB (clap.data.duck): repeated ids, raw rows superseded by
     repaired rows (`--repaired`), chunks a unit's facts borrow from another unit;
  C. per unit, here or as Ray Data tasks (`assetize.engine`, `--engine`): chunks hashed; facts
     normalised (docs/design.md §3), verified and repaired (clap.data.facts) — a missing quote re-found in the
     evidence chunk, a wrong chunk id re-pointed to the chunk of the same page that holds the value;
     decisions parsed. Each batch's rows are then written back in input order, one Parquet file per
     batch: `facts.parquet/b-<batch>.parquet` (a folder that `pd.read_parquet` reads as one table).
Every row ends up either in an asset or in `quarantine.jsonl` with stage, file, row, rule and column
(rows in = kept + quarantined, per table, checked before the output replaces the previous one, which
a crash or a kill leaves as it was). Facts that stay unverifiable are kept with `verifiable = False`
and a reason; materialize sends them to the repair queue instead of training.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pyarrow as pa

from clap import paths
from clap.config import Assetize, ConfigError, Params
from clap.data import duck, spill
from clap.data.assets import TABLES, assetize_unit, finish, gc_paused, read_tables, timed, unit_count
from clap.data.engine import ENGINES, map_units
from clap.io import InputFileError, atomic_dir, find_input, write_json
from clap.stages.spec import StageSpec


def run(section: Assetize, raw: Path, out: Path, repaired: Path | None = None, engine: str | None = None) -> dict:
    """Assetize `raw` into `out` under the `assetize` section (`engine` overrides its engine). Returns the report
    (also `out/report.json`)."""
    settings = section.model_copy(update={"engine": engine}) if engine else section
    with gc_paused():
        return _run(settings, Path(raw), Path(out), None if repaired is None else Path(repaired))


def _run(settings: Assetize, raw: Path, out: Path, repaired: Path | None) -> dict:
    if not raw.is_dir():
        raise InputFileError(f"{raw}: no such folder (--raw)")
    if repaired is not None and not repaired.exists():
        raise InputFileError(f"{repaired}: no such file or folder (--repaired)")
    sources = {name: [find_input(raw, name)] for name in TABLES}
    fixes = sorted(repaired.glob("*.jsonl")) if repaired is not None and repaired.is_dir() else \
        ([repaired] if repaired is not None else [])
    sources["facts"] += fixes
    files = [str(p) for name in TABLES for p in sources[name]]
    units = unit_count(sum(Path(f).stat().st_size for f in files), settings.memory_budget_mb, settings.workers)
    with atomic_dir(out, (raw, repaired)) as tmp:
        work = tmp / "_work"  # inside the output's temporary folder: removed with it on a crash, and before it lands
        with timed("read and spill"):
            report = read_tables(sources, files, spill.Spill(work, units), settings.read_rows)
        rows_in_by_file = report.pop("_rows_in_by_file")
        repaired_files = [files.index(str(f)) for f in fixes]
        if repaired is not None:
            report["repaired_rows_in"] = sum(rows_in_by_file[i] for i in repaired_files)
        duck_mb = max(256, settings.memory_budget_mb // 2)
        with timed("global steps"), duck.connect(work, duck_mb, os.cpu_count() or 1) as con:
            for name in TABLES:
                duck.drops(con, work, name)
            if units > 1:
                duck.borrowed_chunks(con, work)
        # this process waits while the units run: what the read phase and DuckDB held goes back first (≈ 400 MB at 10M)
        pa.default_memory_pool().release_unused()
        with timed(f"{units} unit(s) on {settings.engine}"):
            summaries = map_units(settings.engine, units, functools.partial(assetize_unit, work, files, repaired_files),
                                  settings.workers)
        with timed("ordered write and quarantine"), duck.connect(work, duck_mb, os.cpu_count() or 1) as con:
            finish(con, work, tmp, summaries, report, settings.row_group_rows, repaired is not None)
        shutil.rmtree(work)
        write_json(tmp / "report.json", report)
    return report


def main(params: Params, raw: Path = paths.RAW, out: Path = paths.ASSETS, repaired: Path | None = None,
         engine: str | None = None) -> list[str]:
    """Validate and normalise raw inputs into assets, streaming; quarantine what cannot be used."""
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: choose from {', '.join(ENGINES)}")
    report = run(params.assetize, raw, out, repaired, engine)
    lines = [f"{name:10s} rows in {e['rows_in']:6d}  kept {e['kept']:6d}  quarantined {e['quarantined']:5d}"
             for name, e in report["inputs"].items()]
    lines.append(f"facts verifiable {report['verifiable_facts']}, unverifiable {report['unverifiable_facts']}; "
                 f"{report['units']} unit(s) of work")
    if "repaired_rows_in" in report:
        lines.append(f"repaired rows in {report['repaired_rows_in']}, now verifiable "
                     f"{report['repaired_rows_verifiable']}")
    lines.append("noise found/fixed: " + ", ".join(f"{k}={v}" for k, v in report["noise"].items() if v))
    lines.append("rows per batch: " + ", ".join(f"{k!r}={v}" for k, v in report["batches"]["rows"].items()))
    return lines + [f"warning: {w}" for w in report["batches"]["warnings"]]


STAGE = StageSpec(name="assetize", group="data", main=main, helps={
    "repaired": "folder (or file) of repaired fact rows from the repair queue",
    "engine": "local | ray (default: assetize.engine in params.yaml)"})
