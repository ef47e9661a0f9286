"""train agent-sft: the agent's cold start — LoRA SFT on the gold trajectories of the train tasks.

    clap train agent-sft        (DVC stage `train_agent_sft`, writes models/agent_sft/)

Each trajectory is one conversation rendered by the tool-calling template (`clap.agent.chat`), the
tools listed in its system turn. Loss is on the agent's turns only (thought, tool, arguments and the
closing `<|im_end|>`): the template's `{% generation %}` marks them, and the labels of everything
else — system, question, tool returns — are -100. A trajectory longer than `agent.sft.max_length`
tokens is set aside by name rather than cut mid-turn. The same runtime guards as extraction.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.agent import chat
from clap.agent.tasks import load
from clap.agent.tools import ReportTools
from clap.data.admission import NotAdmitted
from clap.train.common import finish, lora_config, resume_point, run_training
from clap.train.guards import GuardCallback


def tokenize(tok, messages: list[dict], tool_schemas: list[dict]) -> dict:
    """input_ids and labels (-100 outside the agent's turns) of one trajectory."""
    enc = chat.render(tok, messages, tool_schemas, assistant_mask=True)
    ids = list(enc["input_ids"])
    return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, enc["assistant_masks"])]}


def run(cfg: dict, tasks_dir: Path, base_dir: Path, out: Path, checkpoints: Path, callbacks: list | None = None) -> dict:
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    from clap.train.labelled_head import LabelledHeadSFTTrainer

    started = time.time()
    s, t = cfg["agent"]["sft"], cfg["train"]
    tasks = load(tasks_dir, "train")
    if not tasks:
        raise NotAdmitted(f"agent-sft: no train task in {tasks_dir}")
    tok = base_model.load_tokenizer(base_dir)
    schemas = ReportTools.tool_schemas()
    rows, too_long = [], []
    for task in tasks:
        row = tokenize(tok, task["messages"], schemas)
        (rows if len(row["input_ids"]) <= s["max_length"] else too_long).append(row | {"task_id": task["task_id"]})
    for r in too_long:
        print(f"clap: agent-sft sets aside {r['task_id']}: {len(r['input_ids'])} tokens > agent.sft.max_length "
              f"{s['max_length']}")
    if not rows:
        raise NotAdmitted(f"agent-sft: every trajectory is longer than agent.sft.max_length {s['max_length']}")
    dataset = Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    cuda = torch.cuda.is_available()
    bf16 = base_model.use_bf16(s["bf16"])
    model = base_model.load_model(base_dir)
    args = SFTConfig(
        output_dir=str(checkpoints), num_train_epochs=s["epochs"], max_steps=s["max_steps"], learning_rate=s["learning_rate"],
        per_device_train_batch_size=s["per_device_batch_size"], gradient_accumulation_steps=s["gradient_accumulation"],
        logging_steps=s["logging_steps"], save_steps=s["save_steps"], save_total_limit=2, max_length=None,
        train_sampling_strategy="group_by_length", report_to=[], seed=t["seed"],
        bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0,
        lr_scheduler_type="linear", warmup_steps=0, include_num_input_tokens_seen="all", gradient_checkpointing=False)
    guard = GuardCallback("agent_sft", t["guards"], Path(out) / paths.GUARD_REPORT_FILE)
    trainer = LabelledHeadSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok,
                                     peft_config=lora_config(s, model), callbacks=[*(callbacks or []), guard])
    base_identity = base_model.identity(base_dir)
    resume = resume_point(checkpoints, {"cfg": s, "seed": t["seed"], "rows": [r["input_ids"] for r in rows],
                                        "base": base_identity})
    if resume:
        print(f"clap: resuming agent SFT from {resume}")
    run_training(trainer, resume)
    return finish(trainer, guard, out, "agent_sft", base_identity,
                  {"trajectories": len(rows), "set_aside_too_long": [r["task_id"] for r in too_long],
                   "assistant_tokens": sum(sum(x != -100 for x in r["labels"]) for r in rows),
                   "resumed_from": resume, "bf16": bf16}, started)
