"""Runtime guards (docs/design.md §5), shared by the SFT, DPO and GRPO trainers as one TrainerCallback.

`check` is the pure rule: given the history of logged values and the new log, it returns the rule
that trips (or None). A signal that a trainer must provide but did not log fails closed.
The callback stops training on the logging step that trips, remembers the last checkpoint saved
before it (the last good one) and writes `guard_report.json`.
"""

from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path

from clap.config import Guards
from clap.domain.contracts import GuardReport, GuardTrip
from clap.io import write_json

# The signal sets a trainer's spec (`clap.train.spec.TrainerSpec.signals`) picks from: guard signal → the logged key
# the trainer must provide; a missing one trips `signal_missing:<key>`.
LOSS = {"loss": "loss"}
PREFERENCE = {"loss": "loss", "margin": "rewards/margins"}
POLICY_GRADIENT = {"loss": "loss", "kl": "kl", "reward": "reward", "reward_std": "reward_std",
                   "clipped": "completions/clipped_ratio"}


def check(signals: dict[str, str], history: dict[str, list[float]], log: dict, cfg: Guards) -> GuardTrip | None:
    """The first rule the new log violates, or None. `signals`: the trainer's (`LOSS`, `PREFERENCE`,
    `POLICY_GRADIENT`); `history` holds earlier values per signal."""
    step = int(log.get("step", 0))
    for key in signals.values():
        if key not in log:
            return GuardTrip(rule=f"signal_missing:{key}", step=step, value=None, threshold=None)
        v = float(log[key])
        if not math.isfinite(v):
            return GuardTrip(rule=f"non_finite:{key}", step=step, value=None, threshold=None)
    if "kl" in signals:
        kl = float(log["kl"])
        if kl > cfg.kl_max:
            return GuardTrip(rule="kl_above_max", step=step, value=kl, threshold=cfg.kl_max)
        past = history.get("kl", [])[-cfg.kl_window:]
        if len(past) >= 2:
            avg = statistics.fmean(past)
            if kl >= cfg.kl_spike_min and avg > 1e-6 and kl > cfg.kl_spike_ratio * avg:
                return GuardTrip(rule="kl_spike", step=step, value=kl, threshold=cfg.kl_spike_ratio * avg)
    if "reward_std" in signals:
        recent = history.get("reward_std", [])[-(cfg.collapse_patience - 1):] + [float(log["reward_std"])]
        if len(recent) >= cfg.collapse_patience and max(recent) <= cfg.reward_collapse_std:
            return GuardTrip(rule="reward_collapse", step=step, value=max(recent), threshold=cfg.reward_collapse_std)
    if "clipped" in signals:
        clipped = float(log["completions/clipped_ratio"])
        if clipped > cfg.max_clipped_ratio:
            return GuardTrip(rule="completion_length_clipped", step=step, value=clipped,
                             threshold=cfg.max_clipped_ratio)
    return None


class Guard:
    """The guards' state over one run, fed by the trainer's log through transformers' callback hooks
    (`guard_callback` adds the rest of the protocol)."""

    def __init__(self, trainer: str, signals: dict[str, str], cfg: Guards, report_path: Path):
        self.trainer, self.signals, self.cfg, self.report_path = trainer, signals, cfg, Path(report_path)
        self.history: dict[str, list[float]] = {}
        self.trip: GuardTrip | None = None
        self.last_good: str | None = None
        self.steps = 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if "train_loss" in logs or self.trip is not None:
            return
        logs["step"] = state.global_step
        self.steps = state.global_step
        self.trip = check(self.signals, self.history, logs, self.cfg)
        for signal, key in self.signals.items():
            if key in logs:
                self.history.setdefault(signal, []).append(float(logs[key]))
        if self.trip is not None:
            control.should_training_stop = True
            control.should_save = False

    def on_save(self, args, state, control, **kwargs):
        if self.trip is None:
            self.last_good = str(Path(args.output_dir) / f"checkpoint-{state.global_step}")

    def on_step_end(self, args, state, control, **kwargs):
        if self.trip is not None:
            control.should_training_stop = True
            control.should_save = False

    def report(self) -> GuardReport:
        peaks = {s: (max(v, key=abs) if v else None) for s, v in self.history.items()}
        for s in self.signals:
            peaks.setdefault(s, None)
        return GuardReport(trainer=self.trainer, status="stopped" if self.trip else "ok", trip=self.trip,
                           peaks=peaks, last_good_checkpoint=self.last_good, steps=self.steps)

    def write(self) -> GuardReport:
        rep = self.report()
        write_json(self.report_path, rep.model_dump())
        return rep


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback

    return type("GuardCallback", (Guard, TrainerCallback), {})


def guard_callback(trainer: str, signals: dict[str, str], cfg: Guards, report_path: Path) -> Guard:
    """The guard as a transformers `TrainerCallback`. Its class is made on first use: importing transformers'
    trainer imports torch (seconds), which a switched-off stage and the registry of trainers must not pay."""
    return _callback_class()(trainer, signals, cfg, report_path)
