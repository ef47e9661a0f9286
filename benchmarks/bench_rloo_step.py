"""Agent RLOO step time: `clap train agent-rloo`'s trainer beside TRL's own `RLOOTrainer`, same stage, same data.

    cd <a round's workspace: params.yaml, data/agent, data/assets, models/base, models/agent_sft>
    PYTHONPATH=<repo>/src python <repo>/benchmarks/bench_rloo_step.py [--steps 2] [--repeats 2]

All run the `train_agent_rloo` stage (`clap.stages.train_agent_rloo.run`) for `--steps` steps from the same agent
SFT adapter with the committed `agent.rloo` settings. `clap` is the stage as committed: the project's
`SharedPrefixRLOOTrainer` (each state's prompt run once for its `num_generations` actions,
`clap.train.shared_prefix`), without gradient checkpointing. `trl` swaps in TRL's own `RLOOTrainer` with TRL's
default gradient checkpointing, as a user of TRL runs it; `trl_no_checkpointing` is TRL's trainer without it, so
the two savings (no recomputation, each prompt once) show apart. Each run is its own process, the three alternate
`--repeats` times (this VM's speed drifts), and a step's seconds come from the trainer's step callbacks, so loading
and set-up are counted apart; `parts_s_per_step` splits them (`time_parts`). The first step samples the same
actions in all three (same seed, same policy): its logged KL, reward and loss side by side show they compute the
same step up to dropout and bf16 rounding. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAINERS = ("clap", "trl", "trl_no_checkpointing")


def time_parts(trainer_class) -> dict:
    """Seconds spent in the step's parts, summed over the run: sampling the actions, the log-probability forwards
    without gradients (the policy before the update and the reference) and with them (the update, whose backward
    is the rest of `training_step`)."""
    import functools

    import torch

    spent = {"sampling": 0.0, "logps_no_grad": 0.0, "logps_update": 0.0, "training_step": 0.0}

    def timed(name, label=None):
        f = getattr(trainer_class, name)

        @functools.wraps(f)
        def wrapper(self, *a, **k):
            t = time.perf_counter()
            try:
                return f(self, *a, **k)
            finally:
                key = label(torch.is_grad_enabled()) if callable(label) else label or name
                spent[key] += time.perf_counter() - t
        setattr(trainer_class, name, wrapper)

    timed("_generate_single_turn", "sampling")
    timed("_get_per_token_logps_and_entropies", lambda grad: "logps_update" if grad else "logps_no_grad")
    timed("training_step")
    return spent


def one(which: str, steps: int) -> dict:
    from transformers import TrainerCallback

    from clap import paths
    from clap.config import load
    from clap.integrity import pinned_expectation
    from clap.stages import train_agent_rloo
    from clap.train import shared_prefix

    if which.startswith("trl"):  # this process only: the same stage with TRL's own trainer (the stage imports
        from trl import RLOOTrainer  # its trainer from `clap.train.shared_prefix` when it runs)

        shared_prefix.SharedPrefixRLOOTrainer = RLOOTrainer
    parts = time_parts(shared_prefix.SharedPrefixRLOOTrainer)

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.seconds, self.logs, self._t = [], [], None

        def on_step_begin(self, *_, **__):
            self._t = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self._t)

        def on_log(self, args, state, control, logs=None, **_):
            self.logs.append({k: logs[k] for k in ("kl", "reward", "loss", "num_tokens") if k in (logs or {})})

    cfg = load(Path("params.yaml"))
    cfg.agent.rloo = cfg.agent.rloo.model_copy(update=dict(max_steps=steps, save_steps=10_000,
                                                           gradient_checkpointing=which == "trl"))
    start = paths.adapter("agent_sft")
    timer = StepTimes()
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        train_agent_rloo.run(cfg.agent, paths.AGENT_TASKS, paths.ASSETS, Path("models/base"), Path(tmp) / "out",
                             Path(tmp) / "ckpt", start, pinned_expectation(Path("."), start), callbacks=[timer],
                             train=cfg.train, batches=cfg.data.batches)
    wall = time.perf_counter() - t
    return {"step_s": [round(s, 1) for s in timer.seconds], "setup_s": round(wall - sum(timer.seconds), 1),
            "parts_s_per_step": {k: round(v / max(len(timer.seconds), 1), 1) for k, v in parts.items()},
            "first_step": timer.logs[0] if timer.logs else None,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", choices=TRAINERS, help="run one trainer in this process (used internally)")
    args = ap.parse_args()
    if args.only:
        print("RESULT " + json.dumps(one(args.only, args.steps)))
        return
    runs = {which: [] for which in TRAINERS}
    for _ in range(args.repeats):
        for which in TRAINERS:
            done = subprocess.run([sys.executable, __file__, "--only", which, "--steps", str(args.steps)],
                                  capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{which}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            runs[which].append(json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))[7:]))
            print(which, json.dumps(runs[which][-1]), flush=True)
    summary = {which: {"median_step_s": statistics.median(s for r in rs for s in r["step_s"]),
                       "median_setup_s": statistics.median(r["setup_s"] for r in rs),
                       "peak_rss_mb": max(r["peak_rss_mb"] for r in rs), "first_step": rs[0]["first_step"]}
               for which, rs in runs.items()}
    for peer in TRAINERS[1:]:
        summary[f"step_s_{peer}_over_clap"] = round(summary[peer]["median_step_s"] / summary["clap"]["median_step_s"], 2)
    print(json.dumps({"runs": runs, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
