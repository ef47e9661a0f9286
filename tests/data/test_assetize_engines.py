"""Streaming assetize (issue #15): the same bytes whatever the units, the blocks and the engine; a Ray
cluster of two workers gives the local outputs and generations; a killed run leaves the last output."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from tests.conftest import ROOT

from clap.data import assets, near_dup
from clap.data.near_dup import near_duplicates
from clap.data.spill import unit_of
from clap.demo import corpus as demo_data
from clap.stages import assetize


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The demo corpus plus what only a corpus cut into units and blocks can get wrong: a fact pointing at a
    chunk of another document (a chunk one unit borrows from another), ids repeated far apart (in other
    blocks), the first of them invalid, and a repaired row superseding a raw one."""
    raw = tmp_path_factory.mktemp("raw")
    demo_data.write(raw, seed=11, scale=0.4)
    facts = [json.loads(line) for line in (raw / "facts.jsonl").read_text().splitlines()]
    chunks = [json.loads(line) for line in (raw / "chunks.jsonl").read_text().splitlines()]
    home = pd.util.hash_array(pd.Series([facts[3]["doc_id"]], dtype=object).to_numpy())[0]
    away = next(c["doc_id"] for c in chunks  # a document that no unit count up to 63 puts with facts[3]'s
                if all((int(home) - int(pd.util.hash_array(pd.Series([c["doc_id"]], dtype=object).to_numpy())[0])) % k
                       for k in range(2, 64)))
    facts.append(facts[3] | {"record_id": "borrower", "doc_id": away, "page": 99})  # its chunk is in facts[3]'s document
    facts.append(facts[10] | {"lang": "fr"})  # invalid first occurrence of facts[10]'s id … (see below)
    facts.insert(0, facts[-1])
    facts.pop()
    facts.append(facts[20])  # … and a plain repeat, hundreds of rows later
    (raw / "facts.jsonl").write_text("".join(json.dumps(f, ensure_ascii=False) + "\n" for f in facts))
    fixed = tmp_path_factory.mktemp("fixed")
    (fixed / "batch.jsonl").write_text(json.dumps(facts[30] | {"question": "repaired?"}, ensure_ascii=False) + "\n")
    return raw, fixed


def _settings(params, **overrides):
    return params.assetize.model_copy(update=overrides)


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "report.json"}


def _report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    report.pop("units")
    return report


def test_units_and_blocks_change_no_byte_of_the_output(params, corpus, tmp_path, monkeypatch):
    raw, fixed = corpus
    one = assetize.run(params.assetize, raw, tmp_path / "one", fixed)
    monkeypatch.setattr(assets, "MEMORY_PER_RAW_BYTE", 5e4)  # a budget far below the input: many units
    many = assetize.run(_settings(params, read_rows=37), raw, tmp_path / "many", fixed)
    assert one["units"] == 1 and many["units"] >= 4
    assert _files(tmp_path / "one") == _files(tmp_path / "many")
    assert _report(tmp_path / "one") == _report(tmp_path / "many")
    facts = pd.read_parquet(tmp_path / "many" / "facts.parquet")
    chunks = pd.read_parquet(tmp_path / "many" / "chunks.parquet").set_index("chunk_id")
    borrower = facts.set_index("record_id").loc["borrower"]
    homes = unit_of(pd.Series([borrower["doc_id"], chunks.loc[borrower["chunk_id"], "doc_id"]]), many["units"])
    assert homes[0] != homes[1] and borrower["verifiable"]  # verified against a chunk another unit holds
    rules = [(q["rule"], q["row"]) for q in map(json.loads, (tmp_path / "many" / "quarantine.jsonl").open())]
    n_facts = one["inputs"]["facts"]["rows_in"] - 1  # the raw file's rows (the repaired file holds one more)
    assert ("duplicate_id", n_facts) in rules  # the plain repeat, in another block than its first
    assert ("duplicate_id", 12) in rules  # valid, but its id was first met (invalid) at row 1
    assert rules.count(("superseded_by_repair", 31)) == 1  # facts[30], line 31
    assert many["repaired_rows_in"] == 1 and many["repaired_rows_verifiable"] == 1
    raw_ids = [json.loads(line)["record_id"] for line in (raw / "facts.jsonl").open()]
    repaired = {json.loads(line)["record_id"] for line in (fixed / "batch.jsonl").open()}
    for batch in facts["batch"].unique():  # each batch file is in input order: raw file, then the repaired one
        kept = facts.loc[facts["batch"] == batch, "record_id"].tolist()
        assert kept == sorted(kept, key=lambda r: len(raw_ids) if r in repaired else raw_ids.index(r))


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two worker CPUs on 127.0.0.1, started as a user would (`ray start --head`).
    Token authentication off: a throwaway cluster that only this test's processes on this machine reach."""
    ray_cli = Path(sys.executable).parent / "ray"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([str(ray_cli), "start", "--head", "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
                    "--port", str(port), "--include-dashboard", "false", "--disable-usage-stats"],
                   check=True, capture_output=True, timeout=180)
    os.environ["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    try:
        yield os.environ["RAY_ADDRESS"]
    finally:
        import ray

        ray.shutdown()
        subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, timeout=120)
        os.environ.pop("RAY_ADDRESS", None)
        os.environ.pop("RAY_AUTH_MODE", None)


def test_a_two_worker_ray_cluster_gives_the_local_outputs(params, corpus, tiny_dir, ray_cluster, tmp_path, monkeypatch):
    import ray

    from clap.evaluate.generate import Engine
    from clap.evaluate.generate_ray import RayEngine

    raw, fixed = corpus
    ray.init(address=ray_cluster)
    monkeypatch.setattr(assets, "MEMORY_PER_RAW_BYTE", 5e4)
    local = assetize.run(_settings(params, read_rows=50), raw, tmp_path / "local", fixed)
    on_ray = assetize.run(_settings(params, read_rows=50), raw, tmp_path / "ray", fixed, engine="ray")
    assert local["units"] == on_ray["units"] >= 4
    assert len({n["NodeManagerAddress"] for n in ray.nodes()}) == 1 and ray.cluster_resources()["CPU"] == 2
    assert _files(tmp_path / "local") == _files(tmp_path / "ray")
    assert _report(tmp_path / "local") == _report(tmp_path / "ray")

    monkeypatch.setattr(near_dup, "BLOCK", 50)  # materialize's near-duplicate search, its blocks as Ray tasks
    texts = pd.read_parquet(tmp_path / "local" / "facts.parquet")["question"].tolist()
    train, holdout = texts[: len(texts) // 2], texts[len(texts) // 2:]
    on_ray = near_duplicates(train, holdout, 0.5, 128, "ray", 2, tmp_path)
    assert on_ray == near_duplicates(train, holdout, 0.5, 128) and 0 < sum(on_ray) < len(train)

    conversations = [[{"role": "user", "content": f"Revenue of company {i} in 202{i % 10}? Answer in JSON."}]
                     for i in range(9)]
    here = Engine(tiny_dir).generate(conversations, use_adapter=False, max_new_tokens=12, batch_size=4, progress=False)
    spread = RayEngine({"base_dir": tiny_dir}, workers=2).generate(conversations, use_adapter=False, max_new_tokens=12,
                                                                   batch_size=4)
    assert [g.text for g in spread] == [g.text for g in here]
    assert [g.new_tokens for g in spread] == [g.new_tokens for g in here]


# assetize in a process that stops itself mid-run: after the read phase has spilled its rows, where the global steps
# begin, it writes a marker and sleeps. The test kills it there: no race between the run's end and a deadline.
FROZEN_MID_RUN = """
import sys, time
from pathlib import Path
from clap.config import load
from clap.data import duck
from clap.stages import assetize

def frozen(*args, **kwargs):
    Path(sys.argv[3]).write_text("mid-run")
    time.sleep(3600)

duck.connect = frozen
assetize.run(load(Path(sys.argv[4])).assetize, Path(sys.argv[1]), Path(sys.argv[2]))
"""


def test_a_killed_run_leaves_the_previous_output_and_the_next_run_clears_it(tmp_path):
    raw = tmp_path / "raw"
    demo_data.write(raw, seed=2, scale=1)
    out = tmp_path / "assets"
    clap = [str(Path(sys.executable).parent / "clap"), "assetize", "--raw", str(raw), "--out", str(out)]
    subprocess.run(clap, check=True, cwd=ROOT, capture_output=True)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    marker = tmp_path / "mid-run"
    run = subprocess.Popen([sys.executable, "-c", FROZEN_MID_RUN, str(raw), str(out), str(marker),
                            str(ROOT / "params.yaml")], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not marker.exists():
        assert run.poll() is None, run.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    assert list(tmp_path.glob(".assets.tmp-*/_work/rows"))  # rows spilled: the run is mid-stream
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert list(tmp_path.glob(".assets.tmp-*"))  # the half-written folder is beside, never in, the output
    subprocess.run(clap, check=True, cwd=ROOT, capture_output=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets", "mid-run", "raw"]


def test_a_column_missing_from_one_block_quarantines_those_rows_not_the_file(params, tmp_path):
    raw = tmp_path / "raw"
    demo_data.write(raw, seed=4, scale=0.1)
    lines = (raw / "facts.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for r in rows[:5]:  # the whole first block (read_rows 5) lacks `lang`
        r.pop("lang")
    (raw / "facts.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    report = assetize.run(_settings(params, read_rows=5), raw, tmp_path / "out")
    quarantined = [q for q in map(json.loads, (tmp_path / "out" / "quarantine.jsonl").open()) if q["column"] == "lang"]
    assert [q["row"] for q in quarantined if q["row"] <= 5] == [1, 2, 3, 4, 5]
    assert report["inputs"]["facts"]["rows_in"] == len(rows)
