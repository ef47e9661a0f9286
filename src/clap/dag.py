"""The pipeline's stages one track at a time, readable in a terminal (`dvc dag` draws every stage side by side,
each batch's copy apart, too wide to read).

    clap dag                   # the extraction track: each stage, after the stages it reads from
    clap dag --track agent     # the tool-calling agent's track
    clap dag --track all --md  # every stage as a Mermaid flowchart (for a pull request or the docs)

A foreach stage's copies (`materialize@b1` … `materialize@b5`) are one node, `materialize@*`. A stage whose name
says agent (`agent_tasks`, `train_agent_sft`, `evaluate_agent`, …) is on the agent track, every other one on the
extraction track; a stage of the other track that one reads from is named as its input and not listed itself.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

TRACKS = ("extraction", "agent", "all")


def node(stage: str) -> str:
    """A stage's node: a foreach copy stands for all of them (`admit@b3` → `admit@*`)."""
    return f"{stage.split('@')[0]}@*" if "@" in stage else stage


def track_of(stage: str) -> str:
    return "agent" if "agent" in stage else "extraction"


def pipeline_edges(root: Path) -> dict[str, set[str]]:
    """Node → the nodes it reads from, from DVC's own graph of `root`'s pipeline (foreach expanded by DVC)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph
        edges: dict[str, set[str]] = {node(s.addressing): set() for s in graph.nodes}
        for stage, dependency in graph.edges:
            edges[node(stage.addressing)].add(node(dependency.addressing))
    return edges


def layout(edges: dict[str, set[str]], track: str) -> list[tuple[str, list[str]]]:
    """(node, the nodes it reads from) for `track`'s nodes, each after every node it reads from, ties by name."""
    order: list[str] = []
    placed: set[str] = set()

    def place(n: str) -> None:
        if n in placed:
            return
        placed.add(n)
        for upstream in sorted(edges.get(n, ())):
            place(upstream)
        order.append(n)

    for n in sorted(edges):
        place(n)
    return [(n, sorted(edges[n] - {n})) for n in order if track == "all" or track_of(n) == track]


def text(rows: list[tuple[str, list[str]]], columns: int = 100) -> str:
    """One entry a stage: `stage  ← what it reads from`, a long list wrapped under itself within `columns`."""
    width = max((len(n) for n, _ in rows), default=0)
    indent = " " * (width + 4)
    lines = []
    for n, up in rows:
        if not up:
            lines.append(n)
            continue
        wrapped = textwrap.wrap(", ".join(up), max(20, columns - len(indent)), break_on_hyphens=False)
        lines.append(f"{n:<{width}}  ← {wrapped[0]}")
        lines += [indent + rest for rest in wrapped[1:]]
    return "\n".join(lines)


def mermaid(rows: list[tuple[str, list[str]]]) -> str:
    """A Mermaid flowchart, top to bottom; an input from outside the listed stages is drawn dashed."""
    ids = {n: f"s{i}" for i, n in enumerate(dict.fromkeys([n for n, _ in rows] + [u for _, up in rows for u in up]))}
    listed = {n for n, _ in rows}
    lines = ["flowchart TD"]
    lines += [f'  {ids[n]}["{n}"]' if n in listed else f'  {ids[n]}(["{n}"]):::outside' for n in ids]
    lines += [f"  {ids[u]} --> {ids[n]}" for n, up in rows for u in up]
    lines.append("  classDef outside stroke-dasharray: 4 3")
    return "\n".join(lines)
