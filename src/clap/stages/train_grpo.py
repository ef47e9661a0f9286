"""train grpo: the chain's RL step — GRPO on the admitted decision prompts, starting from the SFT adapter.

    clap train grpo            (DVC stage `train_grpo`, writes models/grpo/; re-runs when models/sft changes)

The policy is the SFT adapter loaded trainable through the serving check; TRL keeps a frozen copy
as the "ref" adapter, so the KL term measures drift from the SFT policy. The reward is the decision
reward's parts (`rewards.decision_parts`: outcome, format, grounding, efficiency) as four reward
functions weighted by `rewards.weights`, so TRL logs each part beside the total.

The paper used GRPO as a failure-boundary probe: static admission passed, yet KL peaked at
168–6712 at runtime. So the KL coefficient is non-zero by default (the KL guard needs the signal and
fails closed without it), and the guard watches KL level and spikes, reward collapse and clipped
completions. A held GRPO run is evidence for the gate, not a failure of the pipeline.

With `train.grpo.constrained_rollouts` (and `generate.constrained`) every rollout is sampled under its
case's decision schema — the action one of the playbook's (`evaluate_decisions.action_playbook`), the
cause one of the case's cause fields, the risk focus one of the contract's — through xgrammar, as the
application decodes (TRL's `vllm_structured_outputs_regex` does the same on vLLM; here it is a TRL
`rollout_func` over the trainer's own model). Free sampling of a 135M policy never writes a playbook
action verbatim, so the reward's outcome part gives no signal; under the grammar it can.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.config import Rewards, Train
from clap.data.playbook import playbook
from clap.domain.prompts import SYSTEM_DECIDE, decision_cause_fields, messages
from clap.evaluate.decoding import GrammarCache, decision_schema
from clap.evaluate.generate import sample_under_grammar
from clap.integrity import pinned_expectation
from clap.train import guards
from clap.train.common import admitted_rows, finish, resume_point, run_training, start_from
from clap.train.rewards import decision_parts
from clap.train.spec import EXTRACTION, Call, TrainerSpec

REWARD_PARTS = ("outcome", "format", "grounding", "efficiency")


def build_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": messages(SYSTEM_DECIDE, r["prompt"]), "reference_json": r["reference_json"]}
                              for r in rows])


def part_reward(part: str, max_chars: int):
    """One part of the decision reward as a TRL reward function (logged as rewards/<part>/mean)."""
    def reward(completions, reference_json, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [decision_parts(t, json.loads(r), max_chars)[part] for t, r in zip(texts, reference_json)]
    reward.__name__ = part
    return reward


def constrained_rollout(grammars: GrammarCache, actions: list[str] | None, max_new_tokens: int, temperature: float):
    """A TRL `rollout_func`: one sampled completion per prompt of the (already repeated) slice, each under
    its case's decision schema, in the engine's grammar loop (`sample_under_grammar`: rows leave as they close);
    a closed completion ends with the end-of-turn token, as TRL's own masking cuts it, a cut one does not.
    Log-probabilities are left to TRL (`logprobs: None`: it scores the completions itself)."""
    import torch

    def rollout(prompts: list, trainer) -> dict:
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        encoded = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
                   for p in prompts]
        compiled = [grammars.compiled(decision_schema(decision_cause_fields(p[-1]["content"]), actions)) for p in prompts]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                rows = sample_under_grammar(model, encoded, compiled, max_new_tokens, temperature, tok.pad_token_id)
        finally:
            model.train(was_training)
        completions = [row + [tok.eos_token_id] if closed else row for row, closed in rows]
        return {"prompt_ids": encoded, "completion_ids": completions, "logprobs": None}

    return rollout


def run(train: Train, materialized: Path, admission: Path, batches: list[str], base_dir: Path, out: Path,
        checkpoints: Path, start_adapter: Path, start_expected: dict, callbacks: list | None = None,
        reward_funcs: list | None = None, *, rewards: Rewards, constrained: bool, action_playbook: bool) -> dict:
    """`start_adapter`/`start_expected`: the SFT adapter and the manifest git pins for it;
    `reward_funcs` replaces the decision reward (tests use one a random model can vary); `constrained`
    (`generate.constrained`) lets `train.grpo.constrained_rollouts` sample under the decision schema, and
    `action_playbook` (`evaluate_decisions.action_playbook`) narrows it to the playbook's actions."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    started = time.time()
    g, t, r = train.grpo, train, rewards
    rows, refused = admitted_rows(materialized, admission, batches, "grpo", "grpo_groups.jsonl")
    tok = base_model.load_tokenizer(base_dir)
    tok.padding_side = "left"
    base_identity = base_model.identity(base_dir)  # hashes the weights: once per run
    model, start_sha = start_from(base_dir, start_adapter, start_expected, base_identity)
    cuda = torch.cuda.is_available()
    funcs = reward_funcs or [part_reward(p, r.max_chars) for p in REWARD_PARTS]
    args = GRPOConfig(output_dir=str(checkpoints), max_steps=g.max_steps, learning_rate=g.learning_rate,
                      beta=g.beta, num_generations=g.num_generations, temperature=g.temperature,
                      max_completion_length=g.max_completion_length,
                      reward_weights=None if reward_funcs else [getattr(r.weights, p) for p in REWARD_PARTS],
                      per_device_train_batch_size=g.per_device_batch_size, logging_steps=g.logging_steps,
                      save_steps=g.save_steps, save_total_limit=2, report_to=[], seed=t.seed,
                      bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda, dataloader_num_workers=0)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    constrained = g.constrained_rollouts and constrained
    actions = playbook({b: Path(materialized) / b / "decision_eval.jsonl" for b in batches}) \
        if constrained and action_playbook else None
    rollout = constrained_rollout(GrammarCache(tok, model.config.vocab_size), actions, g.max_completion_length,
                                  g.temperature) if constrained else None
    trainer = GRPOTrainer(model=model, args=args, train_dataset=build_dataset(rows), processing_class=tok,
                          reward_funcs=funcs, callbacks=[*(callbacks or []), guard], rollout_func=rollout)
    resume = resume_point(checkpoints, {"cfg": g, "seed": t.seed, "start": start_sha, "rows": rows,
                                        "rewards": r, "base": base_identity, "actions": actions,
                                        "constrained": constrained})
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"groups": len(rows), "batches_refused": refused, "resumed_from": resume, "beta": g.beta,
                   "start_adapter_sha256": start_sha, "constrained_rollouts": constrained,
                   "playbook_actions": len(actions) if actions else None}, started, start_adapter)


def main(call: Call) -> dict:
    """`clap train grpo`: `train` (its `grpo` section, seed and guards), `rewards`, `generate.constrained` and
    `evaluate_decisions.action_playbook`, the admitted batches, the SFT adapter (--start) checked against its pins."""
    p, start = call.params, SPEC.start_adapter(call.start)
    return run(p.train, call.materialized, call.admission, list(call.batches), call.base, call.out, call.checkpoints,
               start_adapter=start, start_expected=pinned_expectation(Path("."), start), callbacks=call.callbacks,
               rewards=p.rewards, constrained=p.generate.constrained,
               action_playbook=p.evaluate_decisions.action_playbook)


SPEC = TrainerSpec(name="grpo", chain=EXTRACTION, section="train.grpo", signals=guards.POLICY_GRADIENT, main=main,
                   switches=("train.grpo.enabled",), reads_batches=True, continues="sft",
                   curves=("kl", "reward", "reward_std", "rewards/outcome/mean", "rewards/grounding/mean",
                           "completions/clipped_ratio"))
