"""The demo's rounds (`clap.demo.rounds`): the conf edit a round makes, and what a round's repair did."""

import pytest
from tests.conftest import ROOT

from clap.config import ConfigError, check, compose
from clap.demo.rounds import RoundError, demo_overrides, repair_effect, set_round

CONF_TEXT = (ROOT / "conf/config.yaml").read_text(encoding="utf-8")


def test_set_round_changes_only_the_two_values_and_keeps_comments():
    text = set_round(CONF_TEXT, ["b1", "b2"], "b2")
    changed = [(a, b) for a, b in zip(CONF_TEXT.splitlines(), text.splitlines(), strict=True) if a != b]
    assert [b for _, b in changed] == ["  poisoned_batch: b2  # a batch id: its supplier export has currency units "
                                       "shifted by 10⁴ (the demo's round 3)", "  batches: [b1, b2]"]
    assert set_round(text, ["b1", "b2", "b3", "b4", "b5"], "none") == CONF_TEXT


@pytest.mark.parametrize("conf", [
    "demo:\n  seed: 7\n",                                              # neither key
    "demo:\n  poisoned_batch: none\ndata:\n  batches:\n    - b1\n",   # batches as a block list
    "data:\n  batches: [b1]\n",                                        # no poisoned_batch
])
def test_set_round_refuses_a_layout_it_cannot_edit_in_place(conf):
    with pytest.raises(RoundError, match="conf/config.yaml: cannot set"):
        set_round(conf, ["b1"], "none")


def test_a_round_whose_poisoned_batch_is_not_among_its_batches_is_a_config_error():
    with pytest.raises(ConfigError, match=r"demo\.rounds\.0\.poisoned_batch.*not one of the round's batches"):
        check(compose(["demo.rounds=[{batches:[b1,b2],poisoned_batch:b3}]"]))


def test_a_demo_override_that_is_not_key_equals_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"demo\.overrides\.0"):
        check(compose(["demo.overrides=[agent.enabled]"]))


def _row(rid, sid=None):
    return {"record_id": rid, "sample_id": sid or f"s-{rid}"}


def test_repair_effect_counts_where_repaired_rows_landed_and_scores_the_held_out_ones():
    fixed = [{"record_id": r} for r in ("f1", "f2", "f3", "f4")]
    materialized = {"b1": {"train": [_row("f1"), _row("f9")], "eval": [_row("f2"), _row("f8")]},
                    "b2": {"train": [_row("f3")], "eval": [_row("f4")]}}
    records = [{"sample_id": "s-f2", "model": "prod", "overall_score": 0.2},
               {"sample_id": "s-f2", "model": "candidate", "overall_score": 0.6},
               {"sample_id": "s-f4", "model": "prod", "overall_score": 0.4},
               {"sample_id": "s-f4", "model": "candidate", "overall_score": 0.4},
               {"sample_id": "s-f4", "model": "baseline", "overall_score": 0.0},
               {"sample_id": "s-f8", "model": "candidate", "overall_score": 1.0}]   # not repaired: left out
    e = repair_effect(fixed, {"repaired_rows_in": 4, "repaired_rows_verifiable": 3}, materialized, records)
    assert e == {"fixed_rows": 4, "repaired_rows_in": 4, "now_verifiable": 3, "in_training": 2, "in_holdout": 2,
                 "scored": 2, "before_model": "prod", "overall_before": 0.3, "overall_after": 0.5}


def test_repair_effect_before_the_first_release_compares_with_the_base_model_and_may_score_nothing():
    records = [{"sample_id": "s-f1", "model": "baseline", "overall_score": 0.1},
               {"sample_id": "s-f1", "model": "candidate", "overall_score": 0.3}]
    e = repair_effect([{"record_id": "f1"}], {}, {"b1": {"train": [], "eval": [_row("f1")]}}, records)
    assert (e["before_model"], e["overall_before"], e["overall_after"], e["repaired_rows_in"]) == ("baseline", 0.1, 0.3, 0)
    none = repair_effect([{"record_id": "f7"}], {}, {"b1": {"train": [], "eval": [_row("f1")]}}, records)
    assert (none["scored"], none["overall_before"], none["overall_after"]) == (0, None, None)


@pytest.mark.parametrize("from_conf, from_command_line, expected", [
    (["agent.enabled=false", "train.dpo.enabled=false"], [], ["agent.enabled=false", "train.dpo.enabled=false"]),
    (["agent.enabled=false", "train.dpo.enabled=false"], ["agent.enabled=true"],   # the command line wins, once
     ["train.dpo.enabled=false", "agent.enabled=true"]),
    (["agent.enabled=false"], ["+extra.key=1", "train.sft.epochs=2"], ["agent.enabled=false", "+extra.key=1",
                                                                      "train.sft.epochs=2"]),
    (["train.sft.epochs=1"], ["~train.sft.epochs=1"], ["~train.sft.epochs=1"]),        # a deletion is the same key
    ([], [], []),
])
def test_demo_overrides_conf_first_the_command_line_replaces(from_conf, from_command_line, expected):
    assert demo_overrides(from_conf, from_command_line) == expected


@pytest.mark.parametrize("url, moved", [(".dvc-remote", True), ("/srv/dvc", False), ("s3://bucket/x", False)])
def test_the_demo_makes_a_relative_remote_one_a_clone_reaches(tmp_path, monkeypatch, url, moved):
    """A relative remote url names, in a clone, the clone's own empty folder: `clap demo` makes it the project's
    folder by absolute path, creates it and commits `.dvc/config`; an absolute path or a URL is left as it is."""
    import subprocess

    from clap.demo.rounds import reachable_remote

    def sh(*cmd):
        return subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    sh("git", "init", "-q")
    sh("dvc", "init", "-q")
    sh("dvc", "remote", "add", "-d", "local", url)  # a relative path is stored relative to .dvc/: ../.dvc-remote
    sh("git", "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qam", "init")
    monkeypatch.chdir(tmp_path)
    for k, v in (("NAME", "t"), ("EMAIL", "t@x")):
        monkeypatch.setenv(f"GIT_AUTHOR_{k}", v)
        monkeypatch.setenv(f"GIT_COMMITTER_{k}", v)
    got = reachable_remote(tmp_path)
    if moved:
        folder = (tmp_path / ".dvc-remote").resolve()
        assert got == str(folder) and folder.is_dir()
        assert sh("dvc", "config", "remote.local.url") == str(folder)
        assert sh("git", "status", "--porcelain") == "" and "the DVC remote local is" in sh("git", "log", "-1",
                                                                                           "--format=%s")
    else:
        assert got is None and sh("dvc", "config", "remote.local.url") == url
        assert sh("git", "log", "--format=%s") == "init"
