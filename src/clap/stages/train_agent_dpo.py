"""train agent-dpo: the agent chain's preference step — DPO on on-policy hard negatives, from agent SFT.

    clap train agent-dpo        (DVC stage `train_agent_dpo`, writes models/agent_dpo/)

Pairs come from `agent_pairs`: at a state of a gold trajectory, the gold action is chosen and the
agent SFT adapter's own wrong action rejected. The prompt is the conversation so far rendered by the
tool-calling template (tools in the system turn); chosen and rejected are the action text plus the
end-of-turn token. The policy starts from the agent SFT adapter, loaded trainable through the serving
check; TRL's frozen reference is that same SFT policy. The guard watches loss and the reward margin.
With `agent.dpo.balance_finish`, pairs that reject a too-early finish are capped at the number that reject a
too-late one (`clap.agent.preferences`); the metrics count both directions and the pairs left out.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.agent import chat, preferences
from clap.agent.tools import ReportTools
from clap.config import Agent, Train
from clap.integrity import adapter_manifest, pinned_expectation, verify_adapter
from clap.io import atomic_dir, read_jsonl, write_json
from clap.train import guards
from clap.train.common import finish, resume_point, run_training, start_from, write_untrained
from clap.train.spec import AGENT, Call, Need, TrainerSpec


def build_dataset(rows: list[dict], tok):
    from datasets import Dataset

    schemas, end = ReportTools.tool_schemas(), chat.end_of_turn(tok)
    return Dataset.from_list([{
        "prompt": chat.render(tok, r["prompt_messages"], schemas, add_generation_prompt=True, tokenize=False),
        "chosen": r["chosen"] + end, "rejected": r["rejected"] + end} for r in rows])


def run(agent: Agent, pairs_dir: Path, base_dir: Path, out: Path, checkpoints: Path, start_adapter: Path,
        start_expected: dict, callbacks: list | None = None, *, train: Train) -> dict:
    """`agent`: its `dpo` dose and `sft.max_length`; `train`: the seed and guards."""
    import torch
    from trl import DPOConfig, DPOTrainer

    started = time.time()
    d, t = agent.dpo, train
    mined = read_jsonl(Path(pairs_dir) / "pairs.jsonl")
    rows, left_out = preferences.balance_finish(mined) if d.balance_finish else (mined, [])
    tok = base_model.load_tokenizer(base_dir)
    base_identity = base_model.identity(base_dir)
    if not rows:
        return _unchanged(out, start_adapter, start_expected, base_identity, started)
    model, start_sha = start_from(base_dir, start_adapter, start_expected, base_identity)
    cuda, bf16 = torch.cuda.is_available(), base_model.use_bf16(d.bf16)
    args = DPOConfig(output_dir=str(checkpoints), max_steps=d.max_steps, learning_rate=d.learning_rate,
                     beta=d.beta, per_device_train_batch_size=1, gradient_accumulation_steps=d.gradient_accumulation,
                     logging_steps=1, save_steps=max(1, d.max_steps // 2), save_total_limit=2, report_to=[],
                     seed=t.seed, bf16=bf16, use_cpu=not cuda,
                     max_length=agent.sft.max_length, dataloader_num_workers=0)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    trainer = DPOTrainer(model=model, args=args, train_dataset=build_dataset(rows, tok), processing_class=tok,
                         callbacks=[*(callbacks or []), guard])
    resume = resume_point(checkpoints, {"cfg": d, "seed": t.seed, "start": start_sha, "rows": rows,
                                        "base": base_identity})
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"pairs": len(rows), "pairs_mined": len(mined), "pairs_left_out": len(left_out),
                   "finish_direction": preferences.finish_counts(rows), "resumed_from": resume,
                   "start_adapter_sha256": start_sha, "bf16": bf16}, started, start_adapter)


def _unchanged(out: Path, start_adapter: Path, start_expected: dict, base_identity: dict, started: float) -> dict:
    """No pair to learn from (the SFT adapter made no mistake the AST rules catch on the train states):
    the step's adapter is its start, verified and copied, and says so; the gate then holds it (it
    cannot beat the adapter it is)."""
    import shutil

    verify_adapter(Path(start_adapter), start_expected, base_identity)
    metrics = {"trainer": "agent_dpo", "status": "ok", "steps": 0, "train_loss": None, "pairs": 0,
               "train_runtime_s": round(time.time() - started, 2), "tokens_seen": 0, "tokens_per_s": 0.0,
               "adapter_source": f"start ({start_adapter}): no pair to learn from"}
    with atomic_dir(out) as tmp:
        shutil.copytree(start_adapter, tmp / "adapter")
        write_json(tmp / "adapter" / paths.MANIFEST, adapter_manifest(tmp / "adapter", base_identity))
        write_untrained(tmp, "agent_dpo", metrics)
    return metrics


def main(call: Call) -> dict:
    """`clap train agent-dpo`: `agent` (its `dpo` dose), `train`'s seed and guards, the pairs of data/agent_pairs,
    the agent SFT adapter (--start) checked against its pins."""
    start = SPEC.start_adapter(call.start)
    return run(call.params.agent, paths.AGENT_PAIRS, call.base, call.out, call.checkpoints, start,
               pinned_expectation(Path("."), start), callbacks=call.callbacks, train=call.params.train)


SPEC = TrainerSpec(name="agent_dpo", chain=AGENT, section="agent.dpo", signals=guards.PREFERENCE, main=main,
                   switches=("agent.enabled", "agent.dpo.enabled"),
                   inputs=(Need(paths.AGENT_PAIRS, "dvc repro agent_pairs"),), continues="agent_sft",
                   curves=("loss", "rewards/margins"), task_tag="tool-calling-agent")
