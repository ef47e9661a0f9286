"""`clap demo` on the tiny model, in a clone: three rounds, each a commit — a first release against the base
model, new data plus rows the simulated annotator repaired judged against prod, a poisoned batch that
admission stops — then the rollback drill and the timeline. (The gate's own `rollback`, prod regressed against
the base model on new evidence, is reached through the pipeline in tests/test_e2e_loop.py.) The demo runs the extraction loop alone
(`agent.enabled=false`, as `make demo` can): every agent stage writes its marked, empty output and the
releases ship no agent adapter; tests/test_e2e_loop.py releases one."""

import json

import pytest
from tests.test_e2e_loop import TINY_OVERRIDES, make_clone, run

pytestmark = pytest.mark.slow  # minutes: `make test-all` and CI run it, `make test` does not

ROUNDS = "demo.rounds=[{batches:[b1]},{batches:[b1,b2],repair_share:0.5},{batches:[b1,b2,b3],poisoned_batch:b3}]"


def test_demo_three_rounds_then_rollback_drill(tmp_path, tiny_dir):
    root = tmp_path / "clap"
    overrides = [o for o in TINY_OVERRIDES if not o.startswith("data.batches=")] + [f"model.base={tiny_dir}", ROUNDS,
                                                                                 "agent.enabled=false"]
    env = make_clone(root, overrides)
    out = run(root, "clap", "demo", *[a for o in overrides for a in ("-S", o)], env=env)

    # round 1 → v0.0.1 in prod; round 2 judged against it → v0.0.2; round 3 held on the poisoned batch
    assert "round 1 (" in out and "released v0.0.1 to prod" in out
    assert "released v0.0.2 to prod" in out
    assert "round 3 (" in out and "gate hold" in out
    log = run(root, "git", "log", "--format=%s", env=env).splitlines()
    assert log[:4] == ["clap demo rollback drill: prod v0.0.2 → v0.0.1", "clap demo round 3: b1, b2, b3 → gate hold",
                       "clap demo round 2: b1, b2 → gate promote", "clap demo round 1: b1 → gate promote"], log
    # what changed between rounds is what git shows: the batch list and the poisoned export, in conf/ and params
    diff = run(root, "git", "diff", "HEAD~2", "HEAD~1", "--", "conf/config.yaml", env=env)
    assert "+  batches: [b1, b2, b3]" in diff and "+  poisoned_batch: b3" in diff
    round3 = json.loads(run(root, "git", "show", "HEAD~1:metrics/gate.json", env=env))
    assert any(r["rule"] == "admission" and r["batch"] == "b3" for r in round3["reasons"]), round3["reasons"]

    # the flywheel turned: round 2 read the rows the simulated annotator corrected from round 1's queue
    effect = json.loads(run(root, "git", "show", "HEAD~2:metrics/repair_effect.json", env=env))
    assert effect["fixed_rows"] > 0 and effect["repaired_rows_in"] == effect["fixed_rows"], effect
    assert effect["in_training"] + effect["in_holdout"] > 0 and effect["before_model"] == "prod"
    assert "repair (SIMULATED annotator)" in out

    # the agent track switched off: each agent stage said so, wrote its outputs empty, and no release ships one
    for command in ("agent-tasks", "agent-sft", "agent-pairs", "agent-dpo", "agent-rm", "agent-rm-check", "agent-grpo",
                    "agent-rloo", "evaluate-agent"):
        assert f"{command}: disabled (agent.enabled is false)" in out, command
    assert json.loads((root / "metrics/agent.json").read_text())["status"] == "disabled"
    assert (root / "data/agent/tasks.jsonl").read_text() == ""
    assert json.loads(run(root, "git", "show", "HEAD~2:metrics/gate.json", env=env))["agent"] == {}
    roles = {f["role"] for f in json.loads(run(root, "git", "show", "clap-adapter@v0.0.2:release/bundle.json",
                                               env=env))["files"]}
    assert "adapter" in roles and "agent_adapter" not in roles, roles

    # the drill: prod back to v0.0.1, its adapter restored byte for byte and verified
    assert "rollback drill: prod v0.0.2 → v0.0.1" in out and "adapter bytes identical to v0.0.1's: True" in out
    assert json.loads((root / "release/prod.json").read_text())["version"] == "v0.0.1"
    run(root, "clap", "verify", "release/bundle.json", env=env)

    # nothing half-restored: the drill's commit holds round 1's configuration, lock and evidence, so the
    # pipeline's only pending change is the prod it now points at
    assert run(root, "git", "status", "--porcelain", "--untracked-files=no", env=env) == ""
    # and DVC agrees: the later rounds' outputs (data/materialized/b2, b3) were set aside, SFT's resume checkpoints
    # (round 3's, outside DVC) do not count, so the one pending change is the prod it points at: nothing retrains
    # (the bundle reads prod too: a release whose gate held the agent keeps the agent adapter that prod ships)
    assert json.loads(run(root, "dvc", "status", "--json", env=env)) == {
        "prod_adapter": [{"changed deps": {"release/prod.json": "modified"}}],
        "bundle": [{"changed deps": {"release/prod.json": "modified"}}]}
    assert sorted(p.name for p in (root / "data/materialized").iterdir()) == ["b1"]
    assert "batches: [b1]\n" in (root / "conf/config.yaml").read_text()
    assert not (root / "repair/fixed/simulated_annotator.jsonl").exists()  # round 2's repair is not v0.0.1's

    # the timeline: three rounds and the rollback, each with its baseline, refusal and tags, read back from git
    from clap.release.timeline import rounds

    first = run(root, "git", "rev-list", "--max-parents=0", "HEAD", env=env).strip()
    rows = rounds(root, since=first)  # the demo's own rounds
    # main carries no run state (tests/test_committed_state.py): the clone's first commit holds no gate decision
    assert [r["commit"] for r in rounds(root)] == [r["commit"] for r in rows]
    assert [(r["batches"], r["baseline"], r["decision"]) for r in rows] == [
        (["b1"], "base", "promote"), (["b1", "b2"], "prod v0.0.1", "promote"),
        (["b1", "b2", "b3"], "prod v0.0.2", "hold"), ([], "prod v0.0.2", "rollback")], rows
    assert rows[0]["tags"] == ["clap-adapter@v0.0.1", "clap-adapter#prod#1"]
    assert rows[1]["tags"] == ["clap-adapter@v0.0.2", "clap-adapter#prod#2"]
    assert rows[2]["refused"] == {"b3": "repair (unit_mismatch_share)"} and rows[2]["tags"] == []
    assert rows[3]["candidate"] == "restores v0.0.1" and rows[3]["tags"] == ["clap-adapter#prod#3"]
    assert "ROLLBACK" in out and "HOLD" in out

    # a metric diff a reviewer reads: `dvc metrics show` prints the headline file alone, about 20 columns
    shown = json.loads(run(root, "dvc", "metrics", "show", "--json", env=env))
    (files,) = [rev["data"] for rev in shown.values()]
    assert list(files) == ["metrics/headline.json"], list(files)

    def leaves(o):
        return sum(leaves(v) for v in o.values()) if isinstance(o, dict) else 1

    headline = files["metrics/headline.json"]["data"]
    assert 10 <= leaves(headline) <= 25 and headline["decision"] == "promote", headline

    # outputs are reachable: every release pushed to the project's remote, then a second clone pulls, checks out a
    # release, verifies it from the pulled bytes, renders the plots, and serves another release
    run(root, "dvc", "push", "--all-tags", env=env)
    second = tmp_path / "second"
    run(tmp_path, "git", "clone", "-q", str(root), str(second), env=env)
    run(second, "dvc", "pull", env=env)
    run(second, "git", "checkout", "-q", "clap-adapter@v0.0.2", env=env)
    run(second, "dvc", "pull", env=env)
    assert "verified" in run(second, "clap", "verify", "release/bundle.json", env=env).lower()
    run(second, "dvc", "plots", "show", "-o", str(tmp_path / "plots"), env=env)
    assert (tmp_path / "plots" / "index.html").stat().st_size > 0
    _serve_answers(second, env, "v0.0.1")


def _serve_answers(root, env, version: str) -> None:
    """`clap serve --version` in `root` starts (the adapter restored from the pulled cache and checked) and answers."""
    import socket
    import subprocess
    import time

    from tests.helpers.http_server import get, post

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["clap", "serve", "--version", version, "--port", str(port)], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                health = get(f"{url}/health")
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, server.stdout.read() if server.poll() else ""
                time.sleep(0.5)
        status, reply = post(f"{url}/v1/chat/completions", {"model": f"clap-adapter@{version}", "max_tokens": 8,
                                                           "messages": [{"role": "user", "content": "Revenue?"}]})
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert f"clap-adapter@{version}" in health["models"] and status == 200, (health, reply)


def test_demo_concludes_a_canary_round_before_the_next(tmp_path, tiny_dir):
    """A round the gate sends to canary (policy release_via_canary) does not strand the demo: the canary serves
    SIMULATED paired traffic, the sequential analysis decides — here a random tiny model answers nothing right on
    either arm, so the traffic runs out inconclusive and the canary fails closed — and it is rolled back before the
    next round, which is judged against the prod that then holds (the base model). The agent track is on and its
    relaxed policy ships agent SFT, so the version's agent adapter gets its own canary (held-out agent tasks as paired
    episodes, task success the outcome), and the conclusion weighs both."""
    root = tmp_path / "clap"
    overrides = [o for o in TINY_OVERRIDES if not o.startswith("data.batches=")] + [
        f"model.base={tiny_dir}", "demo.rounds=[{batches:[b1]},{batches:[b1,b2]}]", "agent.enabled=true",
        "gate.release_via_canary=true", "canary.min_requests=2"]
    env = make_clone(root, overrides)
    out = run(root, "clap", "demo", *[a for o in overrides for a in ("-S", o)], env=env)
    assert "round 1: canary v0.0.1 on SIMULATED traffic" in out
    assert "traffic_exhausted" in out and "released v0.0.1 to canary" in out
    assert "canary failed → canary rolled back" in out
    assert "round 1: agent canary v0.0.1 on SIMULATED traffic" in out and "task success" in out
    concluded = run(root, "git", "log", "--format=%H", "--grep", "round 1: canary v0.0.1", env=env).split()[0]
    agent_analysis = json.loads(run(root, "git", "show", f"{concluded}:metrics/canary_agent.json", env=env))
    assert agent_analysis["versions"]["canary"] == "v0.0.1" and agent_analysis["traffic"] == "SIMULATED"
    assert agent_analysis["kind"] == "agent" and min(agent_analysis["requests"].values()) > 0
    message = run(root, "git", "tag", "-l", "--format=%(contents)", "clap-adapter#canary!#2", env=env)
    assert "canary analysis failed" in message and "agent:" in message, message
    log = run(root, "git", "log", "--format=%s", env=env).splitlines()
    assert "clap demo round 1: canary v0.0.1 failed → canary rolled back" in log, log
    analysis = json.loads(run(root, "git", "show", "clap-adapter@v0.0.2:metrics/canary.json", env=env)
                          if "clap-adapter@v0.0.2" in run(root, "git", "tag", env=env) else
                          (root / "metrics/canary.json").read_text())
    assert analysis["traffic"] == "SIMULATED" and analysis["verdict"] == "failed"
    tags = run(root, "git", "tag", env=env).split()
    assert "clap-adapter#canary!#2" in tags and not any("#prod#" in t for t in tags), tags
    from clap.release.timeline import rounds

    rows = [(r["round"], r["decision"], r["candidate"]) for r in rounds(root)]
    assert ("canary", "rollback", "canary v0.0.1 failed") in rows, rows
    assert "traffic_exhausted" in next(r["evidence"] for r in rounds(root) if r["round"] == "canary")
