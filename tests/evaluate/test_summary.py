"""The lines the evaluation stages print (clap.evaluate.summary)."""

import pytest

from clap.evaluate.summary import latency_line


@pytest.mark.parametrize("latency, line", [
    ({"prod": {"n": 4, "reference_p95_ms": 2240.4, "candidate_p95_ms": 2310.0, "p95_ratio": 1.0311, "interleaved": True}},
     "latency vs prod: candidate p95 2,310 ms / 2,240 ms = 1.03 (4 requests, interleaved)"),
    ({"baseline": {"abstained": "no request timed (replay.latency_requests is 0)"}},
     "latency vs baseline: not timed (no request timed (replay.latency_requests is 0))"),
])
def test_latency_line(latency, line):
    assert latency_line(latency) == line
