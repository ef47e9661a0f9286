"""train agent-rloo: the agent chain's reward-model-driven policy-gradient step — RLOO per turn, from agent SFT.

    clap train agent-rloo       (DVC stage `train_agent_rloo`, writes models/agent_rloo/)

Why RLOO: TRL 1.16 ships no `PPOTrainer`; `RLOOTrainer` — REINFORCE with a leave-one-out baseline, the
PPO-family method TRL keeps (clipped importance ratio, KL to a frozen reference) — needs no value model: the
baseline of each action is the mean reward of the other `num_generations − 1` actions sampled in the same
state. Online DPO would need the reward model to rank pairs; RLOO uses its score directly.

Why per turn: agent GRPO rewards a whole episode with one number, so a good search inside a failed episode is
punished with it. Here a state is a prefix of a training task's gold trajectory — every turn of every training
task, all the data — and the policy (the agent SFT adapter, loaded trainable through the serving check; TRL's
frozen reference is that same SFT policy) writes `num_generations` next actions there. Each action is run in
the sandboxed tools and scored on its own:
    process        1 when the action moves the task forward in its state (`rewards.step_credit`: a search that
                   brings a needed page, a read of a needed page, a needed computation, the right answer), else 0
                   — the dense process reward, weight `agent.rewards.weights.process`;
    format         1 for a well-formed action of a known tool with valid arguments (weight `...weights.format`);
    reward_model   sigmoid of the learned reward model's score of the action in its state (weight
                   `agent.rloo.reward_model_weight`), only when that model passed both its checks — against the
                   rule rewards on held-out pairs and against people's labels (`clap train agent-rm`). Otherwise
                   the rule rewards stand alone and the metrics say why.
The actions are sampled by the trainer's own `generate` (RLOOTrainer has no rollout hook for a grammar), so a
malformed action costs its format and process reward. The guards watch KL, reward spread and clipped turns as
for GRPO. The trainer is TRL's, with each state's prompt run once for its `num_generations` actions
(`clap.train.shared_prefix`). The step is a chain candidate like agent DPO and GRPO: evaluated, gated against
agent SFT and prod.
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path

from clap import lazy, paths
from clap import model as base_model
from clap.agent import chat, reward_model, rewards
from clap.agent.episode import run_action
from clap.agent.tasks import gold_states, load
from clap.agent.tools import ReportTools
from clap.config import Agent, Train
from clap.data.admission import NotAdmitted
from clap.train import guards
from clap.train.common import finish, resume_point, run_training, start_from
from clap.train.spec import AGENT, AGENT_RL_INPUTS, AGENT_RL_OPTIONAL, Call, TrainerSpec, agent_rl_arguments

shared_prefix = lazy.module("clap.train.shared_prefix")  # extends TRL's trainer


def build_dataset(tok, rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": reward_model.state_text(tok, r["prefix"]),
                               "state_json": json.dumps({"task": r["task"], "prefix_steps": r["prefix_steps"]},
                                                        ensure_ascii=False)} for r in rows])


def rule_rewards(tools: ReportTools):
    """The process and format rewards as TRL reward functions (logged as rewards/process/mean, rewards/format/mean);
    each action runs in the tools once for both (the tools are deterministic, so its step depends on its text)."""
    @functools.lru_cache(maxsize=1024)
    def step(text: str) -> dict:
        return run_action(tools, text)

    def process(completions, state_json, **_):
        out = []
        for text, state in zip(completions, state_json):
            s = json.loads(state)
            out.append(rewards.step_credit(s["prefix_steps"], step(text), s["task"]))
        return out

    def format_(completions, **_):
        return [float(step(text)["valid"]) for text in completions]

    format_.__name__ = "format"
    return [process, format_]


def learned_reward(model, tok):
    """The reward model's score of each action in its state, as sigmoid (logged as rewards/reward_model/mean)."""
    def reward_model_score(prompts, completions, **_):
        texts = [p + c + chat.end_of_turn(tok) for p, c in zip(prompts, completions)]
        return [1.0 / (1.0 + math.exp(-x)) for x in reward_model.scores(model, tok, texts)]
    reward_model_score.__name__ = "reward_model"
    return reward_model_score


def run(agent: Agent, tasks_dir: Path, assets: Path, base_dir: Path, out: Path, checkpoints: Path, start_adapter: Path,
        start_expected: dict, callbacks: list | None = None, rm_dir: Path | None = None,
        rm_expected: dict | None = None, rm_check: Path | None = None, *, train: Train, batches: list[str]) -> dict:
    """`start_adapter`/`start_expected`: the agent SFT adapter and the manifest git pins for it; `rm_dir`/
    `rm_expected`: the reward model's folder (models/agent_rm) and the manifest git pins for its adapter;
    `rm_check`: its verdict (data/agent_rm_check, `clap agent-rm-check`). `agent`: the `rloo` dose, `turn_tokens`
    and the reward weights; `train`: seed and guards; `batches`: the tools' data (`data.batches`)."""
    import torch
    from trl import RLOOConfig

    started = time.time()
    a, r, t = agent, agent.rloo, train
    tasks = load(tasks_dir, "train")
    if not tasks:
        raise NotAdmitted(f"agent-rloo: no train task in {tasks_dir}")
    tools = ReportTools.over_batches(assets, batches)
    rows = gold_states(tools, tasks)
    tok = base_model.load_tokenizer(base_dir)
    tok.padding_side = "left"
    base_identity = base_model.identity(base_dir)
    model, start_sha = start_from(base_dir, start_adapter, start_expected, base_identity)
    funcs, weights = rule_rewards(tools), [a.rewards.weights.process, a.rewards.weights.format]
    use_rm, rm_note = reward_model.reward_model_use(r.reward_model_weight, rm_check)
    if use_rm:
        funcs.append(learned_reward(reward_model.load(base_dir, Path(rm_dir) / "adapter", rm_expected, base_identity),
                                    tok))  # scores() pads right whatever the policy's padding side
        weights.append(r.reward_model_weight)
    print(f"clap: agent-rloo: {len(rows)} states from {len(tasks)} train tasks; {rm_note}")
    cuda, bf16 = torch.cuda.is_available(), base_model.use_bf16(r.bf16)
    args = RLOOConfig(output_dir=str(checkpoints), max_steps=r.max_steps, learning_rate=r.learning_rate,
                      beta=r.beta, num_generations=r.num_generations, temperature=r.temperature,
                      max_completion_length=a.turn_tokens, reward_weights=weights,
                      per_device_train_batch_size=r.num_generations * r.states_per_step,
                      logging_steps=r.logging_steps, save_steps=r.save_steps, save_total_limit=2, report_to=[],
                      seed=t.seed, bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0,
                      gradient_checkpointing=r.gradient_checkpointing)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    trainer = shared_prefix.SharedPrefixRLOOTrainer(model=model, args=args, train_dataset=build_dataset(tok, rows),
                                      processing_class=tok, reward_funcs=funcs,
                                      callbacks=[*(callbacks or []), guard])
    resume = resume_point(checkpoints, {"cfg": r, "turn_tokens": a.turn_tokens, "weights": a.rewards.weights,
                                        "seed": t.seed, "start": start_sha, "tasks": [x["task_id"] for x in tasks],
                                        "base": base_identity, "reward_model": rm_expected if use_rm else None})
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"tasks": len(tasks), "states": len(rows), "resumed_from": resume, "beta": r.beta,
                   "start_adapter_sha256": start_sha, "reward_model": rm_note, "bf16": bf16}, started, start_adapter)


def main(call: Call) -> dict:
    """`clap train agent-rloo`: `agent` (its `rloo` dose), `train`'s seed and guards, `data.batches`, the
    tasks and the assets, the agent SFT adapter (--start) and the reward model, each checked against its pins."""
    args, kwargs = agent_rl_arguments(SPEC, call)
    return run(*args, **kwargs)


SPEC = TrainerSpec(name="agent_rloo", chain=AGENT, section="agent.rloo", signals=guards.POLICY_GRADIENT, main=main,
                   switches=("agent.enabled", "agent.rloo.enabled"),
                   inputs=AGENT_RL_INPUTS, continues="agent_sft", optional=AGENT_RL_OPTIONAL,
                   curves=("kl", "reward", "reward_std", "completions/clipped_ratio"),
                   task_tag="tool-calling-agent")
