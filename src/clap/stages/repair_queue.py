"""repair_queue: the flywheel's queue of what to fix before the next round.

    clap repair-queue          (DVC stage `repair_queue`, writes repair/queue.jsonl)

Quarantined and unverifiable facts, regressed evaluation samples, failed replay cases, human-flagged answers
and failed canary requests, each with its source and reason (`clap.data.repair`).
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import Params
from clap.data import repair
from clap.stages.spec import StageSpec


def run(root: Path, out: Path) -> dict[str, int]:
    """Write the queue to `out`; the items per source."""
    return repair.run(Path(root), out)


def main(params: Params, out: Path = paths.REPAIR_QUEUE) -> list[str]:
    """Collect quarantined, unverifiable, regressed and failed items into the repair queue."""
    counts = run(Path("."), out)
    from_production = sum(counts.get(s, 0) for s in repair.PRODUCTION_SOURCES)
    return [f"repair queue → {out}: " + (", ".join(f"{k}={v}" for k, v in counts.items()) or "empty"),
            f"from production (human-flagged answers, failed canary requests): {from_production}"]


STAGE = StageSpec(name="repair_queue", group="data", main=main)
