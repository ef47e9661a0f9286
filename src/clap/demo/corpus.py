"""Deterministic generator of the anonymised manufacturing demo corpus (docs/design.md §8).

    clap demo-data --out data/raw --seed 7 --scale 1.0

~20 fictional manufacturers, multi-page annual / procurement / quality reports in English and
Chinese, five batches, facts with questions and decision records. Values are random, so a model
that does not read the evidence chunk cannot guess them from the question; every page also carries
a distractor number (the prior-year figure of the same metric). The noise the paper had to clean is
injected at fixed rates (`NOISE`), and `manifest.json` records what was injected where.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from clap.io import atomic_dir

BATCHES = ["b1", "b2", "b3", "b4", "b5"]
YEARS = {"b1": 2021, "b2": 2022, "b3": 2023, "b4": 2024, "b5": 2025}

# Rates of each kind of noise, per record. Trade-off: high enough that every kind appears in a
# default-size corpus, low enough that most rows stay usable, as in the paper's data.
NOISE = {
    "value_bearing_label": 0.12,
    "unit_variant": 0.30,
    "fullwidth_number": 0.10,
    "plain_number": 0.10,
    "numeric_value": 0.08,
    "missing_evidence": 0.05,
    "wrong_evidence_chunk": 0.05,
    "wrong_evidence_quote": 0.03,
    "value_typo": 0.02,
    "duplicate_across_batches": 0.03,
    "near_duplicate_in_batch": 0.05,
    "duplicate_record_id": 0.005,
    "malformed_row": 0.005,
}

PREFIX_EN = ["Apex", "Boreal", "Cedar", "Delta", "Everwin", "Fulcrum", "Granite", "Harbor", "Ion", "Juniper"]
SUFFIX_EN = ["Precision", "Castings", "Motors", "Polymers", "Components"]
PREFIX_ZH = ["恒达", "华瑞", "金泰", "鼎盛", "远航", "锐科", "中联", "新峰", "宏源", "嘉禾"]
SUFFIX_ZH = ["精密", "铸造", "电机", "化工", "机械"]

# metric: (en label, zh label, unit family, lower, upper, decimals)
METRICS = {
    "annual": [
        ("revenue", "Operating revenue", "营业收入", "cny", 5_000, 900_000, 2),
        ("net_profit", "Net profit", "净利润", "cny", -9_000, 90_000, 2),
        ("gross_margin", "Gross margin", "毛利率", "pct", 5, 45, 1),
        ("rd_expense", "R&D expense", "研发费用", "cny", 200, 40_000, 2),
    ],
    "procurement": [
        ("raw_material_total", "Raw material purchases", "原材料采购总额", "cny", 1_000, 500_000, 2),
        ("raw_material_share", "Share of raw material purchases", "原材料采购总额占比", "pct", 20, 90, 2),
        ("top5_supplier_share", "Top five supplier share", "前五名供应商采购占比", "pct", 10, 80, 1),
        ("inventory_tons", "Year-end raw material inventory", "期末原材料库存", "mass", 100, 90_000, 1),
    ],
    "quality": [
        ("defect_rate", "Defect rate", "不良率", "pct", 0.1, 9.9, 2),
        ("quality_loss", "Quality loss", "质量损失", "cny", 10, 9_000, 2),
        ("rework_pieces", "Reworked pieces", "返工件数", "count", 100, 90_000, 0),
        ("delivery_delay", "Average delivery delay", "平均交付延迟", "days", 1, 40, 1),
    ],
}
DOC_TITLES = {"annual": ("Annual Report", "年度报告"), "procurement": ("Procurement Report", "采购报告"),
              "quality": ("Quality Report", "质量报告")}
UNIT_SPELLINGS = {  # family -> (canonical, [variants as users write them])
    "cny": ("万元", ["RMB 10k", "10k yuan", "ten thousand yuan", "人民币万元"]),
    "pct": ("%", ["percent", "pct"]),
    "mass": ("吨", ["tons", "t", "tonnes"]),
    "count": ("件", ["pcs", "pieces", "units"]),
    "days": ("天", ["days", "day"]),
}
UNIT_EN = {"万元": "RMB 10k", "%": "%", "吨": "tons", "件": "pcs", "天": "days"}

CASES = {
    "material_backlog": {
        "causes": ["supplier_delay_days", "demand_drop_pct", "excess_safety_stock_days"],
        "actions": {
            "supplier_delay_days": "Expedite the delayed supplier and qualify a second source",
            "demand_drop_pct": "Cut the next purchase order and rebalance stock across plants",
            "excess_safety_stock_days": "Lower the safety-stock target and clear slow-moving inventory",
        },
        "risk": {"supplier_delay_days": "delivery", "demand_drop_pct": "cash", "excess_safety_stock_days": "cash"},
    },
    "quality_loss": {
        "causes": ["process_drift_sigma", "supplier_lot_defect_pct", "operator_error_count"],
        "actions": {
            "process_drift_sigma": "Recalibrate the line and tighten SPC control limits",
            "supplier_lot_defect_pct": "Quarantine the supplier lot and raise a corrective action request",
            "operator_error_count": "Retrain the operators and add a poka-yoke check at the station",
        },
        "risk": {"process_drift_sigma": "customer", "supplier_lot_defect_pct": "compliance",
                 "operator_error_count": "customer"},
    },
}


@dataclass
class Company:
    key: str
    name: str
    lang: str


def _companies(rng: random.Random, n: int) -> list[Company]:
    out = []
    for i in range(n):
        lang = "en" if i % 2 == 0 else "zh"
        if lang == "en":
            name = f"{PREFIX_EN[i // 2 % 10]} {SUFFIX_EN[i % 5]} Co."
        else:
            name = f"{PREFIX_ZH[i // 2 % 10]}{SUFFIX_ZH[(i + 2) % 5]}股份有限公司"
        out.append(Company(f"c{i:02d}", name, lang))
    return out


def _fmt(value: float, decimals: int, style: str) -> str:
    s = f"{abs(value):,.{decimals}f}"
    if style == "plain":
        s = s.replace(",", "")
    if style == "fullwidth":
        s = s.translate(str.maketrans("0123456789,.", "０１２３４５６７８９，．"))
    return f"({s})" if value < 0 and style == "paren" else (f"-{s}" if value < 0 else s)


def _sentence(c: Company, label_en: str, label_zh: str, period: str, text_value: str, unit: str) -> str:
    if c.lang == "zh":
        return f"{period}年，公司{label_zh}为{text_value}{unit}。"
    u = UNIT_EN[unit]
    return f"{label_en} for FY{period} was {text_value} {u}." if u != "%" else \
        f"{label_en} for FY{period} was {text_value}%."


def _distractor(c: Company, label_en: str, label_zh: str, period: str, text_value: str, unit: str) -> str:
    prev = int(period) - 1
    if c.lang == "zh":
        return f"上年同期（{prev}年）该指标为{text_value}{unit}。"
    u = UNIT_EN[unit]
    return f"The FY{prev} comparative for {label_en.lower()} was {text_value}{'%' if u == '%' else ' ' + u}."


def generate(seed: int = 7, scale: float = 1.0, n_companies: int = 20) -> dict[str, list[dict]]:
    """Build the corpus in memory: {'chunks', 'facts', 'decisions', 'manifest', 'truth'}; `truth` maps a
    fact's record_id to the row before noise (what the simulated annotator of the demo answers from)."""
    rng = random.Random(seed)
    truth: dict[str, dict] = {}
    companies = _companies(rng, n_companies)
    chunks: list[dict] = []
    facts: list[dict] = []
    decisions: list[dict] = []
    injected: dict[str, int] = {k: 0 for k in NOISE}
    reps = max(1, round(scale))
    frac = scale if scale < 1 else 1.0
    for batch in BATCHES:
        year = str(YEARS[batch])
        for rep in range(reps):
            for c in companies:
                for doc_type, metrics in METRICS.items():
                    if rng.random() > frac:
                        continue
                    doc_id = f"{c.key}-{doc_type}-{year}" + (f"-r{rep}" if rep else "")
                    title = DOC_TITLES[doc_type][0 if c.lang == "en" else 1]
                    picked = list(metrics)
                    rng.shuffle(picked)
                    for page, pair in enumerate([picked[:2], picked[2:]], start=1):
                        chunk_id = f"{doc_id}-p{page}"
                        lines = [f"{c.name} {title} {year}, page {page}." if c.lang == "en"
                                 else f"{c.name}{year}年{title}，第{page}页。"]
                        page_facts = []
                        for key, en, zh, fam, lo, hi, dec in pair:
                            value = round(rng.uniform(lo, hi), dec)
                            prev = round(value * rng.uniform(0.6, 1.4), dec)
                            unit = UNIT_SPELLINGS[fam][0]
                            ev = _sentence(c, en, zh, year, _fmt(value, dec, "std"), unit)
                            lines.append(ev)
                            lines.append(_distractor(c, en, zh, year, _fmt(prev, dec, "std"), unit))
                            page_facts.append((key, en, zh, fam, value, dec, unit, ev))
                        chunks.append({"chunk_id": chunk_id, "doc_id": doc_id, "page": page,
                                       "text": " ".join(lines) if c.lang == "en" else "".join(lines),
                                       "lang": c.lang, "batch": batch})
                        for _key, en, zh, fam, value, dec, unit, ev in page_facts:
                            fact = _fact(rng, injected, c, batch, year, doc_id, page, chunk_id,
                                         en, zh, fam, value, dec, unit, ev, len(facts))
                            facts.append(fact)
                            truth[fact["record_id"]] = fact | {  # what the row says before noise is injected
                                "chunk_id": chunk_id, "metric": zh if c.lang == "zh" else en,
                                "value": _fmt(value, dec, "std"), "unit": unit if c.lang == "zh" else UNIT_EN[unit],
                                "evidence": ev}
            for i in range(max(4, round(12 * scale))):
                decisions.append(_decision(rng, batch, i, len(decisions)))
    facts = _cross_batch_noise(rng, injected, facts)
    return {"chunks": chunks, "facts": facts, "decisions": decisions, "manifest": [injected], "truth": truth}


def _fact(rng, injected, c, batch, year, doc_id, page, chunk_id, en, zh, fam, value, dec, unit, ev, n) -> dict:
    style = "std"
    if rng.random() < NOISE["fullwidth_number"]:
        style, injected["fullwidth_number"] = "fullwidth", injected["fullwidth_number"] + 1
    elif rng.random() < NOISE["plain_number"]:
        style, injected["plain_number"] = "plain", injected["plain_number"] + 1
    elif value < 0:
        style = "paren"
    value_raw: object = _fmt(value, dec, style)
    unit_raw = unit if c.lang == "zh" else UNIT_EN[unit]
    if fam == "pct" and rng.random() < 0.5:
        value_raw, unit_raw = f"{value_raw}%", ""
    elif rng.random() < NOISE["unit_variant"]:
        unit_raw = rng.choice(UNIT_SPELLINGS[fam][1])
        injected["unit_variant"] += 1
    if fam != "pct" and rng.random() < NOISE["numeric_value"]:
        value_raw = value
        injected["numeric_value"] += 1
    label = zh if c.lang == "zh" else en
    if rng.random() < NOISE["value_bearing_label"]:
        shown = _fmt(value, dec, "std")
        label = rng.choice([f"{shown}，{label}", f"{shown} - {label}", f"{label} {shown}"])
        injected["value_bearing_label"] += 1
    evidence: object = ev
    ev_chunk = chunk_id
    if rng.random() < NOISE["missing_evidence"]:
        evidence = None
        injected["missing_evidence"] += 1
    elif rng.random() < NOISE["wrong_evidence_chunk"]:
        ev_chunk = f"{doc_id}-p{3 - page}"
        injected["wrong_evidence_chunk"] += 1
    elif rng.random() < NOISE["wrong_evidence_quote"]:
        evidence = _distractor(c, en, zh, year, _fmt(round(value * 1.17, dec), dec, "std"), unit)
        injected["wrong_evidence_quote"] += 1
    if rng.random() < NOISE["value_typo"]:
        pct = isinstance(value_raw, str) and value_raw.endswith("%")
        value_raw = _fmt(round(value * 10 + 1, dec), dec, "std") + ("%" if pct else "")
        injected["value_typo"] += 1
    question = (f"What was {c.name}'s {en.lower()} for FY{year}?" if c.lang == "en"
                else f"{c.name}{year}年的{zh}是多少？")
    return {"record_id": f"f{n:06d}", "batch": batch, "doc_id": doc_id, "page": page, "chunk_id": ev_chunk,
            "entity": c.name, "metric": label, "period": year if c.lang == "en" else f"{year}年",
            "value": value_raw, "unit": unit_raw, "evidence": evidence, "lang": c.lang, "question": question}


def _cross_batch_noise(rng: random.Random, injected: dict, facts: list[dict]) -> list[dict]:
    out = list(facts)
    next_id = len(facts)
    for f in facts:
        r = rng.random()
        if r < NOISE["duplicate_across_batches"] and f["batch"] != BATCHES[-1]:
            later = BATCHES[BATCHES.index(f["batch"]) + 1]
            out.append({**f, "record_id": f"f{next_id:06d}", "batch": later})
            injected["duplicate_across_batches"] += 1
            next_id += 1
        elif r < NOISE["duplicate_across_batches"] + NOISE["near_duplicate_in_batch"]:
            q = f["question"] + (" " if f["lang"] == "en" else "")
            out.append({**f, "record_id": f"f{next_id:06d}", "question": q.replace("?", " ?")})
            injected["near_duplicate_in_batch"] += 1
            next_id += 1
        elif r < 0.08 + NOISE["duplicate_record_id"]:
            out.append({**f})
            injected["duplicate_record_id"] += 1
        elif r < 0.08 + NOISE["duplicate_record_id"] + NOISE["malformed_row"]:
            out.append({**f, "record_id": f"f{next_id:06d}", "entity": "", "page": 0})
            injected["malformed_row"] += 1
            next_id += 1
    rng.shuffle(out)
    return out


def _decision(rng: random.Random, batch: str, i: int, n: int) -> dict:
    case_type = rng.choice(sorted(CASES))
    spec = CASES[case_type]
    main = rng.choice(spec["causes"])
    causes = {}
    for cause in spec["causes"]:
        strong = cause == main
        causes[cause] = rng.randint(18, 40) if strong else rng.randint(1, 6)
    plant = f"Plant {rng.randint(1, 9)}"
    if case_type == "material_backlog":
        situation = (f"{plant} holds {rng.randint(200, 5000)} tons of backlog material; supplier delay is "
                     f"{causes['supplier_delay_days']} days, demand dropped {causes['demand_drop_pct']}% and "
                     f"safety stock exceeds target by {causes['excess_safety_stock_days']} days.")
    else:
        situation = (f"{plant} reports a quality loss of RMB 10k {rng.randint(10, 900)}; process drift is "
                     f"{causes['process_drift_sigma']} tenths of sigma, the supplier lot defect rate is "
                     f"{causes['supplier_lot_defect_pct']}% and operators logged "
                     f"{causes['operator_error_count']} errors.")
    return {"record_id": f"d{n:05d}", "batch": batch, "case_type": case_type, "situation": situation,
            "causes": causes, "action": spec["actions"][main], "risk_focus": spec["risk"][main], "lang": "en"}


SHIFTED_UNIT = {"万元": "元", "RMB 10k": "yuan", "10k yuan": "yuan", "ten thousand yuan": "yuan", "人民币万元": "元"}


def poison(corpus: dict, batch: str) -> int:
    """A supplier export with its currency units shifted by 10⁴: `万元` written as `元` on every row of
    `batch` (the number unchanged). Each number is still in its source, so only a unit check can tell;
    admission's `unit_mismatch_share` is that check. Returns the rows changed."""
    changed = 0
    for f in corpus["facts"]:
        if f["batch"] == batch and f["unit"] in SHIFTED_UNIT:
            f["unit"] = SHIFTED_UNIT[f["unit"]]
            changed += 1
    return changed


def write(out: Path, seed: int = 7, scale: float = 1.0, poisoned_batch: str | None = None) -> dict[str, int]:
    """Write chunks/facts/decisions as JSONL plus manifest.json into `out`, atomically."""
    corpus = generate(seed=seed, scale=scale)
    if poisoned_batch:
        corpus["manifest"][0]["poisoned_rows"] = poison(corpus, poisoned_batch)
        corpus["manifest"][0]["poisoned_batch"] = poisoned_batch
    with atomic_dir(out) as tmp:
        for name in ("chunks", "facts", "decisions"):
            with open(tmp / f"{name}.jsonl", "w", encoding="utf-8") as fh:
                for row in corpus[name]:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        (tmp / "manifest.json").write_text(json.dumps({"seed": seed, "scale": scale, "noise_rates": NOISE,
                                                        "injected": corpus["manifest"][0]}, indent=2))
    return {k: len(corpus[k]) for k in ("chunks", "facts", "decisions")}
