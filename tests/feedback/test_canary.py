"""The canary: analysis on synthetic logs, the CPU server on a tiny model, and the tags that end it."""

import json
import shutil
import subprocess
import threading

import numpy as np
import pytest

from clap.feedback import canary_analysis
from clap.feedback.canary import CanaryService, route
from clap.feedback.traffic import TrafficError, post
from clap.release import registry as release
from clap.serve.canary import server


def _logs(outcomes: dict[str, list[int]], paired: bool, latency: dict[str, float] | None = None):
    """Request and feedback rows: arm → outcomes in arrival order (paired: request i asked of both arms)."""
    requests, feedback = [], []
    for arm, outs in outcomes.items():
        for i, o in enumerate(outs):
            rid = f"{arm}-{i}"
            requests.append({"request_id": rid, "request_hash": f"q{i}" if paired else f"{arm}{i}", "arm": arm,
                             "version": "v0.0.2" if arm == "canary" else "v0.0.1",
                             "latency_ms": (latency or {}).get(arm, 100.0)})
            feedback.append({"request_id": rid, "outcome": o, "reason": None if o else "missed", "record_id": f"f{i}"})
    return requests, feedback


def test_a_clearly_better_canary_succeeds_on_paired_requests(params):
    requests, feedback = _logs({"prod": [0] * 30, "canary": [1] * 10 + [0] * 20}, paired=True)
    r = canary_analysis.analyze(requests, feedback, params)
    assert r["verdict"] == "successful" and r["pairing"] == "by_request"
    assert r["sprt"]["outcome"] == "accept_h1" and r["sprt"]["discordant_seen"] < 10  # stopped early
    assert r["mcnemar"]["canary_only"] == 10 and r["delta_canary_minus_prod"]["delta"] == pytest.approx(1 / 3)
    assert r["versions"] == {"prod": "v0.0.1", "canary": "v0.0.2"}


def test_a_worse_canary_fails_and_its_failures_go_to_the_inbox(params):
    requests, feedback = _logs({"prod": [1] * 30, "canary": [0] * 12 + [1] * 18}, paired=False)
    feedback.append(feedback[30] | {"outcome": 1})  # a later outcome replaces the first: 11 failures remain
    r = canary_analysis.analyze(requests, feedback, params)
    assert r["verdict"] == "failed" and r["pairing"] == "arrival_order"
    failed = canary_analysis.failed_cases(requests, feedback)
    assert len(failed) == 11 and {f["source"] for f in failed} == {"canary_failed"} and failed[0]["record_id"] == "f1"


def test_equal_arms_are_inconclusive_and_slow_canaries_fail(params):
    requests, feedback = _logs({"prod": [1, 0] * 3, "canary": [1, 0] * 3}, paired=True)
    assert canary_analysis.analyze(requests, feedback, params)["verdict"] == "inconclusive"
    requests, feedback = _logs({"prod": [0] * 30, "canary": [1] * 30}, paired=True, latency={"canary": 1000.0})
    r = canary_analysis.analyze(requests, feedback, params)
    assert r["verdict"] == "failed" and r["reasons"][0]["rule"] == "p95_latency_ratio"


def test_requests_without_outcome_are_counted_and_too_few_requests_never_conclude(params):
    requests, feedback = _logs({"prod": [0] * 10, "canary": [1] * 10}, paired=True)
    r = canary_analysis.analyze(requests, feedback[:-1], params)
    assert r["without_outcome"] == {"prod": 0, "canary": 1}
    assert r["verdict"] == "inconclusive" and any(x["rule"] == "min_requests" for x in r["reasons"])


def test_logs_of_two_canaries_are_refused(params):
    requests, feedback = _logs({"prod": [0, 1], "canary": [1, 1]}, paired=True)
    requests[-1]["version"] = "v0.0.3"
    with pytest.raises(canary_analysis.CanaryLogError, match="served 2 versions"):
        canary_analysis.analyze(requests, feedback, params)


def test_routing_is_stable_and_follows_the_share():
    ids = [f"r{i}" for i in range(4000)]
    share = sum(route(i, 0.25) == "canary" for i in ids) / len(ids)
    assert share == pytest.approx(0.25, abs=0.03) and [route(i, 0.25) for i in ids[:50]] == [route(i, 0.25) for i in ids[:50]]


@pytest.fixture(scope="module")
def served(sft_start, tiny_dir, tmp_path_factory):
    from clap.evaluate.generate import Engine
    from clap.feedback.canary import Arm

    adapter, manifest = sft_start
    engine = Engine(tiny_dir, adapter, manifest)
    arms = {"prod": Arm("prod", False, None, None), "canary": Arm("canary", True, "v0.0.1", "sha")}
    logs = tmp_path_factory.mktemp("canary_logs")
    srv = server(CanaryService(engine, arms, 0.5, logs, max_new_tokens=4), 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", logs
    srv.shutdown()
    srv.server_close()


def test_server_says_which_version_each_arm_serves(served):
    import urllib.request

    url, _ = served
    health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=10).read())
    assert health["arms"] == {"prod": None, "canary": "v0.0.1"} and health["share"] == 0.5
    assert health["models"] == ["prod", "canary"] and health["status"] == "ok"


def test_server_answers_routes_and_logs(served):
    url, logs = served
    msgs = [{"role": "user", "content": "What were the sales?"}]
    pinned = post(f"{url}/v1/chat/completions", {"model": "canary", "messages": msgs})
    assert pinned["model"] == "canary" and pinned["choices"][0]["message"]["role"] == "assistant"
    routed = [post(f"{url}/v1/chat/completions", {"messages": msgs})["model"] for _ in range(8)]
    assert set(routed) <= {"prod", "canary"}
    post(f"{url}/v1/feedback", {"request_id": pinned["id"], "outcome": 1})
    rows = [json.loads(x) for x in (logs / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 9 and rows[0]["arm"] == "canary" and rows[0]["version"] == "v0.0.1"
    assert {"request_id", "request_hash", "arm", "adapter_sha256", "latency_ms", "answer"} <= set(rows[0])
    fb = [json.loads(x) for x in (logs / "feedback.jsonl").read_text().splitlines()]
    assert fb == [fb[0]] and fb[0]["outcome"] == 1 and fb[0]["request_id"] == pinned["id"]
    with pytest.raises(TrafficError, match="HTTP 400.*was not served here"):
        post(f"{url}/v1/feedback", {"request_id": "nope", "outcome": 1})
    with pytest.raises(TrafficError, match="HTTP 400.*outcome must be 0 or 1"):
        post(f"{url}/v1/feedback", {"request_id": pinned["id"], "outcome": 7})


def test_server_refuses_a_tampered_canary_before_it_listens(sft_start, tiny_dir, tmp_path):
    from clap.evaluate.generate import Engine
    from clap.integrity import AdapterRefused

    adapter, manifest = sft_start
    copy = shutil.copytree(adapter, tmp_path / "adapter")
    data = bytearray((copy / "adapter_model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "adapter_model.safetensors").write_bytes(bytes(data))
    with pytest.raises(AdapterRefused, match="adapter_model.safetensors: sha256 does not match"):
        Engine(tiny_dir, copy, manifest)


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def registry(tmp_path):
    """v0.0.1 in prod, v0.0.2 in canary, as GTO tags."""
    root = tmp_path / "reg"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "ci@example.com")
    _git(root, "config", "user.name", "CI")
    for v, stage, k in (("v0.0.1", "prod", 1), ("v0.0.2", "canary", 2)):
        _git(root, "commit", "-q", "--allow-empty", "-m", v)
        _git(root, "tag", "-a", f"clap-adapter@{v}", "-m", v)
        _git(root, "tag", "-a", f"clap-adapter#{stage}#{k}", "-m", stage)
    return root


def _analysis(verdict, version="v0.0.2"):
    return {"verdict": verdict, "versions": {"canary": version, "prod": "v0.0.1"},
            "reasons": [{"rule": "sprt", "observed": "x", "outcome": verdict}]}


def test_a_successful_canary_is_promoted_and_its_canary_stage_closed(registry):
    r = release.conclude_canary(registry, _analysis("successful"))
    assert r["tags"] == ["clap-adapter#prod#3", "clap-adapter#canary!#4"]
    assert release.current(registry, "prod")["version"] == "v0.0.2" and release.current(registry, "canary") is None
    assert json.loads((registry / "release/prod.json").read_text())["version"] == "v0.0.2"


def test_a_failed_canary_is_rolled_back_and_prod_untouched(registry):
    r = release.conclude_canary(registry, _analysis("failed"))
    assert r["tags"] == ["clap-adapter#canary!#3"] and r["action"] == "canary rolled back"
    assert release.current(registry, "prod")["version"] == "v0.0.1" and release.current(registry, "canary") is None


def test_conclude_refuses_inconclusive_and_analyses_of_another_canary(registry):
    with pytest.raises(release.ReleaseRefused, match="inconclusive: serve more traffic"):
        release.conclude_canary(registry, _analysis("inconclusive"))
    with pytest.raises(release.ReleaseRefused, match="analysis is of canary v0.0.9"):
        release.conclude_canary(registry, _analysis("successful", "v0.0.9"))
    assert _git(registry, "tag", "--list").split() == sorted(
        ["clap-adapter@v0.0.1", "clap-adapter#prod#1", "clap-adapter@v0.0.2", "clap-adapter#canary#2"])


def test_rescoring_reads_another_logged_score_and_refuses_a_missing_one(params):
    requests, feedback = _logs({"prod": [0] * 3, "canary": [0] * 3}, paired=True)
    scored = [f | {"scores": {"value_exact": 1.0 if f["request_id"].startswith("canary") else 0.0}} for f in feedback]
    assert [f["outcome"] for f in canary_analysis.rescore(scored, "value_exact")] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(canary_analysis.CanaryLogError, match="logs no score 'value_exact'"):
        canary_analysis.rescore(feedback, "value_exact")


def test_traffic_stops_once_the_analysis_is_conclusive(params, tmp_path, monkeypatch):
    """The demo's stopping rule: paired traffic stops at the first question after which the SPRT decides,
    not at --limit; a canary no better than prod is sent every question."""
    import copy
    from types import SimpleNamespace

    from clap.feedback import canary, traffic

    params = copy.deepcopy(params)  # the stand-in answers in microseconds: its latency ratio is noise, not a rule
    params.canary.max_latency_ratio = 1e9

    class Engine:  # the canary answers right, prod wrong
        def generate(self, messages, use_adapter, **_):
            return [SimpleNamespace(text="right" if use_adapter else "wrong", new_tokens=1)]

    def run(canary_right: bool) -> tuple[dict, int]:
        logs = tmp_path / f"logs-{canary_right}"
        arms = {"prod": canary.Arm("prod", False, "v0.0.1", "p"), "canary": canary.Arm("canary", canary_right, "v0.0.2", "c")}
        service = canary.CanaryService(Engine(), arms, 0.5, logs, 8)

        def fake_post(url, body):
            if url.endswith("/v1/feedback"):
                return service.feedback(body["request_id"], body["outcome"], body["reason"], body["record_id"])
            return service.complete(body["messages"], body["model"])

        questions = [{"case": {"target": "{}", "record_id": f"f{i}"}, "context": [], "schema": None,
                      "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(60)]
        monkeypatch.setattr(traffic, "requests_from_replay", lambda cfg, root, limit: questions[:limit])
        monkeypatch.setattr(traffic, "post", fake_post)
        monkeypatch.setattr(traffic, "parse_answer", lambda text: text)
        monkeypatch.setattr(traffic, "score_case", lambda answer, gold, ctx: {params.canary.outcome: answer == "right"})
        counts = traffic.send(params, tmp_path, "http://x", True, 60, lambda: canary_analysis.decided(logs, params))
        requests, feedback = canary_analysis.load_logs(logs)
        return counts, canary_analysis.analyze(requests, feedback, params)["verdict"]

    counts, verdict = run(canary_right=True)
    assert verdict == "successful" and counts["canary"]["requests"] == params.canary.min_requests < 60
    counts, verdict = run(canary_right=False)
    assert verdict == "inconclusive" and counts["canary"]["requests"] == 60


def test_the_router_sends_each_arm_to_its_vllm_lora_module_and_logs_it(tmp_path):
    """`clap canary serve --upstream`: the same routing and log, the answers from an OpenAI-compatible
    server (vLLM's, here a stand-in that records what it was asked) with one LoRA module per version."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from clap.feedback.canary import Arm, OpenAIUpstream, vllm_command

    asked = []

    class VLLM(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            data = json.dumps({"choices": [{"message": {"content": f'{{"from": "{body["model"]}"}}'}}],
                               "usage": {"completion_tokens": 5}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), VLLM)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    engine = OpenAIUpstream(f"http://127.0.0.1:{upstream.server_address[1]}", {True: "v0.0.2", "prod": "v0.0.1", False: "base"})
    arms = {"prod": Arm("prod", "prod", "v0.0.1", "p-sha"), "canary": Arm("canary", True, "v0.0.2", "c-sha")}
    router = server(CanaryService(engine, arms, 0.5, tmp_path / "logs", max_new_tokens=64), 0)
    threading.Thread(target=router.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{router.server_address[1]}"
        schema = {"type": "object", "properties": {"from": {"type": "string"}}}
        msgs = [{"role": "user", "content": "q"}]
        canary_answer = post(f"{url}/v1/chat/completions", {"model": "canary", "messages": msgs, "response_format": {
            "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}})
        post(f"{url}/v1/chat/completions", {"model": "prod", "messages": msgs})
    finally:
        for s in (router, upstream):
            s.shutdown()
            s.server_close()
    assert canary_answer["choices"][0]["message"]["content"] == '{"from": "v0.0.2"}'
    assert [a["model"] for a in asked] == ["v0.0.2", "v0.0.1"] and asked[0]["max_tokens"] == 64
    assert asked[0]["response_format"]["json_schema"]["schema"] == schema and "response_format" not in asked[1]
    rows = [json.loads(x) for x in (tmp_path / "logs/requests.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["adapter_sha256"], r["answer"], r["new_tokens"]) for r in rows] == [
        ("canary", "c-sha", {"from": "v0.0.2"}, 5), ("prod", "p-sha", {"from": "v0.0.1"}, 5)]
    (tmp_path / "serving/v0.0.2/adapter").mkdir(parents=True)
    (tmp_path / "serving/v0.0.2/adapter/adapter_config.json").write_text('{"r": 24}')
    cmd = vllm_command(tmp_path / "base", {"v0.0.2": tmp_path / "serving/v0.0.2/adapter"})
    assert cmd[:2] == ["vllm", "serve"] and cmd[cmd.index("--max-lora-rank") + 1] == "32"
    assert json.loads(cmd[-1]) == {"name": "v0.0.2", "path": str((tmp_path / "serving/v0.0.2/adapter").resolve())}


def _simulated_canary(rng, n: int, p_win: float, sigma: float):
    """Paired traffic: request i answered by both arms; 40 % of pairs discordant, the canary winning `p_win` of those;
    both arms' latencies from one log-normal (a canary exactly as fast as prod)."""
    rows = []
    for i in range(n):
        if rng.random() < 0.4:
            canary = int(rng.random() < p_win)
            prod = 1 - canary
        else:
            prod = canary = int(rng.random() < 0.5)
        for arm, outcome in (("prod", prod), ("canary", canary)):
            rows.append(({"request_id": f"{arm}-{i}", "request_hash": f"q{i}", "arm": arm,
                          "version": "v0.0.2" if arm == "canary" else "v0.0.1",
                          "latency_ms": float(rng.lognormal(6.0, sigma))},
                         {"request_id": f"{arm}-{i}", "outcome": outcome}))
    return rows


def test_false_alarm_rate_of_the_whole_analysis_under_repeated_looks(params):
    """A canary as good as prod (H1 on the discordant pairs, prod's latency distribution, noisy), analysed after every
    request as `clap canary traffic` does: it fails no more often than β/(1 − α) + α, and never on fewer than
    `min_requests` requests."""
    import copy

    cfg = copy.deepcopy(params)
    cfg.evaluate.bootstrap = 100  # the CI is reported, never decides: keep the simulation quick
    c = cfg.canary
    rng = np.random.default_rng(20261203)
    runs, horizon, failed = 200, 60, 0
    for _ in range(runs):
        rows = _simulated_canary(rng, horizon, c.p_better, sigma=0.6)
        for n in range(1, horizon + 1):
            requests, feedback = [r for r, _ in rows[:2 * n]], [f for _, f in rows[:2 * n]]
            verdict = canary_analysis.analyze(requests, feedback, cfg)["verdict"]
            if verdict != "inconclusive":
                assert n >= c.min_requests, (n, verdict)
                failed += verdict == "failed"
                break
    nominal = c.beta / (1 - c.alpha) + c.alpha
    assert failed / runs <= nominal + 3 * np.sqrt(nominal * (1 - nominal) / runs), failed / runs


def test_latency_is_looked_at_once_on_the_first_min_requests(params):
    """A slow stretch after the first `min_requests` requests does not fail a canary (no optional stopping on p95);
    a canary slow from the start does, but only once `min_requests` have been served."""
    c = params.canary
    k = c.min_requests
    requests, feedback = _logs({"prod": [1, 0] * k, "canary": [1, 0] * k}, paired=True)
    for r in requests:
        if r["arm"] == "canary" and int(r["request_id"].split("-")[1]) >= k:
            r["latency_ms"] = 10_000.0
    assert canary_analysis.analyze(requests, feedback, params)["verdict"] == "inconclusive"
    requests, feedback = _logs({"prod": [1] * (k - 1), "canary": [1] * (k - 1)}, paired=True, latency={"canary": 900.0})
    assert canary_analysis.analyze(requests, feedback, params)["verdict"] == "inconclusive"


@pytest.mark.parametrize("where, bad", [("feedback", float("nan")), ("feedback", None), ("feedback", "yes"),
                                        ("feedback", 2), ("requests", float("inf")), ("requests", None)])
def test_evidence_that_is_not_a_number_never_ends_a_canary_successfully(params, where, bad):
    requests, feedback = _logs({"prod": [0] * 30, "canary": [1] * 30}, paired=True)
    assert canary_analysis.analyze(requests, feedback, params)["verdict"] == "successful"
    if where == "feedback":
        feedback[3]["outcome"] = bad
    else:
        requests[3]["latency_ms"] = bad
    r = canary_analysis.analyze(requests, feedback, params)
    assert r["verdict"] == "inconclusive" and r["reasons"][0]["rule"] == "evidence_invalid", r["reasons"]
    assert "row 4" in r["reasons"][0]["observed"]


# ------------------------------------------------------------------ the agent canary
AGENT_TASKS = [  # held-out agent tasks over the chunks of tests/agent/conftest.py
    {"task_id": f"e{i}", "split": "eval", "kind": kind, "batch": "b1", "question": question, "answer": answer,
     "answer_type": "number" if answer != "not found" else "abstain", "entities": ["Apex Precision Co."],
     "needed_chunks": ["c01-annual-2022-p1"], "needed_reads": ["c01-annual-2022-p1"], "needed_values": [],
     "gold_calls": 2, "gold_steps": 3}
    for i, (kind, question, answer) in enumerate([
        ("lookup", "What was Apex Precision Co.'s net profit for FY2022?", "1234.5 万元"),
        ("unanswerable", "What was Apex Precision Co.'s net profit for FY2018?", "not found"),
        ("lookup", "Net profit of Apex Precision Co. in FY2021?", "1000 万元")])]


@pytest.fixture(scope="module")
def agent_root(tmp_path_factory, params):
    """A project folder holding what agent traffic reads: the chunk asset and the held-out agent tasks."""
    from tests.agent.conftest import CHUNKS

    from clap import paths
    from clap.io import write_jsonl

    root = tmp_path_factory.mktemp("agent_root")
    (root / paths.ASSETS).mkdir(parents=True)
    CHUNKS.assign(batch=params.data.batches[0]).to_parquet(root / paths.ASSETS / "chunks.parquet")
    write_jsonl(root / paths.AGENT_TASKS / "tasks.jsonl", AGENT_TASKS)
    return root


@pytest.fixture(scope="module")
def agent_served(sft_start, tiny_dir, tmp_path_factory):
    """The canary serving two agent adapters (the same tiny LoRA: the arms differ in name only) on the tiny model,
    rendered with the agent's tools and decoded under the action grammar."""
    from clap import model
    from clap.agent.chat import action_schema, engine_rendering
    from clap.agent.engine import AgentServing
    from clap.agent.tools import ReportTools
    from clap.evaluate.generate import Engine
    from clap.feedback.canary import Arm

    adapter, manifest = sft_start
    schemas = ReportTools.tool_schemas()
    engine = Engine(tiny_dir, others=[("prod", adapter, manifest), ("canary", adapter, manifest)],
                    **engine_rendering(model.load_tokenizer(tiny_dir), schemas))
    arms = {"prod": Arm("prod", "prod", "v0.0.1", "sha-p"), "canary": Arm("canary", "canary", "v0.0.2", "sha-c")}
    logs = tmp_path_factory.mktemp("agent_canary_logs")
    service = CanaryService(engine, arms, 0.5, logs, max_new_tokens=24,
                            agent=AgentServing(schemas, action_schema(schemas)))
    srv = server(service, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", logs
    srv.shutdown()
    srv.server_close()


def test_agent_episodes_are_served_over_http_and_judged_one_outcome_per_episode(agent_served, agent_root, params):
    """Paired agent traffic: each turn is an OpenAI chat request with the tools and its episode's id, answered as a
    tool call (the action grammar makes every answer one); the task's success is posted on the episode's last turn;
    the analysis pairs the two arms' episodes by their opening and reads one outcome per episode."""
    from clap.feedback.traffic import send_agent

    url, logs = agent_served
    cfg = params.model_copy(deep=True)
    cfg.agent.max_steps, cfg.agent.turn_tokens = 2, 24
    counts = send_agent(cfg, agent_root, url, paired=True, limit=3)
    assert counts == {"prod": {"requests": 3, "success": counts["prod"]["success"]},
                      "canary": {"requests": 3, "success": counts["canary"]["success"]}}
    turns = [json.loads(x) for x in (logs / "requests.jsonl").read_text().splitlines()]
    feedback = [json.loads(x) for x in (logs / "feedback.jsonl").read_text().splitlines()]
    episodes = {}
    for t in turns:
        episodes.setdefault(t["episode_id"], []).append(t)
    assert len(episodes) == 6 and all(len({t["arm"] for t in ts}) == 1 for ts in episodes.values())
    assert all([t["turn"] for t in ts] == list(range(len(ts))) and 1 <= len(ts) <= 2 for ts in episodes.values())
    assert all(len({t["opening_hash"] for t in ts}) == 1 for ts in episodes.values())
    assert {f["request_id"] for f in feedback} == {ts[-1]["request_id"] for ts in episodes.values()}
    assert {f["record_id"] for f in feedback} == {"e0", "e1", "e2"} and all("success" in f["scores"] for f in feedback)

    analysis = canary_analysis.analyze(turns, feedback, params)
    assert analysis["kind"] == "agent" and analysis["requests"] == {"prod": 3, "canary": 3}
    assert analysis["pairing"] == "by_request" and analysis["pairs"] == 3 and analysis["without_outcome"] == {
        "prod": 0, "canary": 0}


def test_an_agent_turn_answers_with_a_tool_call_and_routes_by_its_episode(agent_served):
    import urllib.request

    from clap.agent import chat
    from clap.agent.tools import ReportTools

    url, logs = agent_served
    health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=10).read())
    assert health["system"] == chat.SYSTEM and [t["function"]["name"] for t in health["tools"]] == list(
        ReportTools.NAMES)
    body = {"messages": chat.openai_messages(chat.start("Apex net profit FY2022?")), "max_tokens": 24,
            "tools": ReportTools.tool_schemas(), "episode_id": "ep-route"}
    answers = [post(f"{url}/v1/chat/completions", body | {"request_id": f"ep-route:{i}"}) for i in range(3)]
    assert len({a["model"] for a in answers}) == 1  # every turn of an episode goes to one arm
    message, reason = answers[0]["choices"][0]["message"], answers[0]["choices"][0]["finish_reason"]
    if message.get("tool_calls"):  # the grammar allows only actions; 24 tokens may cut one short
        assert reason == "tool_calls" and message["tool_calls"][0]["function"]["name"] in ReportTools.NAMES
        assert isinstance(json.loads(message["tool_calls"][0]["function"]["arguments"]), dict)
    else:
        assert reason == "length" and chat.parse_action(message["content"]) is None


@pytest.mark.parametrize("change, says", [
    ({"tools": None}, "tools: this server serves the tool-calling agent; every chat request lists its tools"),
    ({"tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]},
     "tools: the agent served here was trained with search_reports"),
    ({"stream": True}, "stream: an agent turn is answered whole"),
    ({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
     "messages.0.tool_call_id: 'nope' answers no tool call"),
])
def test_an_agent_request_the_server_cannot_serve_is_a_400_naming_the_field(agent_served, change, says):
    from tests.helpers.http_server import post as raw_post

    from clap.agent import chat
    from clap.agent.tools import ReportTools

    url, _ = agent_served
    body = {"model": "canary", "messages": chat.openai_messages(chat.start("Q?")), "tools": ReportTools.tool_schemas()}
    status, reply = raw_post(f"{url}/v1/chat/completions", {k: v for k, v in (body | change).items() if v is not None})
    assert status == 400 and reply["error"]["message"].startswith(says), reply


def test_tools_sent_to_the_extraction_canary_are_refused(served):
    from tests.helpers.http_server import post as raw_post

    url, _ = served
    status, reply = raw_post(f"{url}/v1/chat/completions", {
        "model": "canary", "messages": [{"role": "user", "content": "Q?"}],
        "tools": [{"type": "function", "function": {"name": "search_reports", "parameters": {}}}]})
    assert status == 400 and "serves no tool-calling agent" in reply["error"]["message"]


@pytest.mark.parametrize("extraction, agent, verdict", [
    ("successful", None, "successful"),          # no agent canary of this version: the extraction canary decides
    ("successful", "successful", "successful"),
    ("successful", "inconclusive", "inconclusive"),  # the agent canary still collecting: nothing is concluded
    ("successful", "failed", "failed"),          # either failing rolls the version back
    ("inconclusive", "failed", "failed"),
    ("failed", "successful", "failed"),
])
def test_conclude_reads_the_agent_canary_of_the_same_version_too(extraction, agent, verdict):
    first = {"verdict": extraction, "kind": "extraction", "versions": {"canary": "v0.0.3"},
             "reasons": [{"rule": "sprt", "outcome": extraction}]}
    others = [] if agent is None else [{"verdict": agent, "kind": "agent", "versions": {"canary": "v0.0.3"},
                                        "reasons": [{"rule": "sprt", "outcome": agent}]}]
    stale = {"verdict": "failed", "kind": "agent", "versions": {"canary": "v0.0.2"}, "reasons": []}
    joined = canary_analysis.joint(first, [*others, stale])  # another version's analysis is not this canary's
    assert joined["verdict"] == verdict
    assert [r["rule"] for r in joined["reasons"]] == ["sprt", *(["agent:sprt"] if agent else [])]


def test_episode_rows_collapse_per_arm_and_keep_every_turns_request_id():
    rows = [{"request_id": f"{e}:{t}", "arm": arm, "episode_id": e, "opening_hash": f"o-{e[0]}", "latency_ms": 10.0,
             "request_hash": f"h{t}"} for e, arm, n in (("a-p", "prod", 3), ("a-c", "canary", 2)) for t in range(n)]
    rows.append({"request_id": "plain", "arm": "prod", "request_hash": "x", "latency_ms": 5.0})
    out = canary_analysis.episodes(rows)
    assert [(r["request_id"], r["request_hash"], r.get("turns"), r["latency_ms"]) for r in out] == [
        ("a-p:0", "o-a", 3, 30.0), ("a-c:0", "o-a", 2, 20.0), ("plain", "x", None, 5.0)]
    assert out[0]["request_ids"] == ["a-p:0", "a-p:1", "a-p:2"]
