"""The agent reward model's held-out check: `reward_model.state_scores` (each pair's state read once, its
actions scored on copies of the state's KV) beside `reward_model.scores` over every whole text (the stage's
path until 2026-12-03), same pairs, same trained reward model, same run.

    .venv/bin/python benchmarks/bench_rm_scores.py [--pairs N] [--bf16] [--out figures.json]

Run in a checkout after `dvc repro train_agent_rm` (the reward model, pinned by `dvc.lock`, and
`data/agent_pairs/pairs.jsonl`). Prints seconds, prompt tokens read, and the largest score difference and
the agreement with the rule rewards of both paths. `--bf16` adds both paths again under CPU bf16 autocast,
to see what a lower precision would change in the agreement. Run it alone: two torch jobs on two cores slow
each other down ~5×.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch

from clap import model as base_model
from clap.agent import reward_model, scoring
from clap.integrity import pinned_expectation
from clap.io import read_jsonl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    ap.add_argument("--bf16", action="store_true", help="also time both paths under bf16 autocast")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    root, base_dir, rm_dir = Path("."), Path("models/base"), Path("models/agent_rm/adapter")
    pairs = read_jsonl(Path("data/agent_pairs/pairs.jsonl"))
    pairs = pairs[:args.pairs] if args.pairs else pairs
    tok = base_model.load_tokenizer(base_dir)
    model = reward_model.load(base_dir, rm_dir, pinned_expectation(root, rm_dir), base_model.identity(base_dir))
    states = [reward_model.state_text(tok, p["prompt_messages"]) for p in pairs]
    actions = [p["chosen"] + tok.eos_token for p in pairs] + [p["rejected"] + tok.eos_token for p in pairs]
    texts = [s + a for s, a in zip(states + states, actions)]
    whole_tokens = sum(len(tok(t, add_special_tokens=False).input_ids) for t in texts)
    state_tokens = {s: len(tok(s, add_special_tokens=False).input_ids) for s in set(states)}
    shared_tokens = sum(state_tokens.values()) + sum(len(tok(s + a, add_special_tokens=False).input_ids) - state_tokens[s]
                                                     for s, a in set(zip(states + states, actions)))
    reasons = [p["reason"] for p in pairs]
    runs = {}
    for precision in ("fp32", "bf16") if args.bf16 else ("fp32",):
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext())
        for name, score in (("whole texts (peer)", lambda: reward_model.scores(model, tok, texts)),
                            ("state read once (clap)", lambda: reward_model.state_scores(model, tok, states + states,
                                                                                         actions))):
            with autocast:
                t0 = time.perf_counter()
                got = score()
                seconds = time.perf_counter() - t0
            check = scoring.pairwise_agreement(got[:len(pairs)], got[len(pairs):], reasons)
            runs[f"{name}, {precision}"] = {"seconds": round(seconds, 1), "scores": got,
                                            "agreement": check["agreement"]}
    reference = runs["whole texts (peer), fp32"]["scores"]
    print(f"{len(pairs)} pairs, {len(set(states))} distinct states; tokens read: whole texts {whole_tokens}, "
          f"state read once {shared_tokens} ({whole_tokens / shared_tokens:.2f}x fewer)")
    print(f"{'path':<34}{'seconds':>9}{'agreement':>11}{'max |Δ score| vs peer fp32':>28}")
    for name, r in runs.items():
        delta = max(abs(a - b) for a, b in zip(r["scores"], reference))
        r["max_abs_delta_vs_peer_fp32"] = delta
        print(f"{name:<34}{r['seconds']:>9.1f}{r['agreement']:>11.4f}{delta:>28.2e}")
    peer, clap = runs["whole texts (peer), fp32"]["seconds"], runs["state read once (clap), fp32"]["seconds"]
    print(f"speed-up, fp32: {peer / clap:.2f}x")
    if args.out is None:
        return
    out = {"pairs": len(pairs), "distinct_states": len(set(states)), "tokens_whole": whole_tokens,
           "tokens_shared": shared_tokens, "runs": {k: {x: y for x, y in v.items() if x != "scores"}
                                                    for k, v in runs.items()}}
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
