"""demo_data: the demo's generated corpus (chunks, facts, decisions per batch) in the raw contract.

    clap demo-data --out data/raw --seed 7 --scale 1.0 --poison none   (DVC stage `demo_data`, writes data/raw/)

Deterministic for a seed (`clap.demo.corpus`); `--poison bN` shifts that batch's currency units by 10⁴, the
poisoned export the admission gate must send to repair. A project of its own starts with `ingest` instead.
"""

from __future__ import annotations

from pathlib import Path

from clap.demo import corpus


def run(out: Path, seed: int, scale: float, poisoned_batch: str | None) -> dict[str, int]:
    """Write the corpus to `out`; the rows written per file."""
    return corpus.write(out, seed=seed, scale=scale, poisoned_batch=poisoned_batch)
