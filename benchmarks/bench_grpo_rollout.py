"""GRPO's constrained rollouts: the stage's `rollout_func` (`train_grpo.constrained_rollout`, sampling in the engine's
grammar loop: rows leave as their decision closes, the KV cache grows in place) beside the path it replaced —
`generate(do_sample=True)` with xgrammar's logits processor, the whole slice in one call, rows kept to the longest.

    .venv/bin/python benchmarks/bench_grpo_rollout.py [--prompts 8] [--generations 4] [--repeat 2]

Run in a checkout after `dvc repro train_sft` (the SFT adapter GRPO continues, pinned by `dvc.lock`): the policy is
that adapter, loaded trainable as the stage loads it, in fp32 as the stage trains on CPU; the prompts are the first
decision groups of `data/materialized/*/grpo_groups.jsonl`, each repeated `--generations` times as GRPO repeats them.
Draws differ between the paths, so it prints what the completions are — tokens, share that close before
`train.grpo.max_completion_length`, share that parse as a decision with a playbook action — beside the seconds.
Each path runs `--repeat` times from `torch.manual_seed(0)`, alternating. Run it alone: two torch jobs on two cores
slow each other down ~5×.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import LogitsProcessorList

from clap import model as base_model
from clap.config import load
from clap.data.playbook import playbook
from clap.domain.prompts import SYSTEM_DECIDE, decision_cause_fields, messages
from clap.evaluate.decoding import GrammarCache, decision_schema
from clap.integrity import pinned_expectation
from clap.stages.train_grpo import constrained_rollout
from clap.train.common import admitted_rows, start_from


def generate_rollout(grammars: GrammarCache, actions: list[str] | None, max_new_tokens: int, temperature: float):
    """The peer: the stage's rollout until 2026-12-03 — one `generate(do_sample=True)` call under xgrammar's processor."""
    def rollout(prompts: list, trainer) -> dict:
        tok, model = trainer.processing_class, trainer.model
        encoded = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
                   for p in prompts]
        schemas = [decision_schema(decision_cause_fields(p[-1]["content"]), actions) for p in prompts]
        width, pad = max(map(len, encoded)), tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True,
                                 temperature=temperature, pad_token_id=pad, eos_token_id=[tok.eos_token_id],
                                 logits_processor=LogitsProcessorList([grammars.processor(schemas)]))
        completions = []
        for row in out[:, width:].tolist():
            end = next((i for i, t in enumerate(row) if t == tok.eos_token_id), None)
            completions.append(row if end is None else row[:end + 1])
        return {"prompt_ids": encoded, "completion_ids": completions, "logprobs": None}
    return rollout


def describe(tok, completions: list[list[int]], actions: list[str] | None, cap: int) -> dict:
    parsed = 0
    for c in completions:
        try:
            decision = json.loads(tok.decode(c, skip_special_tokens=True))
            parsed += actions is None or decision.get("action") in actions
        except (json.JSONDecodeError, AttributeError):
            pass
    n = len(completions)
    return {"tokens": sum(map(len, completions)), "closed": round(sum(len(c) < cap or c[-1] == tok.eos_token_id
                                                                     for c in completions) / n, 3),
            "decisions_parsed": round(parsed / n, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=4, help="completions per prompt (train.grpo.num_generations)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    params = load(Path("params.yaml"))
    g = params.train.grpo
    batches = params.data.batches
    rows, _ = admitted_rows(Path("data/materialized"), Path("data/admission"), batches, "grpo", "grpo_groups.jsonl")
    prompts = [messages(SYSTEM_DECIDE, r["prompt"]) for r in rows[:args.prompts] for _ in range(args.generations)]
    base_dir = base_model.resolve(params.model)
    adapter = Path("models/sft/adapter")
    tok = base_model.load_tokenizer(base_dir)
    tok.padding_side = "left"
    model, _ = start_from(base_dir, adapter, pinned_expectation(Path("."), adapter), base_model.identity(base_dir))
    grammars = GrammarCache(tok, model.config.vocab_size)
    actions = playbook({b: Path("data/materialized") / b / "decision_eval.jsonl" for b in batches})
    trainer = SimpleNamespace(processing_class=tok, model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                              eos_token_ids=[tok.eos_token_id])
    paths = {"generate_sampled": generate_rollout(grammars, actions, g.max_completion_length, g.temperature),
             "loop_sampled": constrained_rollout(grammars, actions, g.max_completion_length, g.temperature)}
    runs: dict[str, list] = {name: [] for name in paths}
    for _ in range(args.repeat):
        for name, rollout in paths.items():
            torch.manual_seed(0)
            t = time.perf_counter()
            out = rollout(prompts, trainer)
            runs[name].append((time.perf_counter() - t, out["completion_ids"]))
    report = {"completions": len(prompts), "max_completion_length": g.max_completion_length,
              "temperature": g.temperature}
    for name, results in runs.items():
        seconds = [s for s, _ in results]
        tokens = sum(len(c) for _, cs in results for c in cs)
        report[name] = {"s": [round(s, 1) for s in seconds], "tokens_s": round(tokens / sum(seconds), 1),
                        **describe(tok, [c for _, cs in results for c in cs], actions, g.max_completion_length)}
    report["speedup_tokens_s"] = round(report["loop_sampled"]["tokens_s"] / report["generate_sampled"]["tokens_s"], 2)
    report["speedup_s"] = round(sum(report["generate_sampled"]["s"]) / sum(report["loop_sampled"]["s"]), 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
