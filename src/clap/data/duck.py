"""The global steps of `clap assetize`, out of core in DuckDB: duplicate ids, borrowed chunks, ordered writes.

Each step reads the spill files (clap.data.spill) or the unit outputs with DuckDB under the stage's
memory budget — DuckDB sorts and joins beyond memory by spilling to `work/duckdb` — and writes
Parquet or JSON lines, never a table held in Python. Chosen over hand-written sorted spill files:
the same out-of-core sort and hash join in a few SQL lines, measured in benchmarks/bench_scale.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from clap.data.spill import TABLES
from clap.domain.contracts import ID_COLUMN


def connect(work: Path, memory_mb: int, threads: int) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(config={"memory_limit": f"{memory_mb}MB", "threads": threads,
                                  "temp_directory": str(Path(work) / "duckdb"), "preserve_insertion_order": True})


def _lit(path: Path | str) -> str:
    """A path as an SQL string literal (COPY … TO takes no parameters)."""
    return "'" + str(path).replace("'", "''") + "'"


def drops(con: duckdb.DuckDBPyConnection, work: Path, name: str) -> int:
    """Rows that a one-pass reader would not keep: a repeated id (the first row of each id per file
    stays, as `split_valid` does) and a raw row whose id a later (repaired) file supplies again.
    Written to `work/drops/<name>.parquet` as (_file, _row, rule); returns how many."""
    ids, out = Path(work) / "ids" / f"{name}.parquet", Path(work) / "drops" / f"{name}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not ids.exists():
        pq.write_table(pa.table({"_file": pa.array([], pa.int32()), "_row": pa.array([], pa.int64()),
                                 "rule": pa.array([], pa.string())}), out)
        return 0
    con.execute(f"""
        COPY (
          WITH ranked AS (
            SELECT id, _file, _row, valid, row_number() OVER (PARTITION BY id, _file ORDER BY _row) AS k
            FROM read_parquet({_lit(ids)}) WHERE id IS NOT NULL),
          firsts AS (SELECT id, _file FROM ranked WHERE k = 1 AND valid)
          SELECT _file, _row, 'duplicate_id' AS rule FROM ranked WHERE k > 1
          UNION ALL
          SELECT r._file, r._row, 'superseded_by_repair' AS rule FROM ranked r
          WHERE r.k = 1 AND r.valid AND EXISTS (SELECT 1 FROM firsts f WHERE f.id = r.id AND f._file > r._file)
          ORDER BY _file, _row
        ) TO {_lit(out)} (FORMAT parquet)""")
    return pq.read_metadata(out).num_rows


def borrowed_chunks(con: duckdb.DuckDBPyConnection, work: Path) -> None:
    """Chunks a unit's facts point at that live in another unit (a chunk id of another document),
    copied into `work/borrowed/unit=<u>/`: the fact → evidence-chunk join then stays inside each unit."""
    facts, chunks = Path(work) / "rows" / "facts", Path(work) / "rows" / "chunks"
    if not facts.exists() or not chunks.exists():
        return
    dropped = Path(work) / "drops" / "chunks.parquet"
    con.execute(f"""
        COPY (
          SELECT DISTINCT f.unit AS unit, c.* EXCLUDE (unit)
          FROM (SELECT DISTINCT chunk_id, unit FROM read_parquet({_lit(facts / '*' / '*.parquet')}, hive_partitioning = true)
                WHERE chunk_id IS NOT NULL) f
          JOIN read_parquet({_lit(chunks / '*' / '*.parquet')}, hive_partitioning = true) c ON f.chunk_id = c.chunk_id
          WHERE f.unit <> c.unit
            AND NOT EXISTS (SELECT 1 FROM read_parquet({_lit(dropped)}) d WHERE d._file = c._file AND d._row = c._row)
        ) TO {_lit(Path(work) / 'borrowed')} (FORMAT parquet, PARTITION_BY (unit), OVERWRITE_OR_IGNORE)""")


def write_ordered(con: duckdb.DuckDBPyConnection, parts: Path, out: Path, schema: pa.Schema, row_group_rows: int) -> int:
    """One batch's rows from every unit, back in input order (`_file`, `_row`), as one Parquet file."""
    reader = con.sql(f"SELECT * EXCLUDE (_file, _row) FROM read_parquet({_lit(parts / '*.parquet')}) "
                         "ORDER BY _file, _row").to_arrow_reader(row_group_rows)
    rows = 0
    with pq.ParquetWriter(out, schema) as writer:
        for batch in reader:
            writer.write_table(pa.Table.from_batches([batch]).cast(schema), row_group_size=row_group_rows)
            rows += batch.num_rows
    return rows


def duplicate_counts(con: duckdb.DuckDBPyConnection, facts: Path) -> tuple[int, int]:
    """(rows repeating content already seen in their batch, rows whose content first appeared in an earlier batch —
    batches in sorted order)."""
    files = sorted(Path(facts).glob("*.parquet"))
    if not files:
        return 0, 0
    source = f"read_parquet([{', '.join(_lit(f) for f in files)}])"
    same, across = con.execute(f"""
        WITH f AS (SELECT content_hash, batch FROM {source}),
             first_batch AS (SELECT content_hash, min(batch) AS batch FROM f GROUP BY content_hash)
        SELECT (SELECT count(*) FROM f) - (SELECT count(*) FROM (SELECT DISTINCT content_hash, batch FROM f)),
               (SELECT count(*) FROM f JOIN first_batch m USING (content_hash) WHERE f.batch <> m.batch)""").fetchall()[0]
    return int(same), int(across)


def write_quarantine(con: duckdb.DuckDBPyConnection, work: Path, out: Path) -> tuple[dict, dict]:
    """Every quarantine record, ordered by table, file and row, to `out` (JSON lines). A row found
    invalid whose id repeats an earlier row's is reported as `duplicate_id`, the rule a one-pass check
    gives it. Returns (records per table, records per rule)."""
    q = Path(work) / "quarantine"
    drop_files = [(TABLES.index(n), Path(work) / "drops" / f"{n}.parquet") for n in TABLES]
    duplicates = " UNION ALL ".join(f"SELECT {t}::TINYINT AS \"table\", _file, _row FROM read_parquet({_lit(p)}) "
                                    "WHERE rule = 'duplicate_id'" for t, p in drop_files if p.exists())
    per_table, per_rule = dict.fromkeys(TABLES, 0), {}
    with open(out, "w", encoding="utf-8") as f:
        if not any(q.glob("*.parquet")):
            return per_table, per_rule
        join = (f"LEFT JOIN ({duplicates}) d ON q.\"table\" = d.\"table\" AND q._file = d._file AND q._row = d._row"
                if duplicates else "")
        flag = "q.maybe_duplicate AND d._row IS NOT NULL" if duplicates else "false"
        reader = con.sql(f"""
            SELECT q."table", q.rule, q.line, {flag} AS duplicate FROM read_parquet({_lit(q / '*.parquet')}) q {join}
            ORDER BY q."table", q._file, q._row, q.seq""").to_arrow_reader(65_536)
        for batch in reader:
            lines = []
            for table, rule, line, duplicate in zip(*(batch.column(i).to_pylist() for i in range(4))):
                if duplicate:
                    rule = "duplicate_id"
                    line = json.dumps(json.loads(line) | {"rule": rule, "column": ID_COLUMN[TABLES[table]]},
                                      ensure_ascii=False)
                per_table[TABLES[table]] += 1
                per_rule[rule] = per_rule.get(rule, 0) + 1
                lines.append(line + "\n")
            f.write("".join(lines))
    return per_table, dict(sorted(per_rule.items()))
