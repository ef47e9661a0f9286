"""The paired timing the gate's latency rule reads (clap.evaluate.latency): which requests, in which order."""

import pytest

from clap.evaluate.latency import paired_latency, spread


@pytest.mark.parametrize("n, k, expected", [
    (10, 5, [0, 2, 4, 6, 8]),
    (10, 4, [0, 2, 5, 7]),       # across the cases: the last batch's are timed too
    (3, 4, [0, 1, 2]),           # fewer requests than asked: each once
    (7, 1, [0]),
    (0, 4, []),
    (5, 0, []),
])
def test_spread_picks_requests_across_the_list(n, k, expected):
    assert spread(n, k) == expected


class Recorder:
    """An engine that records what it was asked to decode (and never reads a store)."""

    def __init__(self):
        self.calls = []

    def generate(self, conversations, use_adapter, max_new_tokens, batch_size, progress, schemas, use_store):
        assert batch_size == 1 and use_store is False and len(conversations) == 1
        self.calls.append((conversations[0][0]["content"], use_adapter, None if schemas is None else schemas[0]))
        return []


def test_each_picked_request_is_decoded_by_both_models_alternating_which_goes_first():
    engine = Recorder()
    convs = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]
    out = paired_latency(engine, convs, [{"s": i} for i in range(6)], "prod", True, requests=3, max_new_tokens=8)
    assert engine.calls == [("q0", "prod", {"s": 0}), ("q0", True, {"s": 0}),
                            ("q2", True, {"s": 2}), ("q2", "prod", {"s": 2}),
                            ("q4", "prod", {"s": 4}), ("q4", True, {"s": 4})]
    assert out["n"] == 3 and out["interleaved"] is True
    assert set(out) == {"n", "reference_p95_ms", "candidate_p95_ms", "p95_ratio", "interleaved"}


@pytest.mark.parametrize("requests, convs, reason", [
    (0, 5, "no request timed (replay.latency_requests is 0)"),
    (4, 0, "no request to time"),
])
def test_nothing_timed_abstains_with_its_reason(requests, convs, reason):
    engine = Recorder()
    out = paired_latency(engine, [[{"role": "user", "content": "q"}]] * convs, None, False, True, requests, 8)
    assert out == {"abstained": reason} and engine.calls == []
