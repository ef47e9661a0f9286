"""`clap serve`'s application on a tiny model with a pinned adapter, through real HTTP on loopback: requests that
arrive together decode in one batch with the answers they get alone; streaming, stop and token limits; a malformed
request is a 4xx with a clear message; a tampered adapter never loads."""

import json
import shutil
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.helpers.http_server import get, post, running
from tests.helpers.namesakes import EQUITY_ROWS, asking, saying

from clap.domain import prompts
from clap.evaluate.decoding import answer_schema
from clap.serve.app import create_app

CHUNK = {"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."}
QUESTIONS = ["Revenue?", "Margin?", "Both?", "Revenue in 2024?", "What was the margin?", "Net profit?"]
MODELS = {"clap-adapter@v0.0.1": True, "base": False}
SCHEMA = answer_schema([CHUNK], with_location=True)


@pytest.fixture(scope="module")
def engine(tiny_dir, sft_start):
    from clap.evaluate.generate import Engine

    adapter, manifest = sft_start
    return Engine(tiny_dir, adapter, manifest)


def chat(question, **extra):
    return {"model": "clap-adapter@v0.0.1", "max_tokens": 24,
            "messages": prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(question, [CHUNK])), **extra}


def schema_format():
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def test_requests_that_arrive_together_decode_in_one_batch_with_the_answers_they_get_alone(engine):
    bodies = [chat(q, response_format=schema_format()) for q in QUESTIONS]
    alone = [g.text for g in engine.generate([b["messages"] for b in bodies], use_adapter=True, max_new_tokens=24,
                                             batch_size=1, progress=False, schemas=[SCHEMA] * len(bodies),
                                             use_store=False)]
    with running(create_app(engine, MODELS, max_batch=8, wait_ms=200)) as url:
        with ThreadPoolExecutor(len(bodies)) as pool:
            replies = list(pool.map(lambda b: post(f"{url}/v1/chat/completions", b), bodies))
        stats = get(f"{url}/v1/stats")
    assert all(status == 200 for status, _ in replies), replies
    assert [r["choices"][0]["message"]["content"] for _, r in replies] == alone
    assert stats["requests"] == len(bodies) and stats["max_batch_seen"] > 1, stats
    first = replies[0][1]
    assert first["object"] == "chat.completion" and first["model"] == "clap-adapter@v0.0.1"
    assert first["usage"]["completion_tokens"] > 0 and first["usage"]["prompt_tokens"] > 20


def test_streaming_stop_limits_models_and_text_completions(engine):
    with running(create_app(engine, MODELS, max_batch=4, wait_ms=1)) as url:
        assert [m["id"] for m in get(f"{url}/v1/models")["data"]] == list(MODELS)
        _, whole = post(f"{url}/v1/chat/completions", chat("Revenue?"))
        text = whole["choices"][0]["message"]["content"]
        req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(chat("Revenue?", stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            assert r.headers.get_content_type() == "text/event-stream"
            events = [line.removeprefix("data: ") for line in r.read().decode().splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert len(chunks) > 3  # token by token, not one chunk at the end
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == text
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]

        asked = chat("Revenue?", stream=True, stream_options={"include_usage": True})
        req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(asked).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            events = [line.removeprefix("data: ") for line in r.read().decode().splitlines() if line.startswith("data: ")]
        last = json.loads(events[-2])  # then [DONE]
        assert last["choices"] == [] and last["usage"] == whole["usage"]  # OpenAI's include_usage chunk

        _, short = post(f"{url}/v1/chat/completions", chat("Revenue?", max_tokens=3))
        assert short["choices"][0]["finish_reason"] == "length" and short["usage"]["completion_tokens"] == 3
        if len(text) > 2:
            stop = text[2:4]
            _, cut = post(f"{url}/v1/chat/completions", chat("Revenue?", stop=[stop]))
            assert cut["choices"][0]["message"]["content"] == text[:text.find(stop)]
            assert cut["choices"][0]["finish_reason"] == "stop"

        status, base = post(f"{url}/v1/chat/completions", chat("Revenue?") | {"model": "base"})
        assert status == 200 and base["model"] == "base"
        status, plain = post(f"{url}/v1/completions", {"model": "base", "prompt": "Revenue was", "max_tokens": 5})
        assert status == 200 and plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] <= 5


def _deep(levels: int) -> dict:
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


DEEP = _deep(200)


@pytest.mark.parametrize("body, raw, status, says", [
    (None, b"{not json", 400, "not JSON"),
    ([1, 2], None, 400, "JSON object"),
    ({"model": "clap-adapter@v0.0.1"}, None, 400, "messages: Field required"),
    ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, None, 404, "model 'nope' is not served here"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "max_tokens": 999999}, None, 400,
     "above this server's limit"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "n": 2}, None, 400, "n: Input should be 1"),
    ({"model": "base", "messages": [{"role": "wizard", "content": "x"}]}, None, 400, "messages.0.role"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "temperature": -1}, None, 400, "temperature"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "no-such-type"}}}}, None, 400,
     "response_format schema"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "max_tokens": 999999}, None, 400,
     "(clap serve --max-tokens-cap)"),
    # hostile sizes, refused before anything is queued or compiled
    ({"model": "base", "messages": [{"role": "user", "content": "word " * 40_000}]}, None, 400,
     "far more than the model's context of 1024 tokens"),
    ({"model": "base", "messages": [{"role": "user", "content": "word " * 900}], "max_tokens": 256}, None, 400,
     "with max_tokens 256 it does not fit the model's context of 1024 tokens"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
      "json_schema": {"schema": {"type": "string", "enum": [f"v{i}" for i in range(100_000)]}}}}, None, 400,
     "more than 50000 nodes"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
      "json_schema": {"schema": DEEP}}}, None, 400, "nested deeper than 24 levels"),
    # OpenAI fields the server does not implement are refused by name, never ignored
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "top_p": 0}, None, 400,
     "top_p: Input should be greater than 0"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5}, None, 400,
     "presence_penalty: not supported by this server"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "stream": True,
      "stream_options": {"include_usage": True, "continuous_usage_stats": True}}, None, 400,
     "stream_options.continuous_usage_stats: Extra inputs are not permitted"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}, None,
     400, "stream_options is only allowed when stream is true"),
    ({"model": "base", "messages": [{"role": "user", "content": "x"}], "logprobs": True}, None, 400, "logprobs"),
])
def test_a_malformed_request_is_a_4xx_with_a_clear_message_never_a_traceback(engine, body, raw, status, says):
    with running(create_app(engine, MODELS, max_tokens_cap=512)) as url:
        got, reply = post(f"{url}/v1/chat/completions", body, raw=raw)
    assert got == status and says in reply["error"]["message"], reply
    assert "Traceback" not in json.dumps(reply)


def test_a_wrong_route_or_method_answers_openais_error_object(engine):
    import urllib.error
    import urllib.request

    with running(create_app(engine, MODELS, max_tokens_cap=512)) as url:
        got, reply = post(f"{url}/v1/embeddings", {"model": "base", "input": "x"})
        assert got == 404 and reply["error"]["type"] == "not_found_error" and "/v1/embeddings" in reply["error"]["message"]
        with pytest.raises(urllib.error.HTTPError) as wrong:
            urllib.request.urlopen(f"{url}/v1/chat/completions", timeout=30)  # a GET
        body = json.loads(wrong.value.read())
        assert wrong.value.code == 405 and body["error"]["message"].startswith("GET /v1/chat/completions")
        got, reply = post(f"{url}/v1/completions", {"model": "base", "prompt": "x",
                                                    "response_format": {"type": "json_object"}})
        assert got == 400 and reply["error"]["param"] == "response_format"


def test_an_adapter_whose_bytes_differ_from_its_pins_is_refused_at_load(tiny_dir, sft_start, tmp_path):
    from clap.evaluate.generate import Engine
    from clap.integrity import AdapterRefused

    adapter, manifest = sft_start
    tampered = tmp_path / "adapter"
    shutil.copytree(adapter, tampered)
    weights = tampered / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(AdapterRefused, match="adapter_model.safetensors: sha256 does not match the evidence"):
        Engine(tiny_dir, tampered, manifest)


def test_clap_serve_refuses_an_adapter_no_pin_covers_in_one_line(sft_start, tmp_path, monkeypatch, params):
    import yaml
    from typer.testing import CliRunner

    from clap.cli import app

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params.as_yaml_dict(), sort_keys=False))
    shutil.copytree(sft_start[0], tmp_path / "models" / "sft" / "adapter")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["serve", "--adapter", "models/sft/adapter"])
    assert r.exit_code != 0 and "not pinned by dvc.lock" in r.output and "Traceback" not in r.output
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    r = CliRunner().invoke(app, ["serve"])
    assert r.exit_code != 0 and "nothing is in prod" in r.output
    r = CliRunner().invoke(app, ["serve", "--agent"])
    assert r.exit_code != 0 and "nothing is in prod" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["serve", "--agent", "--engine", "vllm"])
    assert r.exit_code != 0 and "--agent serves a released agent adapter on the hf engine" in r.output
    r = CliRunner().invoke(app, ["serve", "--base", "--version", "v0.0.1"])
    assert r.exit_code != 0 and "--base serves the base model alone" in r.output


def test_clap_serve_base_needs_no_release(tiny_dir, tmp_path, monkeypatch, params):
    """`clap serve --base` in a folder with nothing released: the base model answers as `base`."""
    import yaml
    from typer.testing import CliRunner

    from clap.cli import app
    from clap.cli import serve as cli_serve

    cfg = params.as_yaml_dict()
    cfg["model"]["base"] = str(tiny_dir)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    served = {}

    def serve_here(_uvicorn, application, host, port):
        with running(application) as url:
            served["models"] = get(f"{url}/v1/models")
            served["answer"] = post(f"{url}/v1/chat/completions", chat("Revenue?") | {"model": "base", "max_tokens": 4})

    monkeypatch.setattr(cli_serve, "_serve_until_stopped", serve_here)
    r = CliRunner().invoke(app, ["serve", "--base"])
    assert r.exit_code == 0 and "serving base" in r.output, r.output
    assert [m["id"] for m in served["models"]["data"]] == ["base"]
    assert served["answer"][0] == 200 and served["answer"][1]["model"] == "base"


class _StuckEngine:
    """An engine whose one batch takes `seconds` (a grammar or a prompt that wedges it)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def generate(self, conversations, use_adapter, **kwargs):
        import time

        from clap.evaluate.generate import Generation

        time.sleep(self.seconds)
        return [Generation(text="ok", new_tokens=1, latency_ms=1.0) for _ in conversations]


def _status(url: str) -> tuple[int, dict]:
    import urllib.error

    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode())


def test_health_reports_an_engine_wedged_on_one_batch_and_recovers():
    import time

    app = create_app(_StuckEngine(3.0), {"m": True}, wedged_after_s=0.5)
    with running(app) as url, ThreadPoolExecutor(1) as pool:
        status, health = _status(f"{url}/health")
        assert status == 200 and health["status"] == "ok"
        answer = pool.submit(post, f"{url}/v1/chat/completions", chat("Revenue?") | {"model": "m"})
        time.sleep(1.5)
        status, health = _status(f"{url}/health")
        assert status == 503 and health["status"] == "wedged" and health["busy_s"] >= 0.5, health
        assert answer.result(timeout=30)[0] == 200
        deadline = time.time() + 10
        while (status := _status(f"{url}/health")[0]) != 200 and time.time() < deadline:
            time.sleep(0.1)
        assert status == 200  # the batch ended: healthy again


@pytest.mark.slow
def test_sigterm_stops_clap_serve_while_a_request_is_decoding(tiny_dir, tmp_path, params):
    """`clap serve` as a process: SIGTERM while a long answer decodes ends it within uvicorn's 5 s of graceful
    shutdown, the port closed — it is never held by the engine's thread. uvicorn re-raises the signal it caught once
    it has shut down, so the status is the signal's (-15), as for any process SIGTERM ended."""
    import signal
    import socket
    import sys
    import threading
    import time

    import yaml

    cfg = params.as_yaml_dict()
    cfg["model"]["base"] = str(tiny_dir)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clap = str(Path(sys.executable).parent / "clap")
    server = subprocess.Popen([clap, "serve", "--base", "--port", str(port)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while time.time() < deadline and server.poll() is None:
            try:
                if get(f"{url}/health").get("status") == "ok":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("clap serve did not start: " + (server.stdout.read() if server.poll() is not None else ""))
        answers = []
        long_answer = threading.Thread(target=lambda: answers.append(_post_or_error(
            f"{url}/v1/chat/completions", chat("Revenue?") | {"model": "base", "max_tokens": 800})), daemon=True)
        long_answer.start()
        time.sleep(1.0)
        stopped_at = time.time()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        took = time.time() - stopped_at
    finally:
        if server.poll() is None:
            server.kill()
    assert code in (0, -signal.SIGTERM) and took < 20, (code, took, server.stdout.read())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _post_or_error(url: str, body: dict):
    try:
        return post(url, body)
    except OSError as exc:  # the server went away mid-answer: what a client sees on shutdown
        return exc


def test_a_schema_that_compiles_too_long_is_a_400_and_the_server_goes_on(engine):
    """An enum of 10,000 strings (inside the schema-size bound) takes seconds to compile: past
    `--grammar-timeout-s` its compile process is stopped, the request is a 400 naming the flag, and the next request
    — a schema included — is answered."""
    from tests.serve.test_grammar_worker import SLOW

    with running(create_app(engine, MODELS, grammar_timeout_s=1.0)) as url:
        got, reply = post(f"{url}/v1/chat/completions", chat("Revenue?", response_format={
            "type": "json_schema", "json_schema": {"name": "slow", "schema": SLOW}}))
        assert got == 400 and reply["error"]["param"] == "response_format", reply
        assert "did not compile within 1 s (--grammar-timeout-s)" in reply["error"]["message"]
        got, reply = post(f"{url}/v1/chat/completions", chat("Revenue?", response_format=schema_format()))
        assert got == 200 and reply["choices"][0]["message"]["content"].startswith("{"), reply
        assert get(f"{url}/v1/stats")["grammar_compiles_stopped"] == 1


def test_a_request_past_the_memory_bound_is_a_400_naming_the_flag(engine):
    with running(create_app(engine, MODELS, max_request_mb=0.1)) as url:
        got, reply = post(f"{url}/v1/chat/completions", chat("Revenue?", max_tokens=200))
        assert got == 400 and "(--max-request-mb)" in reply["error"]["message"], reply
        assert reply["error"]["param"] == "messages"
        got, _ = post(f"{url}/v1/chat/completions", chat("Revenue?", max_tokens=4) | {"messages": [
            {"role": "user", "content": "Hi"}]})
        assert got == 200  # a small request fits the same bound


def test_stop_rows_ends_one_answer_and_leaves_the_others_as_they_were(engine):
    """`Engine.generate(stop_rows=…)` under a grammar and without one: the stopped row ends at once, the others decode
    the answers they get alone."""
    bodies = [chat(q) for q in QUESTIONS[:3]]
    for schemas in ([SCHEMA] * 3, None):
        alone = engine.generate([b["messages"] for b in bodies], use_adapter=True, max_new_tokens=16, batch_size=3,
                                progress=False, schemas=schemas, use_store=False)
        stopped = engine.generate([b["messages"] for b in bodies], use_adapter=True, max_new_tokens=16, batch_size=3,
                                  progress=False, schemas=schemas, use_store=False, stop_rows=lambda i: i == 1)
        assert stopped[1].new_tokens <= 1 < alone[1].new_tokens
        assert [stopped[i].text for i in (0, 2)] == [alone[i].text for i in (0, 2)]


class _UntilStopped:
    """An engine whose batch decodes until `stop_rows` stops every row (or 60 s): what a client's hang-up must end."""

    def __init__(self):
        import threading

        self.ended = threading.Event()
        self.took: float | None = None

    def generate(self, conversations, use_adapter, stop_rows=None, on_tokens=None, **kwargs):
        import time

        from clap.evaluate.generate import Generation

        started = time.perf_counter()
        while time.perf_counter() - started < 60 and not all(stop_rows(i) for i in range(len(conversations))):
            if on_tokens is not None:
                for i in range(len(conversations)):
                    on_tokens(i, [1])
            time.sleep(0.05)
        self.took = time.perf_counter() - started
        self.ended.set()
        return [Generation(text="x", new_tokens=1, latency_ms=1.0) for _ in conversations]

    class tok:  # a streamed job decodes its tokens so far
        @staticmethod
        def decode(tokens, skip_special_tokens=True):
            return "x" * len(tokens)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_cancels_its_decode(stream):
    """The client sends its request and closes the connection one second later: its decode stops within a couple
    of poll intervals instead of running to its token limit, and GET /v1/stats counts it cancelled."""
    import socket
    import time
    from urllib.parse import urlparse

    engine = _UntilStopped()
    with running(create_app(engine, {"m": True})) as url:
        where = urlparse(url)
        body = json.dumps(chat("Revenue?") | {"model": "m", "stream": stream}).encode()
        with socket.create_connection((where.hostname, where.port), timeout=30) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(1.0)
        assert engine.ended.wait(20), "the decode went on after its client hung up"
        assert engine.took < 10, engine.took
        deadline = time.time() + 10
        while get(f"{url}/v1/stats")["cancelled"] != 1 and time.time() < deadline:
            time.sleep(0.1)
        assert get(f"{url}/v1/stats")["cancelled"] == 1


def test_top_p_is_honoured_a_nucleus_of_one_token_samples_the_greedy_answer(engine):
    """`top_p` → the request's own nucleus: so small that only the likeliest token is in it, a sampled answer (under
    a grammar and without one) is the greedy one, where the model's own nucleus samples something else."""
    with running(create_app(engine, MODELS, max_batch=1)) as url:
        for extra in ({}, {"response_format": schema_format(), "seed": 3}):
            greedy = post(f"{url}/v1/chat/completions", chat("Revenue?", **extra))[1]
            narrow = post(f"{url}/v1/chat/completions", chat("Revenue?", temperature=1.5, top_p=1e-9, **extra))[1]
            wide = post(f"{url}/v1/chat/completions", chat("Revenue?", temperature=1.5, **extra))[1]
            text = [r["choices"][0]["message"]["content"] for r in (greedy, narrow, wide)]
            assert text[1] == text[0] != text[2], text


def test_a_request_joins_the_batch_already_decoding(engine):
    """Continuous batching (the default): a short request sent while a long one decodes joins its batch at the next
    step and is answered first, with the answer it gets alone; the static batcher makes it wait for the long one."""
    import time

    long, short = chat("Revenue?", max_tokens=400), chat("Margin?", max_tokens=4)
    alone = engine.generate([short["messages"]], use_adapter=True, max_new_tokens=4, batch_size=1, progress=False,
                            use_store=False)[0].text
    for batching in ("continuous", "static"):
        with running(create_app(engine, MODELS, batching=batching, wait_ms=1)) as url, ThreadPoolExecutor(2) as pool:
            done = {}

            def timed(name, body, url=url, done=done):
                reply = post(f"{url}/v1/chat/completions", body)
                done[name] = time.perf_counter()
                return reply

            first = pool.submit(timed, "long", long)
            time.sleep(0.5)
            second = pool.submit(timed, "short", short)
            (s1, r1), (s2, r2) = first.result(), second.result()
            stats = get(f"{url}/v1/stats")
        assert s1 == s2 == 200 and r1["usage"]["completion_tokens"] > 100, r1
        assert stats["batching"] == batching and stats["requests"] == 2
        if batching == "continuous":
            assert done["short"] < done["long"] and stats["max_batch_seen"] == 2, (done, stats)
            assert r2["choices"][0]["message"]["content"] == alone
        else:
            assert done["short"] > done["long"], done


def test_a_client_that_hangs_up_leaves_the_running_batch(engine):
    import socket
    import time
    from urllib.parse import urlparse

    with running(create_app(engine, MODELS)) as url:
        where = urlparse(url)
        body = json.dumps(chat("Revenue?", max_tokens=800)).encode()
        with socket.create_connection((where.hostname, where.port), timeout=30) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(0.5)
        deadline = time.time() + 20
        while get(f"{url}/v1/stats")["cancelled"] != 1 and time.time() < deadline:
            time.sleep(0.1)
        assert get(f"{url}/v1/stats")["cancelled"] == 1
        status, reply = post(f"{url}/v1/chat/completions", chat("Margin?", max_tokens=4))
        assert status == 200  # the engine goes on with the next request


def test_a_served_answer_quotes_the_row_its_metric_names_as_evaluation_does(engine):
    """`generate.evidence_names_metric` through `clap serve`: the request's grammar narrows once its metric is written,
    so the served answer is the one `clap evaluate` gets from the same engine."""
    schema, messages = saying("Total equity"), asking("Total equity")
    body = {"model": "clap-adapter@v0.0.1", "max_tokens": 120, "messages": messages,
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}
    engine.evidence_names_metric = True
    try:
        evaluated = engine.generate([messages], use_adapter=True, max_new_tokens=120, progress=False,
                                    schemas=[schema], use_store=False)[0].text
        with running(create_app(engine, MODELS, max_batch=2, wait_ms=1)) as url:
            status, reply = post(f"{url}/v1/chat/completions", body)
    finally:
        engine.evidence_names_metric = False
    assert status == 200, reply
    served = reply["choices"][0]["message"]["content"]
    assert served == evaluated and json.loads(served)["evidence"] in EQUITY_ROWS
