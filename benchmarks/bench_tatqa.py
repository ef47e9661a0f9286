"""Real report pages through one round of the loop: TAT-QA's development pages (benchmarks/data/tatqa, MIT) brought
into a fresh `clap init` project the way a team brings its own reports and fact tables, then `dvc repro`, then the
figures that say whether the adapter states the right number.

    python benchmarks/bench_tatqa.py --out /tmp/tatqa-smollm2                      # SmolLM2-135M (the default profile)
    python benchmarks/bench_tatqa.py --model gemma3-270m --out /tmp/tatqa-gemma    # Gemma 3 270M (`make gemma` first)
    python benchmarks/bench_tatqa.py --convert-only --out /tmp/tatqa               # the project and its sources only
    python benchmarks/bench_tatqa.py --clap-src /tmp/old/src --period-column --out /tmp/tatqa-old \
        --set materialize.max_train_per_batch=null --set materialize.max_eval_per_batch=null \
        --set materialize.max_replay_per_batch=null         # the same on an older checkout (before header rows)

The conversion (`convert`), as a team would do it by hand:
- every page (278) becomes an HTML document in `sources/docs/` — its table as the report prints it (plain `<td>`
  cells, the caption and year rows as rows of the table, currency signs and footnote markers as written) and its
  paragraphs;
- the questions whose answer is one number printed in one cell of the page's table (a span from the table or
  table-and-text whose text is a number and matches exactly one value cell) become the team's facts table
  `sources/tables/facts.csv` with its own column names (`Line item` = the row's label, `Amount`, `Unit`, `Source
  page`, `Question` = the annotator's question), mapped in `conf/ingest/default.yaml`. It has no period column: the
  period comes from the value's column header in the page (ingest). The unit is the page's scale (TAT-QA's
  `scale`) with the currency the table writes (`$` → USD, `£` → GBP, `€` → EUR); a scaled amount whose page writes
  no currency is left out (a team would know it; the page does not say); a count with no currency takes the unit
  of measure its table declares above it or in its label (`Emissions reported in tonnes CO2e` → `tonnes`; TAT-QA's
  scale has none: `--annotated-units` keeps its empty unit). Arithmetic, count, multi-span and text
  answers stay out: the loop's task is to state a number the page prints.
The project is `clap init`'s, unchanged but for the model profile; one round is `dvc repro` (`--set` passes Hydra
overrides to `clap params -S` first, e.g. `--set materialize.seed=29` for another split). The figures: the
held-out evaluation (base → candidate: value accuracy, wrong facts, evidence, with the paired CI of the
difference), the candidate's held-out value by what the page says of the unit (`unit_group`: the ceiling a model
that reads the page can reach), and the replay arms A/B/C/D with the B − A interval.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "tatqa" / "tatqa_dataset_dev.json"
_NUMBER = re.compile(r"^\(?-?[$€£]?\s*\(?-?[\d,]+(?:\.\d+)?\)?%?$")
_YEAR = re.compile(r"^(19|20)\d{2}$")
_MEASURE = re.compile(r"\b(tonnes|tonne|tons|kilograms|kg)\b", re.I)  # the units of measure CLAP's registry knows
CURRENCY = {"$": "USD", "£": "GBP", "€": "EUR"}
MAPPING = """tables:
  - path: sources/tables/facts.csv
    kind: facts
    columns: {metric: Line item, value: Amount, unit: Unit, doc_id: Source page, question: Question%s}
    constants: {entity: The company}
"""


def header_period(page: Path, fact: dict) -> str | None:
    """The period the fact's column header gives it, read the way ingest reads the page (for `--period-column`)."""
    from clap.data.ingest.blocks import read_document
    from clap.data.ingest.grid import period_of_value
    from clap.domain.quantities import parse_quantity, terms_in_text, value_in_text

    q = parse_quantity(fact["Amount"], fact["Unit"])
    rows = [b.text for b in read_document(page).blocks if b.kind == "table_row" and value_in_text(q.value, b.text)]
    rows.sort(key=lambda line: not terms_in_text(fact["Line item"], line))
    return period_of_value(rows[0], q.value) if rows else None


def page_html(ctx: dict) -> str:
    rows = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in ctx["table"]["table"])
    paras = "\n".join(f"<p>{html.escape(p['text'])}</p>" for p in sorted(ctx["paragraphs"], key=lambda p: p["order"]))
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{ctx['table']['uid']}</title></head>"
            f"<body>\n<table>\n{rows}\n</table>\n{paras}\n</body></html>\n")


def _currency(ctx: dict, cell: str) -> str | None:
    for text in [cell, *(c for row in ctx["table"]["table"] for c in row), *(p["text"] for p in ctx["paragraphs"])]:
        for sign, code in CURRENCY.items():
            if sign in text:
                return code
    return None


def measure_declared(table: list[list[str]], row: int) -> str:
    """The unit of measure a count's table declares above it or in its label (`Emissions reported in tonnes CO2e`),
    as a team's facts table would write it; "" when none. TAT-QA's `scale` covers only thousands, millions and
    percentages, so an emission count's annotation has no unit though its page states one."""
    lines = [table[row][0], *(c for r in table[:row] if not any(_NUMBER.match(x.replace(" ", "")) for x in r[1:] if x)
                              for c in r)]
    for text in lines:
        found = _MEASURE.search(text)
        if found:
            return found.group(1).lower()
    return ""


def fact_of(ctx: dict, q: dict, measures: bool = True) -> tuple[dict | None, str]:
    """(the facts-table row of a question, or None with why it stays out). `measures`: a count takes the unit of
    measure its table declares (else no unit, as TAT-QA annotates it)."""
    if q["answer_type"] != "span" or q["answer_from"] not in ("table", "table-text"):
        return None, f"{q['answer_type']}/{q['answer_from']}"
    answer = q["answer"][0].strip() if isinstance(q["answer"], list) and len(q["answer"]) == 1 else None
    if answer is None or not _NUMBER.match(answer.replace(" ", "")):
        return None, "not one number"
    table = ctx["table"]["table"]
    hits = [(i, j) for i, row in enumerate(table) for j, c in enumerate(row) if c.strip() == answer]
    if len(hits) != 1:
        return None, "not in exactly one cell"
    i, j = hits[0]
    if j == 0 or _YEAR.match(answer) or not table[i][0].strip():
        return None, "a header or label cell, not a value"
    amount = answer.replace("$", "").replace("€", "").replace("£", "").replace(" ", "")
    negative = amount.startswith("(") and amount.endswith(")")
    amount = amount.strip("()").rstrip("%")
    amount = f"-{amount}" if negative and not amount.startswith("-") else amount
    scale, currency = q["scale"], _currency(ctx, answer)
    if scale == "percent" or answer.endswith("%"):
        unit = "%"
    elif scale in ("thousand", "million", "billion"):
        if currency is None:
            return None, "a scaled amount in no written currency"
        unit = f"{scale} {currency}"
    elif "$" in answer or "€" in answer or "£" in answer:
        unit = currency
    else:
        unit = measure_declared(table, i) if measures else ""
    return {"Line item": table[i][0].strip(), "Amount": amount, "Unit": unit, "Source page": f"{ctx['table']['uid']}.html",
            "Question": q["question"].strip()}, "kept"


def convert(data: Path, project: Path, period_column: bool = False, measures: bool = True) -> dict:
    """The pages into `sources/docs/`, the facts table into `sources/tables/facts.csv` and its mapping; returns the
    counts (pages, questions kept, and why the others stay out). `period_column`: the table gets a `Fiscal year`
    column (the period its column header gives, as ingest reads it; facts without one stay out), for code that
    cannot take a period from the page (the comparison with an older checkout)."""
    contexts = json.loads(data.read_text(encoding="utf-8"))
    docs, tables = project / "sources" / "docs", project / "sources" / "tables"
    docs.mkdir(parents=True, exist_ok=True)
    tables.mkdir(parents=True, exist_ok=True)
    why: Counter = Counter()
    facts = []
    for ctx in contexts:
        (docs / f"{ctx['table']['uid']}.html").write_text(page_html(ctx), encoding="utf-8")
        for q in ctx["questions"]:
            row, reason = fact_of(ctx, q, measures)
            if row and period_column:
                row["Fiscal year"] = header_period(docs / row["Source page"], row)
                if row["Fiscal year"] is None:
                    row, reason = None, "no period in its column header"
            why[reason] += 1
            if row:
                facts.append(row)
    with (tables / "facts.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(facts[0]))
        writer.writeheader()
        writer.writerows(facts)
    conf = project / "conf" / "ingest" / "default.yaml"
    text = conf.read_text(encoding="utf-8")
    assert "tables: []" in text, conf
    conf.write_text(text.replace("tables: []\n", MAPPING % (", period: Fiscal year" if period_column else "")),
                    encoding="utf-8")
    return {"pages": len(contexts), "questions": sum(why.values()), "facts": len(facts),
            "pages_with_facts": len({f["Source page"] for f in facts}), "left_out": dict(why)}


def sh(cmd: list[str], cwd: Path, env: dict, log: Path | None = None) -> None:
    with (log.open("a") if log else open(os.devnull, "w")) as out:
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=out if log else subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed in {cwd} ({r.returncode}){'; see ' + str(log) if log else ': ' + r.stdout[-2000:]}")


UNIT_GROUPS = ("the page decides", "scale not on the page", "gold unit not offered")


def unit_group(source: str, evidence: str, value: float, unit: str) -> str:
    """Whether a fact's page text decides its unit, under the answer grammar (`clap.evaluate.decoding.answer_schema`):
    "gold unit not offered" — the page contradicts the gold unit (`(in thousand NT dollars)` where the annotators gave
    none); "scale not on the page" — an amount in a currency whose chunk declares no scale, which the annotators read
    from the PDF and TAT-QA's table does not carry (the grammar offers every scale: a model can only guess); else
    "the page decides". The first two bound what any model that reads the page can score."""
    from clap.domain.quantities import in_a_currency, scales_declared
    from clap.evaluate.decoding import answer_schema

    schema = answer_schema([{"text": source}], with_location=False)
    offered = {u for alt in schema.get("anyOf", [schema]) for u in alt["properties"]["unit"]["enum"]
               if alt["properties"]["evidence"].get("const") == evidence
               and value in alt["properties"]["value"].get("enum", [])}
    if unit not in offered:
        return UNIT_GROUPS[2]
    if in_a_currency(unit) and "/" not in unit and not scales_declared(source):
        return UNIT_GROUPS[1]
    return UNIT_GROUPS[0]


def held_out(project: Path) -> dict[str, dict]:
    """A project's held-out samples by id (prompt source, target), from every batch."""
    samples = {}
    for path in sorted((project / "data" / "materialized").glob("*/sft_eval.jsonl")):
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            samples[row["sample_id"]] = row
    return samples


def by_unit_group(project: Path) -> dict:
    """The candidate's held-out value accuracy in each `unit_group`."""
    samples = held_out(project)
    right: dict[str, list[float]] = {g: [] for g in UNIT_GROUPS}
    for path in sorted((project / "data" / "eval").glob("*/records.jsonl")):
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            sample = samples.get(record["sample_id"])
            if record["model"] == "candidate" and sample is not None:
                target = json.loads(sample["target"])
                group = unit_group(sample["source"], target["evidence"], target["value"], target["unit"])
                right[group].append(float(record["value_accuracy"]))
    return {g: {"n": len(v), "candidate_value": sum(v) / len(v) if v else None} for g, v in right.items()}


def figures(project: Path) -> dict:
    ev = json.loads((project / "metrics" / "eval" / "b1.json").read_text())
    replay = json.loads((project / "metrics" / "replay.json").read_text())
    gate = json.loads((project / "metrics" / "gate.json").read_text())
    keys = ("value_accuracy", "wrong_fact_rate", "evidence_accuracy", "hallucination_rate", "parse_ok")
    return {"n_holdout": ev["n"],
            "holdout": {k: {"base": ev["baseline"][k], "candidate": ev["candidate"][k], "delta": ev["deltas"][k]}
                        for k in keys},
            "replay": {"n_cases": replay["n_cases"],
                       "arms": {a: {k: replay["arms"][a][k] for k in ("value_exact", "core_fields_exact",
                                                                          "evidence_doc_page_exact", "retrieved_target_chunk")}
                                for a in sorted(replay["arms"])},
                       "B-A": replay["contrasts"]["B-A"]},
            "holdout_by_unit_group": by_unit_group(project),
            "gate": {"decision": gate["decision"], "reasons": [f"{r['rule']}: {r['observed']}" for r in gate["reasons"]
                                                               if r["outcome"] != "info"]}}


def ci(d: dict) -> str:
    return f"{d['delta']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]"


def table(result: dict) -> str:
    f = result["figures"]
    lines = [f"model {result['model']}; {result['conversion']['facts']} facts on {result['conversion']['pages_with_facts']} "
             f"of {result['conversion']['pages']} pages; dvc repro {result['repro_s']:.0f} s",
             f"held-out (n = {f['n_holdout']}) | base | candidate | candidate − base"]
    for k, v in f["holdout"].items():
        lines.append(f"  {k} | {v['base']:.2f} | {v['candidate']:.2f} | {ci(v['delta'])}")
    lines.append("  candidate value by what the page says of the unit: " + "; ".join(
        f"{g} {v['candidate_value']:.2f} (n = {v['n']})" if v["n"] else f"{g} (n = 0)"
        for g, v in f["holdout_by_unit_group"].items()))
    lines.append(f"replay (n = {f['replay']['n_cases']}) | value | core fields | doc+page | target chunk retrieved")
    for a, v in f["replay"]["arms"].items():
        lines.append(f"  {a} | {v['value_exact']:.2f} | {v['core_fields_exact']:.2f} | {v['evidence_doc_page_exact']:.2f} | "
                     f"{v['retrieved_target_chunk']:.2f}")
    ba = f["replay"]["B-A"]
    lines.append(f"  B − A value {ci(ba['value_exact'])}, core fields {ci(ba['core_fields_exact'])}")
    lines.append(f"gate: {f['gate']['decision']} {'; '.join(f['gate']['reasons'])}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the project's folder (made afresh)")
    ap.add_argument("--model", default="smollm2-135m", help="a conf/model/ profile")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--clap-src", type=Path, help="run another checkout's clap (its src/ on PYTHONPATH)")
    ap.add_argument("--set", action="append", default=[], help="a Hydra override for `clap params -S`")
    ap.add_argument("--convert-only", action="store_true")
    ap.add_argument("--period-column", action="store_true", help="map a period column (code before header periods)")
    ap.add_argument("--annotated-units", action="store_true",
                    help="a count takes no unit even where its table declares one (TAT-QA's annotation; older runs)")
    ap.add_argument("--json", type=Path, help="write the result here")
    a = ap.parse_args()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if a.clap_src:
        env["PYTHONPATH"] = str(a.clap_src.resolve())
    if a.out.exists():
        shutil.rmtree(a.out)
    sh(["clap", "init", str(a.out)], Path.cwd(), env)
    conversion = convert(a.data, a.out, a.period_column, not a.annotated_units)
    print(json.dumps(conversion))
    config = a.out / "conf" / "config.yaml"
    config.write_text(re.sub(r"(\n  - model: )\S+", rf"\g<1>{a.model}", config.read_text(encoding="utf-8"), count=1))
    log = a.out / "repro.log"
    sh(["clap", "params", *[x for s in a.set for x in ("-S", s)]], a.out, env, log)
    sh(["git", "add", "-A"], a.out, env)
    sh(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "TAT-QA pages"], a.out, env)
    if a.convert_only:
        return
    started = time.time()
    sh(["dvc", "repro"], a.out, env, log)
    result = {"model": a.model, "code": str(a.clap_src or ROOT / "src"), "overrides": a.set, "conversion": conversion,
              "repro_s": round(time.time() - started, 1), "figures": figures(a.out)}
    print(table(result))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
