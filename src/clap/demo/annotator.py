"""A simulated annotator for the demo's repair queue — not a person, and not for real data: it answers
from the demo generator's ground truth (`demo_data.generate(...)["truth"]`), so that the flywheel can
be measured end to end: queue → corrected rows in `repair/fixed/` → the next round's assetize.

    clap demo-annotate --share 0.5      # repair/queue.jsonl → repair/fixed/simulated_annotator.jsonl

A real round uses people (or a fixing job) writing the same raw-facts rows; nothing downstream can
tell the difference, which is the point.
"""

from __future__ import annotations

import hashlib
import math


def fact_ids(queue: list[dict]) -> list[str]:
    """The fact record_ids a queue names (unverifiable facts, quarantined fact rows, regressed samples)."""
    ids = []
    for q in queue:
        item = q.get("item") or {}
        rid = (item.get("record") or {}).get("record_id") or (item.get("original") or {}).get("record_id") \
            or item.get("record_id")
        if isinstance(rid, str) and rid.startswith("f"):
            ids.append(rid)
    return sorted(set(ids))


def annotate(queue: list[dict], truth: dict[str, dict], share: float, seed: int = 0) -> list[dict]:
    """Corrected rows for a deterministic `share` of the fixable queue items (those with a ground truth)."""
    fixable = [r for r in fact_ids(queue) if r in truth]
    fixable.sort(key=lambda r: hashlib.sha256(f"{seed}:{r}".encode()).hexdigest())
    return [truth[r] for r in sorted(fixable[:math.ceil(share * len(fixable))])]
