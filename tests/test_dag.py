"""`clap dag`: the pipeline one track at a time, each stage after what it reads from, a batch's copies as one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clap.dag import layout, mermaid, node, text, track_of

ROOT = Path(__file__).resolve().parents[1]
CLAP = str(Path(sys.executable).parent / "clap")
EDGES = {"demo_data": set(), "assetize": {"demo_data"}, "materialize@*": {"assetize"}, "admit@*": {"materialize@*"},
         "train_sft": {"admit@*", "materialize@*"}, "agent_tasks": {"assetize"}, "train_agent_sft": {"agent_tasks"},
         "gate": {"train_sft", "train_agent_sft"}}


@pytest.mark.parametrize("stage, expected", [("materialize@b3", "materialize@*"), ("evaluate@b1", "evaluate@*"),
                                             ("gate", "gate")])
def test_a_batchs_copies_are_one_node(stage, expected):
    assert node(stage) == expected


@pytest.mark.parametrize("stage, track", [("agent_tasks", "agent"), ("train_agent_rloo", "agent"),
                                          ("evaluate_agent", "agent"), ("train_sft", "extraction"),
                                          ("replay", "extraction")])
def test_a_stage_is_on_the_track_its_name_says(stage, track):
    assert track_of(stage) == track


def test_each_stage_comes_after_what_it_reads_from_and_other_tracks_are_inputs_only():
    rows = layout(EDGES, "extraction")
    order = [n for n, _ in rows]
    assert order == ["demo_data", "assetize", "materialize@*", "admit@*", "train_sft", "gate"]
    assert dict(rows)["gate"] == ["train_agent_sft", "train_sft"]  # the agent's stage named as an input only
    assert [n for n, _ in layout(EDGES, "agent")] == ["agent_tasks", "train_agent_sft"]
    assert len(layout(EDGES, "all")) == len(EDGES)


def test_a_long_input_list_wraps_under_itself():
    rows = [("bundle", [f"stage_{i:02d}" for i in range(30)])]
    lines = text(rows, columns=60).splitlines()
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("bundle  ← stage_00") and lines[1].startswith(" " * 10 + "stage_")
    assert ", ".join(f"stage_{i:02d}" for i in range(30)) == " ".join(
        line.removeprefix("bundle  ← ").strip() for line in lines)


def test_text_and_mermaid():
    rows = layout(EDGES, "agent")
    assert text(rows).splitlines() == ["agent_tasks      ← assetize", "train_agent_sft  ← agent_tasks"]
    chart = mermaid(rows)
    assert chart.startswith("flowchart TD") and '(["assetize"]):::outside' in chart  # not on the track: dashed
    assert chart.count("-->") == 2


def test_clap_dag_on_the_repository():
    """The repository's own pipeline, one line a stage; a foreach stage once; an unknown track is one line."""
    done = subprocess.run([CLAP, "dag"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    names = [line.split()[0] for line in lines if not line.startswith(" ")]  # a long input list wraps, indented
    assert "materialize@*" in names and "gate" in names and not any("@b" in n for n in names)
    assert names.index("materialize@*") < names.index("train_sft") < names.index("gate")
    assert not any("agent" in n for n in names) and max(map(len, lines)) <= 100
    bad = subprocess.run([CLAP, "dag", "--track", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "--track 'nope': use extraction, agent, all" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stdout + bad.stderr
