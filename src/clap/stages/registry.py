"""The registry of the stages that are not trainers: each stage module's `STAGE`, in the order `clap --help` lists
them within their group. The trainers have theirs (`clap.stages.trainers`).

    clap --help            (the data commands, `clap base-model`, and prod-adapter, gate and bundle are registered from here)

`clap.cli.common.register` turns a spec into its command; each command group (`clap.cli.<group>`) registers its
own stages. Adding a stage: its module with `run`, `main` and `STAGE`, one line below, its conf section and its
`dvc.yaml` stage (docs/how-to/extend.md).
"""

from __future__ import annotations

from clap.stages import (
    admit,
    assetize,
    base_model,
    bundle,
    gate,
    index,
    ingest,
    materialize,
    prod_adapter,
    repair_queue,
)
from clap.stages.spec import StageSpec

STAGES: dict[str, StageSpec] = {spec.name: spec for spec in (
    ingest.STAGE, assetize.STAGE, materialize.STAGE, admit.STAGE, index.STAGE, repair_queue.STAGE,
    base_model.STAGE, prod_adapter.STAGE, gate.STAGE, bundle.STAGE,
)}


def group(name: str) -> list[StageSpec]:
    """The stages `clap.cli.<name>` registers, in order."""
    return [s for s in STAGES.values() if s.group == name]
