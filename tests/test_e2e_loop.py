"""The whole loop in a temporary clone on a tiny configuration: dvc repro, a threshold change that
re-runs only the gate (and the bundle that pins its output), metrics diff, release, a rollback the gate
decides, and `clap rollback`."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # minutes: `make test-all` and CI run it, `make test` does not

TINY_OVERRIDES = [
    "demo.scale=0.2", "data.batches=[b1,b2]", "materialize.max_train_per_batch=6", "materialize.max_eval_per_batch=3",
    "materialize.max_replay_per_batch=2", "admit.min_train_samples=4", "train.sft.max_steps=2", "train.sft.save_steps=1",
    "train.sft.per_device_batch_size=2", "train.sft.gradient_accumulation=1", "train.dpo.max_steps=1",
    "train.grpo.max_steps=1", "train.grpo.num_generations=2", "train.grpo.per_device_batch_size=2",
    "train.grpo.max_completion_length=8", "train.guards.max_clipped_ratio=1.0", "train.guards.reward_collapse_std=-1",
    "evaluate.max_new_tokens=8", "evaluate.bootstrap=50", "replay.max_new_tokens=8",
    "evaluate_decisions.max_new_tokens=8", "train.grpo.save_steps=1",
    # a random tiny model cannot answer, so the policy is relaxed until it can promote
    "gate.min_parse_ok=0.0", "gate.require_replay_gain=false", "gate.max_regressed_batches=5",
    "gate.ci_lower_must_exceed=-1.0", "gate.max_batch_regression=-1.0", "gate.min_overall_delta=-1.0",
    "gate.min_decision_delta=-1.0", "gate.decision_ci_lower_must_exceed=-1.0",
    # latency on a shared CI machine is noise at this size; the test must not depend on wall-clock time
    "gate.max_p95_latency_ratio=1000.0",
    # the agent track at its smallest: one task per batch, split and kind; two SFT steps; short episodes
    "agent.tasks.max_tasks_per_batch={train:1,eval:1}", "agent.sft.max_steps=2", "agent.sft.per_device_batch_size=2",
    "agent.sft.gradient_accumulation=1", "agent.sft.save_steps=1", "agent.max_steps=3", "agent.turn_tokens=16",
    "agent.max_new_tokens=40", "agent.evaluate.samples=2", "agent.evaluate.pass_k=[1,2]", "agent.dpo.max_steps=1",
    "agent.dpo.mine_samples=0", "agent.dpo.gradient_accumulation=1", "agent.evaluate.max_tasks=4",
    "agent.grpo.max_steps=1", "agent.grpo.num_generations=2", "agent.grpo.save_steps=1", "agent.rm.max_steps=1",
    "agent.rloo.max_steps=1", "agent.rloo.num_generations=2", "agent.rloo.states_per_step=1", "agent.rloo.save_steps=1",
    "agent.rm.gradient_accumulation=1",
    # the agent policy relaxed too, so agent SFT ships with the release (a held agent adapter never would: the
    # bundle would pin none, tests/release/test_serving_bundle_release.py); its later steps must still beat it
    "gate.agent_min_success_delta=-1.0", "gate.agent_ci_lower_must_exceed=-2.0", "gate.agent_max_hallucination_rate=1.0",
    "gate.agent_min_tool_call_accuracy=0.0",
]


def run(cwd, *cmd, env=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def make_clone(root: Path, overrides: list[str]) -> dict:
    """A git repository at `root` with the project's tracked files, params.yaml composed from `overrides`, a DVC
    remote of its own; the environment to run git, dvc and clap in it."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, root / f)
    env = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run(root, "git", "init", "-q", env=env)
    sys.path.insert(0, str(ROOT / "src"))
    from clap.config import compose, dump

    (root / "params.yaml").write_text(dump(compose(overrides, conf=root / "conf")))
    run(root, "dvc", "remote", "modify", "local", "url", str(root.parent / "remote"), env=env)
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "clone", env=env)
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory, tiny_dir):
    root = tmp_path_factory.mktemp("clone") / "clap"
    return root, make_clone(root, TINY_OVERRIDES + [f"model.base={tiny_dir}"])


def stage_of(argv: list[str]) -> str:
    return f"train_{argv[1]}".replace("-", "_") if argv[0] == "train" else argv[0].replace("-", "_")


def declared_params(root: Path) -> dict[str, list[str]]:
    """dvc.yaml's `params:` per stage; `*` for a stage that declares the whole params.yaml."""
    out = {}
    for name, st in yaml.safe_load((root / "dvc.yaml").read_text())["stages"].items():
        entries = (st.get("do") or st).get("params", [])
        out[name] = [e if isinstance(e, str) else "*" for e in entries]
    return out


def covered(key: str, declared: list[str]) -> bool:
    return "*" in declared or any(key == d or key.startswith(d + ".") for d in declared)


def leaves(d: dict, prefix: str = "") -> list[str]:
    return [x for k, v in d.items() for x in (leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and k != "weights"
                                              else [f"{prefix}{k}"])]


def check_params_trace(root: Path, trace: Path) -> None:
    """Every key a stage read is declared in its dvc.yaml params, and every params key is read by something."""
    declared = declared_params(root)
    reads = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {stage_of(r["argv"]) for r in reads} >= {"materialize", "admit", "train_sft", "train_dpo", "train_grpo",
                                                     "index", "evaluate", "evaluate_decisions", "replay", "gate",
                                                     "bundle", "agent_tasks", "train_agent_sft", "agent_pairs",
                                                     "train_agent_dpo", "train_agent_rm", "train_agent_grpo",
                                                     "agent_rm_check", "train_agent_rloo", "evaluate_agent"}
    undeclared = sorted({(stage_of(r["argv"]), k) for r in reads for k in r["reads"]
                         if not covered(k, declared[stage_of(r["argv"])])})
    assert not undeclared, f"stages read params their dvc.yaml entry does not declare: {undeclared}"
    interpolated = set(re.findall(r"\$\{([a-z_.]+)\}", (root / "dvc.yaml").read_text())) - {"item"}
    read = {k for r in reads if stage_of(r["argv"]) != "bundle" for k in r["reads"]} | interpolated
    # a key read only on a path this tiny run does not take (vLLM, hybrid retrieval, a guard that never
    # saw its signal) still counts when the code reads it by name (a section's attribute, or a subscript)
    code = "\n".join(p.read_text() for p in (ROOT / "src/clap").rglob("*.py") if p.name != "config.py")
    subscripted = {a or b or c for a, b, c in re.findall(
        r"\[[\"']([a-z_0-9]+)[\"']\]|\.get\([\"']([a-z_0-9]+)[\"']|\.([a-z_][a-z_0-9]*)\b", code)}
    unread = [k for k in leaves(yaml.safe_load((root / "params.yaml").read_text()))
              if not any(k == x or k.startswith(x + ".") or x.startswith(k + ".") for x in read)
              and k.rsplit(".", 1)[-1] not in subscripted]
    assert not unread, f"params keys that no stage reads: {unread}"


def test_loop_threshold_change_release_rollback(clone):
    root, env = clone
    trace = root.parent / "params_trace.jsonl"
    out = run(root, "dvc", "repro", env=env | {"CLAP_PARAMS_TRACE": str(trace)})
    assert "Running stage 'gate'" in out and "Running stage 'train_sft'" in out
    check_params_trace(root, trace)
    for f in ("metrics/gate.json", "metrics/replay.json", "metrics/eval/b1.json", "release/bundle.json",
              "repair/queue.jsonl", "models/sft/adapter/adapter_model.safetensors", "data/index/bm25/chunk_ids.json"):
        assert (root / f).exists(), f
    gate = json.loads((root / "metrics/gate.json").read_text())
    assert gate["decision"] == "promote", gate
    assert set(gate["candidates"]) == {"sft", "dpo", "grpo"}, "every step of the chain is judged"
    shipped = f"models/{gate['candidate']}/adapter/adapter_model.safetensors"
    assert json.loads((root / "release/bundle.json").read_text())["candidate"] == gate["candidate"]
    assert "up to date" in run(root, "dvc", "repro", env=env)
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "run 1", env=env)
    run(root, "dvc", "push", "-q", env=env)
    v1_adapter = (root / shipped).read_bytes()
    assert "released v0.0.1 to prod" in run(root, "clap", "release", env=env)
    assert json.loads((root / "release/prod.json").read_text())["version"] == "v0.0.1"
    # the agent adapter the release shipped, restored from the DVC cache and checked against its bundle
    assert "verified against its release bundle" in run(root, "clap", "agent-adapter", env=env)
    pinned = next(f["sha256"] for f in json.loads((root / "release/bundle.json").read_text())["files"]
                  if f["role"] == "agent_adapter" and f["path"].endswith("adapter_model.safetensors"))
    restored = root / "models/serving/agent/v0.0.1/adapter/adapter_model.safetensors"
    assert hashlib.sha256(restored.read_bytes()).hexdigest() == pinned

    # prod changed: exactly the stages that depend on prod re-run, and the candidate is judged against it
    out = run(root, "dvc", "repro", env=env)
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    assert ran == {"prod_adapter", "evaluate@b1", "evaluate@b2", "evaluate_decisions", "replay", "evaluate_agent",
                   "gate", "agent_pass_k", "bundle", "repair_queue"}, ran
    # pass^k after the gate: sampled on the agent adapter this round's gate ships (if it ships one) and on prod's
    gate_agent = json.loads((root / "data/gate/agent.json").read_text())
    ships = [gate_agent["candidate"]] if gate_agent["decision"] in ("promote", "canary") else []
    pass_k = json.loads((root / "metrics/agent_pass_k.json").read_text())
    assert list(pass_k["models"]) == [*ships, "prod"] and ("delta_vs_prod" in pass_k) == bool(ships), pass_k
    assert (root / "models/prod/adapter/adapter_model.safetensors").read_bytes() == v1_adapter
    assert hashlib.sha256((root / "models/prod/agent_adapter/adapter_model.safetensors").read_bytes()).hexdigest() \
        == pinned
    agent = json.loads((root / "metrics/agent.json").read_text())  # the agent chain judged against prod's agent too
    assert "prod" in agent["models"] and set(agent["deltas_vs_prod"]) == set(agent["deltas_vs_base"]) - {"prod"}
    ev = json.loads((root / "metrics/eval/b1.json").read_text())
    assert {"prod", "deltas_vs_prod", "prod_vs_base"} <= set(ev)
    decisions = json.loads((root / "metrics/decisions.json").read_text())
    assert "prod" in decisions["models"] and "dpo-prod" in decisions["deltas"]
    assert decisions["extraction"]["deltas"]["dpo-sft"]["overall_score"]["n"] == decisions["extraction"]["n"] > 0
    assert "up to date" in run(root, "dvc", "repro", env=env)
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "round 2: baseline prod v0.0.1", env=env)

    # tighten one gate threshold: only the gate (and the bundle pinning its output) re-run
    params = (root / "params.yaml").read_text().replace("min_parse_ok: 0.0", "min_parse_ok: 0.95")
    (root / "params.yaml").write_text(params)
    out = run(root, "dvc", "repro", env=env)
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    assert ran == {"gate", "bundle"}, ran
    assert json.loads((root / "metrics/gate.json").read_text())["decision"] == "reject"
    diff = json.loads(run(root, "dvc", "metrics", "diff", "--json", env=env))
    assert list(diff) == ["metrics/headline.json"] and "decision_code" in diff["metrics/headline.json"], diff
    out = subprocess.run(["clap", "release"], cwd=root, capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "uncommitted" in out.stdout

    # relax again, change the candidate's data path a little (new version), release v2
    params = params.replace("min_parse_ok: 0.95", "min_parse_ok: 0.0").replace("max_steps: 2", "max_steps: 3", 1)
    (root / "params.yaml").write_text(params)
    run(root, "dvc", "repro", env=env)
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "run 2", env=env)
    run(root, "dvc", "push", "-q", env=env)
    v1_shipped = shipped
    shipped = f"models/{json.loads((root / 'metrics/gate.json').read_text())['candidate']}/adapter/adapter_model.safetensors"
    v2_adapter = (root / shipped).read_bytes()
    assert "released v0.0.2 to prod" in run(root, "clap", "release", env=env)

    # prod re-gated on the pipeline's own evidence under a policy that asks it to keep beating the base model:
    # the candidate is now prod's own adapter (promoting it again would change nothing), and prod ties the
    # base on every batch (a random tiny model's adapter answers as the base) — the gate itself says rollback
    assert "min_prod_delta_vs_base: -0.02" in params
    (root / "params.yaml").write_text(params.replace("min_prod_delta_vs_base: -0.02", "min_prod_delta_vs_base: 0.01"))
    run(root, "dvc", "repro", env=env)
    assert json.loads((root / "metrics/eval/b1.json").read_text())["candidate_is_prod"] is True
    gate = json.loads((root / "metrics/gate.json").read_text())
    assert gate["decision"] == "rollback", gate["reasons"]
    assert {r["batch"] for r in gate["reasons"] if r["rule"] == "prod_regressed_vs_base"} == {"b1", "b2"}
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "re-gate prod v0.0.2: rollback", env=env)
    out = run(root, "clap", "rollback", env=env)
    assert "v0.0.2 → v0.0.1" in out
    assert (root / shipped).read_bytes() != v2_adapter
    assert (root / v1_shipped).read_bytes() == v1_adapter  # v0.0.1's adapter, byte for byte
    run(root, "clap", "verify", "release/bundle.json", env=env)
    reg = run(root, "clap", "registry", env=env)
    assert "v0.0.1" in reg and "current=prod" in reg


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent_canary(root, env):
    """The agent canary of the version in canary: its agent adapter beside prod's, the held-out agent tasks as paired
    episodes over HTTP, one outcome (task success) per episode. While it is inconclusive nothing is concluded; once
    the application reports the canary's episodes worked, it joins the extraction canary's verdict. A version whose
    gate held its agent adapter ships none of its own, and the agent canary says so."""
    ships = json.loads((root / "release/bundle.json").read_text())["tracks"]["agent"]["ships"]
    if not ships:
        refused = subprocess.run(["clap", "canary", "demo", "--agent"], cwd=root, env=env, capture_output=True,
                                 text=True)
        assert refused.returncode == 2 and "ships no agent adapter of its own" in refused.stdout, refused.stdout
        return
    out = run(root, "clap", "canary", "demo", "--agent", "--limit", "3", "--no-conclude", env=env)
    assert "task success" in out and "canary v0.0.3 vs prod v0.0.1" in out, out
    analysis = json.loads((root / "metrics/canary_agent.json").read_text())
    assert analysis["kind"] == "agent" and analysis["requests"] == {"prod": 3, "canary": 3}, analysis
    turns = [json.loads(x) for x in (root / "feedback/canary/agent/requests.jsonl").read_text().splitlines()]
    assert len(turns) > 6 and {t["arm"] for t in turns} == {"prod", "canary"}
    if analysis["verdict"] == "inconclusive":  # the random tiny model fails every task in both arms
        refused = subprocess.run(["clap", "canary", "conclude"], cwd=root, env=env, capture_output=True, text=True)
        assert refused.returncode == 2 and "serve more traffic" in refused.stdout, refused.stdout
    last = {}
    for t in turns:
        last[t["episode_id"]] = t
    with open(root / "feedback/canary/agent/feedback.jsonl", "a") as f:  # the application's later outcomes
        for t in last.values():
            f.write(json.dumps({"request_id": t["request_id"], "outcome": int(t["arm"] == "canary")}) + "\n")
    assert "SUCCESSFUL" in run(root, "clap", "canary", "analyze", "--agent", env=env)


def test_canary_release_traffic_analysis_and_promotion(clone):
    """Policy release_via_canary: the gate's promote ships as canary; the CPU server serves it beside prod,
    logs traffic and outcomes; the analysis decides; `clap canary conclude` tags prod."""
    import time
    import urllib.request

    from clap.feedback.traffic import post

    root, env = clone
    params = (root / "params.yaml").read_text()
    for old, new in (("release_via_canary: false", "release_via_canary: true"), ("min_requests: 20", "min_requests: 2"),
                     ("alpha: 0.05", "alpha: 0.2"), ("beta: 0.1", "beta: 0.2")):
        assert old in params, old
        params = params.replace(old, new)
    (root / "params.yaml").write_text(params)
    run(root, "dvc", "repro", env=env)

    # human evaluation of this candidate's answers: blind export, (simulated) Label Studio export, import
    assert "tasks" in run(root, "clap", "human", "export", env=env)
    run(root, "clap", "demo-label", "--out", "ls_export.json", "--raters", "2", "--noise", "0", env=env)
    assert "labels by 2 annotators" in run(root, "clap", "human", "import", "ls_export.json", env=env)
    out = run(root, "dvc", "repro", env=env)
    # the verdict re-runs the gate and the bundle; the answers people flagged reach the repair queue; the labelled
    # agent episodes re-check the reward model, whose unchanged verdict re-runs no RL step
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    assert ran == {"agent_rm_check", "gate", "bundle", "repair_queue"}, ran
    assert json.loads((root / "metrics/agent_rm_check.json").read_text())["labelled_episodes"] > 0
    assert "human_flagged" in (root / "repair/queue.jsonl").read_text()
    gate = json.loads((root / "metrics/gate.json").read_text())
    assert gate["decision"] == "canary" and gate["reasons"][-1]["rule"] == "release_via_canary"
    assert not any(r["rule"] == "human_eval_missing" for r in gate["reasons"])  # the verdict is on this candidate
    bundled = {f["path"] for f in json.loads((root / "release/bundle.json").read_text())["files"]}
    assert "metrics/human.json" in bundled
    run(root, "git", "add", "-A", env=env)
    run(root, "git", "commit", "-qm", "run 3: canary first", env=env)
    run(root, "dvc", "push", "-q", env=env)
    assert "released v0.0.3 to canary" in run(root, "clap", "release", env=env)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(["clap", "canary", "serve", "--port", str(port)], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(240):
            try:
                health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=2).read())
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                time.sleep(0.5)
        assert health["arms"] == {"prod": "v0.0.1", "canary": "v0.0.3"}
        out = run(root, "clap", "canary", "traffic", "--paired", "--url", url, env=env)
        assert "prod 0/4" in out and "canary 0/4" in out  # a random tiny model answers nothing right
        out = run(root, "clap", "canary", "analyze", env=env)
        assert "INCONCLUSIVE" in out
        refused = subprocess.run(["clap", "canary", "conclude"], cwd=root, env=env, capture_output=True, text=True)
        assert refused.returncode == 2 and "serve more traffic" in refused.stdout
        # the application later reports the canary's answers worked and prod's did not (the last outcome counts)
        for row in map(json.loads, (root / "feedback/canary/requests.jsonl").read_text().splitlines()):
            post(f"{url}/v1/feedback", {"request_id": row["request_id"], "outcome": int(row["arm"] == "canary")})
    finally:
        server.terminate()
        server.wait(timeout=30)
    out = run(root, "clap", "canary", "analyze", env=env)
    assert "SUCCESSFUL" in out
    analysis = json.loads((root / "metrics/canary.json").read_text())
    assert analysis["pairing"] == "by_request" and analysis["sprt"]["outcome"] == "accept_h1"
    inbox = (root / "feedback/production.jsonl").read_text()
    assert "canary_failed" not in inbox  # the failures the first analysis queued were replaced by this one's
    _agent_canary(root, env)
    out = run(root, "clap", "canary", "conclude", env=env)
    assert "v0.0.3: successful → promoted to prod" in out
    assert json.loads((root / "release/prod.json").read_text())["version"] == "v0.0.3"
    assert "canary" not in run(root, "clap", "registry", env=env).split("v0.0.3", 1)[1].split("\n", 1)[0].replace(
        "#canary#", "").replace("#canary!#", "")
    # a dark launch of the (unreleased) pipeline candidate in one command: analysed, never concluded
    out = run(root, "clap", "canary", "demo", "--candidate", "models/sft/adapter", "--limit", "2", "--logs",
              "feedback/dark", env=env)
    assert "traffic: prod 0/2" in out and "INCONCLUSIVE" in out and "canary unreleased:" in out
    assert "v0.0.3" in run(root, "clap", "registry", env=env)  # the registry is untouched
