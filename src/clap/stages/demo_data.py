"""demo_data: the demo's generated corpus (chunks, facts, decisions per batch) in the raw contract.

    clap demo-data --out data/raw --seed 7 --scale 1.0 --poison none   (DVC stage `demo_data`, writes data/raw/)

Deterministic for a seed (`clap.demo.corpus`); `--poison bN` shifts that batch's currency units by 10⁴, the
poisoned export the admission gate must send to repair. A project of its own starts with `ingest` instead.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import Params
from clap.demo import corpus
from clap.stages.spec import StageSpec


def run(out: Path, seed: int, scale: float, poisoned_batch: str | None) -> dict[str, int]:
    """Write the corpus to `out`; the rows written per file."""
    return corpus.write(out, seed=seed, scale=scale, poisoned_batch=poisoned_batch)


def main(params: Params, out: Path = paths.RAW, seed: int = 7, scale: float = 1.0, poison: str = "none") -> list[str]:
    """Write the deterministic demo corpus (chunks, facts, decisions) to OUT."""
    counts = run(out, seed, scale, None if poison == "none" else poison)
    return [f"demo corpus → {out}: " + ", ".join(f"{v} {k}" for k, v in counts.items())]


STAGE = StageSpec(name="demo_data", group="data", main=main, helps={
    "poison": "batch whose currency units are shifted by 10⁴ (a poisoned export)"})
