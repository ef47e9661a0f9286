"""`clap serve` under load with hostile requests mixed in (slow suite; loopback only, bounded in count and time):
every well-formed request is answered, every hostile one is refused with a 400 before it reaches the engine, the
server stays up and healthy, and its memory stays bounded. Prints the figures the closing note reports."""

import resource
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.helpers.http_server import get, post, running
from tests.serve.test_app import MODELS, chat, schema_format

from clap.serve.app import create_app

pytestmark = pytest.mark.slow

GOOD = 40
HOSTILE = [
    {"model": "base", "messages": [{"role": "user", "content": "word " * 40_000}]},           # 200,000 characters
    {"model": "base", "messages": [{"role": "user", "content": "word " * 900}], "max_tokens": 256},  # past the context
    {"model": "base", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
     "json_schema": {"schema": {"type": "string", "enum": [f"v{i}" for i in range(100_000)]}}}},
    {"model": "base", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 9},
]


@pytest.fixture(scope="module")
def engine(tiny_dir, sft_start):
    from clap.evaluate.generate import Engine

    adapter, manifest = sft_start
    return Engine(tiny_dir, adapter, manifest)


def test_the_server_answers_everyone_else_while_hostile_requests_are_refused(engine):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    app = create_app(engine, MODELS, max_tokens_cap=512, max_batch=8)
    bodies = [(chat(f"Question {i}?") | ({"response_format": schema_format()} if i % 2 else {}), True)
              for i in range(GOOD)]
    for i, body in enumerate(HOSTILE * 3):
        bodies.insert(i * 4, (body, False))
    with running(app) as url, ThreadPoolExecutor(16) as pool:
        def send(item):
            body, good = item
            started = time.perf_counter()
            status, reply = post(f"{url}/v1/chat/completions", body)
            return good, status, reply, time.perf_counter() - started

        results = list(pool.map(send, bodies))
        health = get(f"{url}/health")
    good = [r for r in results if r[0]]
    hostile = [r for r in results if not r[0]]
    assert all(status == 200 for _, status, _, _ in good), [r[2] for r in good if r[1] != 200][:2]
    assert all(status == 400 and "error" in reply for _, status, reply, _ in hostile)
    assert health["status"] == "ok"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    longest = max(t for *_, t in good)
    print(f"\nserve load: {len(good)} answered, {len(hostile)} hostile refused (400), longest latency {longest:.1f} s, "
          f"peak RSS {peak_mb:.0f} MB (before {rss_before / 1024:.0f} MB)")
    assert max(t for *_, t in hostile) < 30  # refused up front, never queued behind the decode
