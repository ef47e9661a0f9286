"""`clap timeline`: the loop's rounds read back from committed evidence, on a hand-built repository."""

import json
import subprocess

from clap import paths
from clap.release.timeline import rounds


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def _write(root, rel, obj):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)


def _eval(delta, lo, hi, vs_prod=False):
    d = {"overall_score": {"delta": delta, "ci_low": lo, "ci_high": hi, "n": 12}}
    return {"deltas": {"overall_score": {"delta": 9.9, "ci_low": 9.0, "ci_high": 9.9}}, "deltas_vs_prod": d} \
        if vs_prod else {"deltas": d}


def test_rounds_read_back_decision_refusals_baseline_and_tags(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    # round 1: two batches, judged against the base model, promoted and released as v0.0.1 → prod
    _write(tmp_path, "params.yaml", "data:\n  batches: [b1, b2]\n")
    _write(tmp_path, paths.PROD_POINTER, {"artifact": "clap-adapter", "version": None})
    for b, (d, lo, hi) in {"b1": (0.30, 0.20, 0.40), "b2": (0.10, 0.02, 0.18)}.items():
        _write(tmp_path, paths.eval_metrics(b), _eval(d, lo, hi))
        _write(tmp_path, paths.admission(b), {"decision": "admit", "checks": []})
    _write(tmp_path, paths.GATE, {"decision": "promote"})
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "round 1")
    _git(tmp_path, "tag", "-a", "clap-adapter@v0.0.1", "-m", "Registering artifact clap-adapter version v0.0.1")
    _git(tmp_path, "tag", "-a", "clap-adapter#prod#1", "-m", "Assigning stage prod to artifact clap-adapter")
    # round 2: a poisoned batch sent to repair by its unit check, the rest judged against prod, held
    _write(tmp_path, "params.yaml", "data:\n  batches: [b1, b2, b3]\n")
    _write(tmp_path, paths.PROD_POINTER, {"artifact": "clap-adapter", "version": "v0.0.1"})
    _write(tmp_path, paths.admission("b3"), {"decision": "repair", "checks": [
        {"name": "unit_mismatch_share", "passed": False}, {"name": "train_eval_overlap", "passed": True}]})
    _write(tmp_path, paths.eval_metrics("b3"), _eval(-0.5, -0.6, -0.4, vs_prod=True))  # not trained on: left out
    for b, (d, lo, hi) in {"b1": (-0.02, -0.05, 0.01), "b2": (0.04, -0.01, 0.09)}.items():
        _write(tmp_path, paths.eval_metrics(b), _eval(d, lo, hi, vs_prod=True))
    _write(tmp_path, paths.GATE, {"decision": "canary", "candidate": "dpo", "candidates": {
        "sft": {"decision": "canary"}, "dpo": {"decision": "canary"}, "grpo": {"decision": "hold"}}})
    _write(tmp_path, paths.BUNDLE, {"tracks": {"agent": {"candidate": "agent_sft", "decision": "hold", "ships": None,
                                                         "carried_from": "v0.0.1"}}})
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "round 2")
    _write(tmp_path, "README.md", "no gate change: not a round")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "docs")

    first, second = rounds(tmp_path)
    assert (first["round"], first["batches"], first["baseline"], first["decision"]) == (1, ["b1", "b2"], "base", "promote")
    assert first["delta"] == 0.2 and (first["ci_low_min"], first["ci_high_max"]) == (0.02, 0.4)
    assert first["tags"] == ["clap-adapter@v0.0.1", "clap-adapter#prod#1"] and first["refused"] == {}
    assert second["baseline"] == "prod v0.0.1" and second["decision"] == "canary" and second["tags"] == []
    assert first["candidate"] == "sft" and first["chain"] == {}
    assert second["candidate"] == "dpo" and second["chain"] == {"sft": "canary", "dpo": "canary", "grpo": "hold"}
    assert second["refused"] == {"b3": "repair (unit_mismatch_share)"}
    assert first["agent"] is None and second["agent"] == "agent: agent_sft hold, prod's from v0.0.1 stays"
    assert second["delta"] == 0.01 and (second["ci_low_min"], second["ci_high_max"]) == (-0.05, 0.09)


def test_a_rollback_is_a_row_of_its_own_and_the_restore_it_commits_is_not_a_new_decision(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    for k, batches in ((1, "[b1]"), (2, "[b1, b2]")):
        _write(tmp_path, "params.yaml", f"data:\n  batches: {batches}\n")
        _write(tmp_path, paths.GATE, {"decision": "promote", "round": k})
        _git(tmp_path, "add", "-A")
        _git(tmp_path, "commit", "-qm", f"round {k}")
        _git(tmp_path, "tag", "-a", f"clap-adapter@v0.0.{k}", "-m", f"Registering version v0.0.{k}")
        _git(tmp_path, "tag", "-a", f"clap-adapter#prod#{k}", "-m", "Assigning stage prod")
    _git(tmp_path, "tag", "-a", "clap-adapter#prod#3", "-m", "Assigning stage prod to artifact clap-adapter version "
         "v0.0.1\n\nrollback from v0.0.2", "clap-adapter@v0.0.1")
    _write(tmp_path, "params.yaml", "data:\n  batches: [b1]\n")  # `clap rollback` restored round 1's evidence
    _write(tmp_path, paths.GATE, {"decision": "promote", "round": 1})
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "rollback drill")

    rows = rounds(tmp_path)
    assert [(r["round"], r["decision"]) for r in rows] == [(1, "promote"), (2, "promote"), ("rollback", "rollback")]
    assert rows[0]["tags"] == ["clap-adapter@v0.0.1", "clap-adapter#prod#1"]  # the rollback tag is not round 1's
    assert (rows[2]["baseline"], rows[2]["candidate"], rows[2]["tags"]) == \
        ("prod v0.0.2", "restores v0.0.1", ["clap-adapter#prod#3"])


def test_the_human_verdict_and_the_end_of_a_canary_show_in_the_timeline(tmp_path):
    """A round promoted via canary with an imported human verdict; `clap canary conclude` then promoted the
    canary: its tags and the analysis' reasons form a row of their own, not round 1's tags."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    _write(tmp_path, "params.yaml", "data:\n  batches: [b1]\n")
    _write(tmp_path, paths.GATE, {"decision": "canary"})
    _write(tmp_path, paths.HUMAN_METRICS, {"imported": True, "reference": "base", "deltas": {"candidate-base": {
        "usefulness": {"delta": 0.92, "ci_low": 0.47, "ci_high": 1.43}}},
        "agreement": {"usefulness": {"krippendorff_alpha": 0.62}}})
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "round 1")
    _git(tmp_path, "tag", "-a", "clap-adapter@v0.0.1", "-m", "Registering version v0.0.1")
    _git(tmp_path, "tag", "-a", "clap-adapter#canary#1", "-m", "Assigning stage canary")
    _git(tmp_path, "tag", "-a", "clap-adapter#prod#2", "-m", "Assigning stage prod to artifact clap-adapter version "
         "v0.0.1\n\ncanary analysis successful: sprt: canary won 6 of 6 discordant → successful")
    _git(tmp_path, "tag", "-a", "clap-adapter#canary!#3", "-m", "Unassigning stage canary from artifact clap-adapter "
         "version v0.0.1\n\ncanary analysis successful: sprt: canary won 6 of 6 discordant → successful")

    first, canary = rounds(tmp_path)
    assert first["evidence"] == "usefulness +0.92 [+0.47, +1.43] vs base, α 0.62"
    assert first["tags"] == ["clap-adapter@v0.0.1", "clap-adapter#canary#1"]
    assert (canary["round"], canary["decision"], canary["candidate"]) == ("canary", "promote", "canary v0.0.1 successful")
    assert canary["tags"] == ["clap-adapter#prod#2", "clap-adapter#canary!#3"]
    assert canary["evidence"] == "sprt: canary won 6 of 6 discordant → successful"
