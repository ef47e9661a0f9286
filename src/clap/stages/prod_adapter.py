"""prod_adapter: restore the adapter the registry's prod stage points at, the baseline evaluation and the gate
compare every candidate with.

    clap prod-adapter          (DVC stage `prod_adapter`, writes models/prod/)

Restored from the DVC cache by the hashes its release bundle pins and checked against them
(`clap.release.prod`); without a version in prod the folder says so and the baseline is the base model.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import Params
from clap.release import prod
from clap.stages.spec import StageSpec


def run(root: Path, out: Path) -> dict:
    """The prod pointer restored into `out` (`version` is None when nothing is in prod)."""
    return prod.restore(Path(root), out)


def main(params: Params, out: Path = paths.PROD_ADAPTER) -> list[str]:
    """Restore the adapter the registry's prod stage points at (the baseline of evaluate and the gate)."""
    ptr = run(Path("."), out)
    return [f"prod: {ptr.get('version') or 'none (baseline = base model)'} → {out}"]


STAGE = StageSpec(name="prod_adapter", group="release", main=main)
