import math

import pytest

from clap.config import compose, typed
from clap.train.guards import LOSS, POLICY_GRADIENT, PREFERENCE, check

CFG = typed(compose()).train.guards


def grpo_log(step, kl=0.5, reward=0.5, std=0.2, clipped=0.1, loss=0.1):
    return {"step": step, "loss": loss, "kl": kl, "reward": reward, "reward_std": std,
            "completions/clipped_ratio": clipped}


def run(logs, signals=POLICY_GRADIENT):
    history = {}
    for log in logs:
        trip = check(signals, history, log, CFG)
        if trip:
            return trip
        for k, key in {"kl": "kl", "reward_std": "reward_std"}.items():
            if key in log:
                history.setdefault(k, []).append(log[key])
    return None


def test_stable_run_passes():
    assert run([grpo_log(i, kl=0.4 + 0.05 * i) for i in range(1, 10)]) is None


@pytest.mark.parametrize("logs, rule, step", [
    ([grpo_log(1), grpo_log(2), grpo_log(3, kl=168.2)], "kl_above_max", 3),
    ([grpo_log(1, kl=1.0), grpo_log(2, kl=1.2), grpo_log(3, kl=30.0)], "kl_spike", 3),
    ([grpo_log(1, std=0.0), grpo_log(2, std=0.0), grpo_log(3, std=0.0)], "reward_collapse", 3),
    ([grpo_log(1), grpo_log(2, clipped=0.95)], "completion_length_clipped", 2),
    ([grpo_log(1), grpo_log(2, loss=math.nan)], "non_finite:loss", 2),
    ([grpo_log(1), grpo_log(2, kl=math.inf)], "non_finite:kl", 2),
])
def test_rules_trip_at_the_right_step(logs, rule, step):
    trip = run(logs)
    assert trip is not None and trip.rule == rule and trip.step == step


def test_a_tenfold_rise_of_a_tiny_kl_is_not_a_spike():
    """0.0008 → 0.0025 → 0.021: the start of learning (a real constrained GRPO run), below `kl_spike_min`;
    the same ratio at a KL above the floor trips."""
    assert run([grpo_log(1, kl=0.0008), grpo_log(2, kl=0.0025), grpo_log(3, kl=0.021)]) is None
    trip = run([grpo_log(1, kl=0.02), grpo_log(2, kl=0.025), grpo_log(3, kl=0.3)])
    assert trip.rule == "kl_spike" and trip.step == 3


def test_missing_signal_fails_closed():
    log = grpo_log(1)
    del log["kl"]  # e.g. beta = 0: no reference model, no KL logged
    assert run([log]).rule == "signal_missing:kl"
    assert run([{"step": 1, "loss": 0.3}], signals=PREFERENCE).rule == "signal_missing:rewards/margins"


def test_sft_needs_only_a_finite_loss():
    assert run([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}], signals=LOSS) is None
    assert run([{"step": 1, "loss": float("nan")}], signals=LOSS).rule == "non_finite:loss"
