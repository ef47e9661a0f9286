"""repair_queue: the flywheel's queue of what to fix before the next round.

    clap repair-queue          (DVC stage `repair_queue`, writes repair/queue.jsonl)

Quarantined and unverifiable facts, regressed evaluation samples, failed replay cases, human-flagged answers
and failed canary requests, each with its source and reason (`clap.data.repair`).
"""

from __future__ import annotations

from pathlib import Path

from clap.data import repair


def run(root: Path, out: Path) -> dict[str, int]:
    """Write the queue to `out`; the items per source."""
    return repair.run(Path(root), out)
