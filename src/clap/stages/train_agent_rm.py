"""train agent-rm: a reward model on the agent's preference pairs, checked against the rule rewards.

    clap train agent-rm         (DVC stage `train_agent_rm`, writes models/agent_rm/ and metrics/train_agent_rm.json)

TRL's `RewardTrainer` fits a scalar head (LoRA on SmolLM2, the head saved beside it) so that the gold
action in a state scores above the agent SFT adapter's own wrong action there (`agent_pairs`: the
on-policy hard negatives). The pairs are split by task (`agent.rm.eval_fraction`, the tasks' split
seed): the held-out tasks' pairs measure how often the model agrees with the rule rewards, which
prefer every chosen action to its rejected one — overall and by why the rejected action failed.
`agrees_with_rules` says whether that agreement reached `agent.rm.min_agreement`. The check against people's
labels is its own stage (`clap agent-rm-check`), so importing new labels re-scores them without training the
model again; agent GRPO and RLOO use the model only when both checks passed (its verdict). The check reads each pair's state once for both its actions
(`reward_model.state_scores`), in fp32 whatever `agent.rm.bf16` trained it in.

TRL 1.16 no longer ships a PPO trainer, so the reward model serves GRPO (as one of its rewards) rather
than PPO's value/reward pair.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.agent import chat, reward_model, scoring
from clap.agent.tasks import split_of
from clap.config import Agent, Train
from clap.io import atomic_dir, read_jsonl
from clap.train import guards
from clap.train.common import finish, lora_config, resume_point, run_training, write_untrained
from clap.train.spec import NO_CHAIN, Call, Need, TrainerSpec


def split_pairs(pairs: list[dict], eval_fraction: float, seed: str) -> tuple[list[dict], list[dict]]:
    """(train, held-out) pairs, split by task so no held-out state comes from a task the model trained on."""
    side = {t: split_of(t, eval_fraction, seed) for t in {p["task_id"] for p in pairs}}
    return [p for p in pairs if side[p["task_id"]] != "eval"], [p for p in pairs if side[p["task_id"]] == "eval"]


def build_dataset(pairs: list[dict], tok):
    from datasets import Dataset

    end = chat.end_of_turn(tok)  # one template render, not two a pair
    return Dataset.from_list([{"prompt": reward_model.state_text(tok, p["prompt_messages"]),
                               "chosen": p["chosen"] + end, "rejected": p["rejected"] + end} for p in pairs])


def agreement(model, tok, pairs: list[dict]) -> dict:
    """The reward model against the rule rewards on `pairs` (`clap.agent.scoring.pairwise_agreement`); a pair's
    state is read once for both its actions (`reward_model.state_scores`)."""
    states = [reward_model.state_text(tok, p["prompt_messages"]) for p in pairs]
    end = chat.end_of_turn(tok)
    actions = [p["chosen"] + end for p in pairs] + [p["rejected"] + end for p in pairs]
    both = reward_model.state_scores(model, tok, states + states, actions)
    chosen, rejected = both[:len(pairs)], both[len(pairs):]
    return scoring.pairwise_agreement(chosen, rejected, [p["reason"] for p in pairs])


def run(agent: Agent, pairs_dir: Path, base_dir: Path, out: Path, checkpoints: Path, callbacks: list | None = None, *,
        train: Train) -> dict:
    """`agent`: its `rm` dose, `tasks.seed` (the held-out split) and the LoRA shape of `sft`; `train`: seed, guards."""
    import torch
    from transformers import set_seed
    from trl import RewardConfig, RewardTrainer

    started = time.time()
    rm, t = agent.rm, train
    lora = {k: getattr(agent.sft, k) for k in ("lora_r", "lora_alpha", "lora_dropout", "target_modules", "max_length")}
    pairs = read_jsonl(Path(pairs_dir) / "pairs.jsonl")
    train_pairs, held = split_pairs(pairs, rm.eval_fraction, agent.tasks.seed)
    base_identity = base_model.identity(base_dir)
    if not train_pairs:
        return _untrained(out, base_identity, started, len(pairs), len(held))
    tok = base_model.load_tokenizer(base_dir)
    set_seed(t.seed)  # the scalar head is initialised here, before the trainer seeds: the same seed, the same model
    model = reward_model.load_base(base_dir)
    cuda, bf16 = torch.cuda.is_available(), base_model.use_bf16(rm.bf16)
    args = RewardConfig(output_dir=str(checkpoints), max_steps=rm.max_steps, learning_rate=rm.learning_rate,
                        per_device_train_batch_size=1, gradient_accumulation_steps=rm.gradient_accumulation,
                        logging_steps=1, save_steps=max(1, rm.max_steps // 2), save_total_limit=2, report_to=[],
                        seed=t.seed, bf16=bf16, use_cpu=not cuda,
                        max_length=lora["max_length"], dataloader_num_workers=0)
    peft = lora_config(agent.sft, model, task_type="SEQ_CLS", modules_to_save=["score"])
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    trainer = RewardTrainer(model=model, args=args, train_dataset=build_dataset(train_pairs, tok), processing_class=tok,
                            peft_config=peft, callbacks=[*(callbacks or []), guard])
    resume = resume_point(checkpoints, {"cfg": rm, "lora": lora, "seed": t.seed, "pairs": train_pairs, "base": base_identity})
    run_training(trainer, resume)
    # Scored in full precision, as GRPO loads it: off accelerate's bf16 autocast wrapper, which was no faster for
    # this path and can move a pair's order (benchmarks/README.md § agent reward model)
    scorer = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).eval()
    checked = {"train": agreement(scorer, tok, train_pairs), "held_out": agreement(scorer, tok, held)}
    agrees = checked["held_out"]["agreement"] is not None and checked["held_out"]["agreement"] >= rm.min_agreement
    logged = [h for h in trainer.state.log_history if "num_tokens" in h]  # RewardTrainer counts its own tokens
    tokens = int(float(logged[-1]["num_tokens"])) if logged else 0
    runtime = next((h["train_runtime"] for h in trainer.state.log_history if "train_runtime" in h), None)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"tokens_seen": tokens, "tokens_per_s": round(tokens / runtime, 2) if runtime else 0.0,
                   "pairs": len(pairs), "train_pairs": len(train_pairs), "held_out_pairs": len(held),
                   "agreement_with_rules": checked, "agrees_with_rules": agrees, "resumed_from": resume,
                   "bf16": bf16}, started)


def _untrained(out: Path, base_identity: dict, started: float, pairs: int, held: int) -> dict:
    """No train pair (the SFT adapter made no mistake the AST rules catch on the train tasks' states):
    no reward model; the folder says so, and agent GRPO keeps the rule rewards alone."""
    metrics = {"trainer": "agent_rm", "status": "ok", "steps": 0, "train_loss": None, "pairs": pairs, "train_pairs": 0,
               "held_out_pairs": held, "agreement_with_rules": None, "agrees_with_rules": False,
               "train_runtime_s": round(time.time() - started, 2), "tokens_seen": 0, "tokens_per_s": 0.0,
               "adapter_source": "none: no train pair to learn from", "base": base_identity["hub_id"]}
    with atomic_dir(out) as tmp:
        write_untrained(tmp, "agent_rm", metrics)
    return metrics


def main(call: Call) -> dict:
    """`clap train agent-rm`: `agent` (its `rm` dose), `train`'s seed and guards, the pairs of data/agent_pairs."""
    return run(call.params.agent, paths.AGENT_PAIRS, call.base, call.out, call.checkpoints,
               callbacks=call.callbacks, train=call.params.train)


SPEC = TrainerSpec(name="agent_rm", chain=NO_CHAIN, section="agent.rm", signals=guards.LOSS, main=main,
                   switches=("agent.enabled",), inputs=(Need(paths.AGENT_PAIRS, "dvc repro agent_pairs"),),
                   task_tag="reward-model")
