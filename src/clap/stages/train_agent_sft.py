"""train agent-sft: the agent's cold start — LoRA SFT on the gold trajectories of the train tasks.

    clap train agent-sft        (DVC stage `train_agent_sft`, writes models/agent_sft/)

Each trajectory is one conversation rendered by the tool-calling template (`clap.agent.chat`), the
tools listed in its system turn. Loss is on the agent's turns only (thought, tool, arguments and the
closing `<|im_end|>`): the template's `{% generation %}` marks them, and the labels of everything
else — system, question, tool returns — are -100. A trajectory longer than `agent.sft.max_length`
tokens is set aside by name rather than cut mid-turn. The same runtime guards as extraction.

`agent.sft.policy` says how the agent's turns are learned. `joint`: one loss on the whole action. `two_stage`
decouples *when* from *how* (the seed's two-stage training): first the plan — each turn's thought and the tool
it chooses, `finish` included (`chat.plan_and_call_masks`) — for the first half of the dose, then the call — the
arguments given that tool — for the rest, on the same LoRA. Decoding needs no second model: under the action
grammar the tool's name selects its branch, so the arguments are decoded under that tool's own schema.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import lazy, paths
from clap import model as base_model
from clap.agent import chat
from clap.agent.tasks import load
from clap.agent.tools import ReportTools
from clap.config import AgentSft, Train
from clap.data.admission import NotAdmitted
from clap.train import guards
from clap.train.common import finish, lora_config, memory_plan, resume_point, run_training
from clap.train.spec import AGENT, Call, Need, TrainerSpec

labelled_head = lazy.module("clap.train.labelled_head")  # extends TRL's trainer


def phases(s: AgentSft) -> list[tuple[str, str, int, int]]:
    """(phase, labels, epochs, max_steps) of each training phase: the whole action (`joint`), or the plan for
    the first half of the dose and then the call for the rest (`two_stage`), each at least one epoch or step."""
    if s.policy == "joint":
        return [("joint", "labels", s.epochs, s.max_steps)]
    def halves(n: int) -> tuple[int, int]:
        return (n, n) if n <= 1 else ((n + 1) // 2, n // 2)
    epochs, steps = halves(s.epochs), halves(s.max_steps) if s.max_steps > 0 else (-1, -1)
    return [("plan", "plan_labels", epochs[0], steps[0]), ("call", "call_labels", epochs[1], steps[1])]


def run(sft: AgentSft, tasks_dir: Path, base_dir: Path, out: Path, checkpoints: Path, callbacks: list | None = None, *,
        train: Train) -> dict:
    """`sft`: `agent.sft`; `train`: its seed and guards (`train.seed`, `train.guards`)."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    started = time.time()
    s, t = sft, train
    tasks = load(tasks_dir, "train")
    if not tasks:
        raise NotAdmitted(f"agent-sft: no train task in {tasks_dir}")
    tok = base_model.load_tokenizer(base_dir)
    schemas = ReportTools.tool_schemas()
    rows, too_long = [], []
    for task in tasks:
        row = chat.trajectory_labels(tok, task["messages"], schemas)
        (rows if len(row["input_ids"]) <= s.max_length else too_long).append(row | {"task_id": task["task_id"]})
    for r in too_long:
        print(f"clap: agent-sft sets aside {r['task_id']}: {len(r['input_ids'])} tokens > agent.sft.max_length "
              f"{s.max_length}")
    if not rows:
        raise NotAdmitted(f"agent-sft: every trajectory is longer than agent.sft.max_length {s.max_length}")
    cuda = torch.cuda.is_available()
    bf16 = base_model.use_bf16(s.bf16)
    model = base_model.load_model(base_dir)
    plan = memory_plan("agent-sft", s, model, qlora=False, bf16_on_cuda=bf16 and cuda)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    base_identity = base_model.identity(base_dir)
    trainer, steps, resumed = None, {}, {}
    for phase, labels, epochs, max_steps in phases(s):
        folder = Path(checkpoints) if phase == "joint" else Path(checkpoints) / phase
        args = SFTConfig(
            output_dir=str(folder), num_train_epochs=epochs, max_steps=max_steps, learning_rate=s.learning_rate,
            per_device_train_batch_size=s.per_device_batch_size, gradient_accumulation_steps=s.gradient_accumulation,
            logging_steps=s.logging_steps, save_steps=s.save_steps, save_total_limit=2, max_length=None,
            train_sampling_strategy="group_by_length", report_to=[], seed=t.seed,
            bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0,
            lr_scheduler_type="linear", warmup_steps=0, include_num_input_tokens_seen="all",
            gradient_checkpointing=bool(plan and plan.checkpointing))
        dataset = Dataset.from_list([{"input_ids": r["input_ids"], "labels": r[labels]} for r in rows])
        trainer = labelled_head.LabelledHeadSFTTrainer(model=model if trainer is None else trainer.model, args=args,
                                         train_dataset=dataset, processing_class=tok,
                                         peft_config=lora_config(s, model) if trainer is None else None,
                                         callbacks=[*(callbacks or []), guard])
        trainer.memory_budget = plan
        resume = resume_point(folder, {"cfg": s, "seed": t.seed, "rows": [r["input_ids"] for r in rows],
                                       "base": base_identity, **({} if phase == "joint" else {"phase": phase})})
        if resume:
            print(f"clap: resuming agent SFT ({phase}) from {resume}")
        run_training(trainer, resume)
        steps[phase], resumed[phase] = trainer.state.global_step, resume
        if guard.report().status != "ok":
            break  # a tripped guard ends the run: the call phase never starts from a bad plan phase
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"trajectories": len(rows), "set_aside_too_long": [r["task_id"] for r in too_long],
                   "assistant_tokens": sum(sum(x != -100 for x in r["labels"]) for r in rows),
                   "policy": s.policy, "steps_by_phase": steps,
                   "resumed_from": resumed.get("joint", resumed.get("plan")), "bf16": bf16}, started)


def main(call: Call) -> dict:
    """`clap train agent-sft`: `agent.sft`, `train`'s seed and guards, the gold trajectories of data/agent."""
    return run(call.params.agent.sft, paths.AGENT_TASKS, call.base, call.out, call.checkpoints,
               callbacks=call.callbacks, train=call.params.train)


SPEC = TrainerSpec(name="agent_sft", chain=AGENT, section="agent.sft", signals=guards.LOSS, main=main,
                   switches=("agent.enabled",), inputs=(Need(paths.AGENT_TASKS, "dvc repro agent_tasks"),),
                   task_tag="tool-calling-agent")
