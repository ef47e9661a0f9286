"""The PR report: Markdown reads well, and the HTML renders its plots in headless Chromium."""

import json
import shutil
import subprocess

import pytest

from clap.evaluate.report import write_reports
from clap.stages import trainers


def fake_results(root):
    (root / "metrics/eval").mkdir(parents=True)
    for i, d in enumerate([-0.01, 0.02, 0.03], start=1):
        m = {"overall_score": 0.8, "value_accuracy": 0.5, "evidence_accuracy": 0.4, "hallucination_rate": 0.05,
             "p95_latency_ms": 900.0}
        (root / f"metrics/eval/b{i}.json").write_text(json.dumps({
            "n": 12, "baseline": m, "candidate": m | {"overall_score": 0.8 + d},
            "deltas": {"overall_score": {"delta": d, "ci_low": d - 0.02, "ci_high": d + 0.02}}}))
    arm = {"answer_json_parse": 1.0, "value_exact": 0.8, "period_exact": 0.9, "core_fields_exact": 0.7,
           "evidence_chunk_exact": 0.4, "evidence_doc_page_exact": 0.4, "retrieved_target_chunk": 0.9,
           "retrieved_target_doc_page": 0.9, "p95_latency_ms": 1200.0}
    (root / "metrics/replay.json").write_text(json.dumps({"n_cases": 10, "arms": {a: arm for a in "ABCD"}}))
    (root / "metrics/gate.json").write_text(json.dumps({
        "decision": "canary", "policy": "default", "candidate": "sft", "requires_rag": True,
        "reasons": [{"rule": "regressed_batches", "observed": 1, "threshold": 1, "batch": None, "outcome": "canary"}]}))
    (root / "models/sft").mkdir(parents=True)
    (root / "models/sft/train_log.csv").write_text("step,loss\n1,2.0\n2,1.2\n3,0.8\n")
    (root / "models/sft/guard_report.json").write_text(json.dumps({"status": "ok", "trip": None, "peaks": {"loss": 2.0}}))


def test_markdown_report(tmp_path):
    fake_results(tmp_path)
    md, page = write_reports(tmp_path, tmp_path / "reports", ["b1", "b2", "b3"], None, trainers.curves())
    text = md.read_text()
    assert "**Gate decision: `canary`**" in text and "| regressed_batches |" in text
    assert "| b1 | 12 | 0.800 | 0.790 | -0.010 | [-0.030, +0.010] |" in text
    assert "| A: base + RAG |" in text and "| sft | ok |" in text
    assert page.read_text().count("data:image/png;base64,") == 3
    assert "## Human evaluation" not in text and "## Canary" not in text  # nothing imported, no canary yet


def test_markdown_report_shows_the_human_verdict_and_the_canary(tmp_path):
    fake_results(tmp_path)
    ci = {"mean": 4.0, "ci_low": 3.5, "ci_high": 4.5, "n": 10}
    (tmp_path / "metrics/human.json").write_text(json.dumps({
        "imported": True, "export_id": "abc", "labels": 20, "annotators": ["a", "b"], "cancelled": 1,
        "models": {"base": {"usefulness": ci | {"mean": 2.0}}, "candidate": {"usefulness": ci}},
        "deltas": {"candidate-base": {"usefulness": {"delta": 2.0, "ci_low": 1.5, "ci_high": 2.5, "n": 10}}},
        "agreement": {"usefulness": {"krippendorff_alpha": 0.8}},
        "calibration": {"extraction": {"pass_rate~correctness": {"spearman": 0.7, "agreement_rate": 0.9}}},
        "problems": ["task 3: never exported in abc; its labels left out"]}))
    (tmp_path / "metrics/canary.json").write_text(json.dumps({
        "verdict": "successful", "versions": {"canary": "v0.0.2", "prod": None}, "requests": {"prod": 30, "canary": 30},
        "success_rate": {"prod": 0.1, "canary": 0.9}, "without_outcome": {"prod": 0, "canary": 0}, "pairs": 30,
        "pairing": "by_request", "delta_canary_minus_prod": {"delta": 0.8, "ci_low": 0.6, "ci_high": 0.9},
        "mcnemar": {"p_value": 0.0}, "sprt": {"outcome": "accept_h1", "discordant_seen": 6, "canary_wins": 6,
                                              "llr": 3.2, "lower": -2.2, "upper": 2.9},
        "reasons": [{"rule": "sprt", "observed": "canary won 6 of 6 discordant", "threshold": "H1 p=0.6",
                     "outcome": "successful"}]}))
    text = write_reports(tmp_path, tmp_path / "reports", ["b1", "b2", "b3"], None, trainers.curves())[0].read_text()
    assert "| candidate-base | +2.00 [+1.50, +2.50] |" in text and "usefulness 0.8" in text
    assert "- left out: task 3: never exported" in text
    assert "## Canary v0.0.2 vs prod base: **successful**" in text and "SPRT accept_h1 after 6 discordant" in text


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (installed by .ci/run)")
def test_html_report_renders_plots_in_chromium(tmp_path):
    fake_results(tmp_path)
    _, page = write_reports(tmp_path, tmp_path / "reports", ["b1", "b2", "b3"], None, trainers.curves())
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1100,1600", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    dom = subprocess.run(["chromium", *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert shot.exists() and shot.stat().st_size > 20_000
    assert dom.count("<img") == 3 and "per-batch deltas" in dom and "ABCD replay" in dom
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    colours = len(set(img.resize((200, 300)).getdata()))
    assert colours > 50, "the screenshot shows plots, not a blank page"


def test_markdown_report_shows_the_chain_steps_on_extraction(tmp_path):
    from clap.evaluate.summary import decision_table

    fake_results(tmp_path)
    row = {c: 0.5 for c in ("decision_score", "decision_pass", "action_accuracy", "cause_accuracy",
                            "risk_focus_accuracy", "format_ok", "rank_accuracy", "margin_chosen_near_miss",
                            "margin_chosen_rejected")}
    d = {"delta": 0.1, "ci_low": 0.05, "ci_high": 0.15}
    decisions = {"n": 20, "models": {"base": row, "sft": row, "dpo": row},
                 "deltas": {"dpo-sft": {"decision_score": d, "rank_accuracy": d}},
                 "extraction": {"n": 60, "models": {"sft": {"overall_score": 0.7, "hallucination_rate": 0.0},
                                                    "dpo": {"overall_score": 0.6, "hallucination_rate": 0.05}},
                                "deltas": {"dpo-sft": {"overall_score": {"delta": -0.1, "ci_low": -0.16, "ci_high": -0.04}}}}}
    (tmp_path / "metrics/decisions.json").write_text(json.dumps(decisions))
    text = write_reports(tmp_path, tmp_path / "reports", ["b1", "b2", "b3"], None, trainers.curves())[0].read_text()
    assert "- dpo-sft: overall score -0.100 [-0.160, -0.040], hallucination rate 0.05" in text
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(decision_table(decisions))
    assert "0.60 (-0.10 [-0.16, -0.04])" in console.export_text()
