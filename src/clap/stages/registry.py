"""The registry of the stages that are not trainers: each stage module's `STAGE`, in the order `clap --help` lists
them within their group. The trainers have theirs (`clap.stages.trainers`). Importing the registry imports no model
library: a stage that answers with a model builds its engine (torch, transformers) inside its `main`.

    clap --help            (every stage's command but the trainers' `clap train <trainer>` is registered from here)

`clap.cli.common.register` turns a spec into its command; each command group (`clap.cli.<group>`) registers its
own stages. Adding a stage: its module with `run`, `main` and `STAGE`, one line below, its conf section and its
`dvc.yaml` stage (docs/how-to/extend.md).
"""

from __future__ import annotations

from clap.stages import (
    admit,
    agent_pairs,
    agent_pass_k,
    agent_rm_check,
    agent_tasks,
    assetize,
    base_model,
    bundle,
    demo_data,
    evaluate,
    evaluate_agent,
    evaluate_decisions,
    gate,
    index,
    ingest,
    materialize,
    prod_adapter,
    repair_queue,
    replay,
)
from clap.stages.spec import StageSpec

STAGES: dict[str, StageSpec] = {spec.name: spec for spec in (
    demo_data.STAGE, ingest.STAGE, assetize.STAGE, materialize.STAGE, admit.STAGE, index.STAGE, repair_queue.STAGE,
    base_model.STAGE, evaluate.STAGE, evaluate_decisions.STAGE, replay.STAGE, prod_adapter.STAGE, gate.STAGE,
    bundle.STAGE, agent_tasks.STAGE, agent_pairs.STAGE, agent_rm_check.STAGE, evaluate_agent.STAGE,
    agent_pass_k.STAGE,
)}


def group(name: str) -> list[StageSpec]:
    """The stages `clap.cli.<name>` registers, in order."""
    return [s for s in STAGES.values() if s.group == name]
