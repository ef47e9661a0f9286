"""train agent-grpo: the agent chain's RL step — GRPO on whole episodes in the environment, from agent SFT.

    clap train agent-grpo       (DVC stage `train_agent_grpo`, writes models/agent_grpo/)

A rollout is a multi-turn episode: the policy (the agent SFT adapter, loaded trainable through the
serving check; TRL's frozen reference is that same SFT policy, so the KL term measures drift from it)
writes an action, the sandboxed tools (`clap.agent.tools`) answer, and so on until `finish`,
`agent.max_steps` turns or `agent.max_new_tokens` tokens — every turn sampled under the action grammar
when `generate.constrained` is on, as evaluation and serving decode. The completion TRL trains on is the
conversation after the question, rendered by the tool-calling template; `env_mask` marks the agent's
own tokens (1) apart from the tool returns and the template's turn headers (0), so the policy loss and
the KL count only what the policy wrote. The reward is the agent's composite reward
(`clap.agent.rewards.parts`: outcome, format, process, efficiency) as four reward functions weighted by
`agent.rewards.weights`, so TRL logs each part beside the total and the guards watch KL, reward
std and clipped turns as for the extraction chain's GRPO. A fifth reward, weighted by
`agent.grpo.reward_model_weight`, is the learned reward model's episode score (`clap train agent-rm`:
the mean over turns of sigmoid(score), a learned process reward) — used only when that model's
agreement with the rule rewards on held-out pairs and its check against people's labels passed; the metrics
say whether it was.

Why a `rollout_func` and not TRL 1.16's `tools=` / `environment_factory=`: TRL finds tool calls with the
tokenizer's response template, which SmolLM2's chat template does not have and CLAP's action format (the
whole turn is one JSON object {"thought", "tool", "arguments"}) would not match; TRL's own loop also
cannot put a grammar on each turn. The rollout function runs `clap.agent.episode.rollout` — the loop
evaluation uses — over the trainer's model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.agent import chat, reward_model, rewards
from clap.agent.tasks import load
from clap.agent.tools import ReportTools
from clap.agent.trl_rollout import episode_rollout
from clap.config import Agent, Train
from clap.data.admission import NotAdmitted
from clap.evaluate.decoding import GrammarCache
from clap.train import guards
from clap.train.common import finish, resume_point, run_training, start_from
from clap.train.spec import AGENT, AGENT_RL_INPUTS, AGENT_RL_OPTIONAL, Call, TrainerSpec, agent_rl_arguments

REWARD_PARTS = ("outcome", "format", "process", "efficiency")


def build_dataset(tasks: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": chat.start(t["question"]), "task_json": json.dumps(t, ensure_ascii=False)}
                              for t in tasks])


def part_reward(part: str, per_extra_call: float):
    """One part of the agent reward as a TRL reward function (logged as rewards/<part>/mean), computed
    from the episode the rollout function returned beside each completion."""
    def reward(completions, episode, task_json, **_):
        return [rewards.parts(ep, json.loads(t), per_extra_call)[part] for ep, t in zip(episode, task_json)]
    reward.__name__ = part
    return reward


def learned_reward(model, tok):
    """The reward model's episode score as a TRL reward function (logged as rewards/reward_model/mean)."""
    def reward_model_score(completions, episode, **_):
        return [reward_model.episode_reward(model, tok, ep["messages"], ep["steps"]) for ep in episode]
    reward_model_score.__name__ = "reward_model"
    return reward_model_score


def run(agent: Agent, tasks_dir: Path, assets: Path, base_dir: Path, out: Path, checkpoints: Path, start_adapter: Path,
        start_expected: dict, callbacks: list | None = None, rm_dir: Path | None = None,
        rm_expected: dict | None = None, rm_check: Path | None = None, *, train: Train, batches: list[str],
        constrained: bool) -> dict:
    """`start_adapter`/`start_expected`: the agent SFT adapter and the manifest git pins for it; `rm_dir`/
    `rm_expected`: the reward model's folder (models/agent_rm) and the manifest git pins for its adapter;
    `rm_check`: its verdict (data/agent_rm_check, `clap agent-rm-check`). `agent`: the `grpo` dose, episode limits
    and rewards; `train`: seed and guards; `batches`: the tools' data (`data.batches`); `constrained`: actions
    sampled under the action grammar (`generate.constrained`)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    started = time.time()
    a, g, t = agent, agent.grpo, train
    tasks = load(tasks_dir, "train")
    if not tasks:
        raise NotAdmitted(f"agent-grpo: no train task in {tasks_dir}")
    tools = ReportTools.over_batches(assets, batches)
    tok = base_model.load_tokenizer(base_dir)
    tok.padding_side = "left"
    base_identity = base_model.identity(base_dir)
    model, start_sha = start_from(base_dir, start_adapter, start_expected, base_identity)
    cuda, bf16 = torch.cuda.is_available(), base_model.use_bf16(g.bf16)
    weights = a.rewards.weights
    funcs = [part_reward(p, a.rewards.per_extra_call) for p in REWARD_PARTS]
    func_weights = [getattr(weights, p) for p in REWARD_PARTS]
    use_rm, rm_note = reward_model.reward_model_use(g.reward_model_weight, rm_check)
    if use_rm:
        funcs.append(learned_reward(reward_model.load(base_dir, Path(rm_dir) / "adapter", rm_expected, base_identity),
                                    tok))  # scores() pads right whatever the policy's padding side
        func_weights.append(g.reward_model_weight)
    print(f"clap: agent-grpo: {rm_note}")
    args = GRPOConfig(output_dir=str(checkpoints), max_steps=g.max_steps, learning_rate=g.learning_rate,
                      beta=g.beta, num_generations=g.num_generations, temperature=g.temperature,
                      max_completion_length=a.max_new_tokens, reward_weights=func_weights,
                      per_device_train_batch_size=g.num_generations, logging_steps=g.logging_steps,
                      save_steps=g.save_steps, save_total_limit=2, report_to=[], seed=t.seed,
                      bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    grammars = GrammarCache(tok, model.config.vocab_size) if constrained else None
    schema = chat.action_schema(tools.schemas) if constrained else None
    trainer = GRPOTrainer(model=model, args=args, train_dataset=build_dataset(tasks), processing_class=tok,
                          reward_funcs=funcs,
                          callbacks=[*(callbacks or []), guard],
                          rollout_func=episode_rollout(tools, grammars, schema, a, g.temperature))
    resume = resume_point(checkpoints, {"cfg": g, "agent": {k: getattr(a, k) for k in ("max_steps", "max_new_tokens",
                                                                             "turn_tokens", "rewards")},
                                        "seed": t.seed, "start": start_sha, "tasks": [x["task_id"] for x in tasks],
                                        "base": base_identity, "constrained": constrained,
                                        "reward_model": rm_expected if use_rm else None})
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"tasks": len(tasks), "resumed_from": resume, "beta": g.beta, "start_adapter_sha256": start_sha,
                   "constrained_rollouts": constrained, "reward_model": rm_note, "bf16": bf16}, started, start_adapter)


def main(call: Call) -> dict:
    """`clap train agent-grpo`: `agent` (its `grpo` dose), `generate.constrained`, `train`'s seed and guards, `data.batches`, the
    tasks and the assets, the agent SFT adapter (--start) and the reward model, each checked against its pins."""
    args, kwargs = agent_rl_arguments(SPEC, call)
    return run(*args, **kwargs, constrained=call.params.generate.constrained)


SPEC = TrainerSpec(name="agent_grpo", chain=AGENT, section="agent.grpo", signals=guards.POLICY_GRADIENT, main=main,
                   switches=("agent.enabled", "agent.grpo.enabled"),
                   inputs=AGENT_RL_INPUTS, continues="agent_sft", optional=AGENT_RL_OPTIONAL,
                   curves=("kl", "reward", "reward_std", "completions/clipped_ratio"),
                   task_tag="tool-calling-agent")
