"""Mistakes a careless user makes, met the way the user meets them: the `clap` command, its one-line
message, exit code 2, no traceback — and nothing lost or changed on disk (issue: trust the chain).
"""

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from tests.conftest import ROOT
from typer.testing import CliRunner

from clap.cli import app
from clap.demo import corpus as demo_data


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    demo_data.write(raw, seed=3, scale=0.1)
    return raw


def clap(*args: str):
    """`clap ARGS` in-process, as the user types it; returns (exit code, output)."""
    r = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return r.exit_code, r.output


def one_line_error(code: int, out: str, *needles: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), out
    for n in needles:
        assert n in out, (n, out)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def raw_with(corpus: Path, dst: Path, **tables) -> Path:
    """A raw folder: the corpus' JSONL tables, with the given ones replaced (name.ext → bytes or rows)."""
    dst.mkdir(parents=True, exist_ok=True)
    replaced = {k.split(".")[0] for k in tables}
    for name in ("chunks", "facts", "decisions"):
        if name not in replaced:
            shutil.copy(corpus / f"{name}.jsonl", dst / f"{name}.jsonl")
    for key, content in tables.items():
        name, ext = key.split(".")
        if isinstance(content, bytes):
            (dst / f"{name}.{ext}").write_bytes(content)
        else:
            (dst / f"{name}.{ext}").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in content))
    return dst


def rows(corpus: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (corpus / f"{name}.jsonl").read_text().splitlines()]


def conserved(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    for name, e in report["inputs"].items():
        assert e["rows_in"] == e["kept"] + e["quarantined"], name
    return report


# ---------------------------------------------------------------- 1. destructive output paths
@pytest.mark.parametrize("out_of", ["raw", "parent", "child", "unrelated", "file_parent"])
def test_assetize_never_replaces_what_it_did_not_create(corpus, tmp_path, out_of):
    raw = tmp_path / "proj" / "raw"
    shutil.copytree(corpus, raw)
    (tmp_path / "proj" / "notes").mkdir()
    (tmp_path / "proj" / "notes" / "keep.txt").write_text("mine")
    (tmp_path / "proj" / "a_file").write_text("mine")
    out = {"raw": raw, "parent": tmp_path / "proj", "child": raw / "assets", "unrelated": tmp_path / "proj" / "notes",
           "file_parent": tmp_path / "proj" / "a_file" / "assets"}[out_of]
    before = snapshot(tmp_path / "proj")
    code, text = clap("assetize", "--raw", str(raw), "--out", str(out))
    one_line_error(code, text, str(out))
    assert snapshot(tmp_path / "proj") == before


def test_assetize_replaces_its_own_output_and_clears_what_killed_runs_left(corpus, tmp_path):
    out = tmp_path / "assets"
    assert clap("assetize", "--raw", str(corpus), "--out", str(out))[0] == 0
    assert (out / ".clap-output").is_file()
    stale = tmp_path / ".assets.tmp-999999-killed"  # a run killed mid-write (no such process now)
    stale.mkdir()
    (stale / "facts.parquet").write_text("half")
    assert clap("assetize", "--raw", str(corpus), "--out", str(out))[0] == 0
    assert not stale.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["assets"]


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   OSError(errno.EROFS, "Read-only file system"),
                                   OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")])
def test_full_or_read_only_disk_is_one_line_and_keeps_the_previous_output(corpus, tmp_path, monkeypatch, error):
    """The last one is how pyarrow's writer words it, without an errno."""
    out = tmp_path / "assets"
    assert clap("assetize", "--raw", str(corpus), "--out", str(out))[0] == 0
    before = snapshot(out)

    def disk_full(*a, **k):
        raise error

    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    code, text = clap("assetize", "--raw", str(corpus), "--out", str(out))
    one_line_error(code, text, str(out), "cannot write")
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["assets"]


# ---------------------------------------------------------------- 4. config that fails early, in one line
@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def set_param(root: Path, dotted: str, value) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    node = params
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.mark.parametrize("key, value, named", [
    ("train.sft.learning_rate", "fast", "train.sft.learning_rate"),
    ("materialize.eval_fraction", "high", "materialize.eval_fraction"),
    ("materialize.eval_fraction", 1.5, "materialize.eval_fraction"),
    ("materialize.max_train_per_batch", -3, "materialize.max_train_per_batch"),
    ("evaluate.batch_size", 0, "evaluate.batch_size"),
    ("data.batches", "b1", "data.batches"),
    ("train.sft.epochs", 2.5, "train.sft.epochs"),
    ("retrieval.mode", "semantic", "retrieval.mode"),
    ("train.sft.learning_rat", 1e-4, "unknown key train.sft.learning_rat"),
])
def test_bad_config_stops_every_command_before_work_in_one_line(project, key, value, named):
    set_param(project, key, value)
    for cmd in (["params", "--check"], ["materialize", "b1"], ["admit", "b1"], ["gate"]):
        one_line_error(*clap(*cmd), "params.yaml", named)
    assert not (project / "data").exists()


def test_params_check_reads_the_conf_of_the_working_directory(project):
    assert clap("params", "--check")[0] == 0
    text = (project / "conf/config.yaml").read_text().replace("  seed: 17\n", "  seed: 18\n", 1)
    (project / "conf/config.yaml").write_text(text)
    one_line_error(*clap("params", "--check"), "params.yaml differs")


def test_an_invalid_override_is_never_queued(project, monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or subprocess.CompletedProcess(a, 0))
    one_line_error(*clap("exp", "run", "--queue", "-S", "materialize.eval_fraction=high"), "materialize.eval_fraction")
    one_line_error(*clap("exp", "run", "--queue", "-S", "train.sft.nope=1"), "train.sft.nope")
    assert calls == []
    assert clap("exp", "run", "--queue", "-S", "train.sft.epochs=3")[0] == 0
    assert calls == [(["dvc", "exp", "run", "--queue", "-S", "train.sft.epochs=3"],)]


# ---------------------------------------------------------------- 5. input read wrongly or crashing
def test_decisions_from_a_spreadsheet_csv_equal_the_jsonl(corpus, tmp_path):
    decisions = pd.DataFrame(rows(corpus, "decisions"))
    decisions["causes"] = decisions["causes"].map(lambda c: json.dumps(c, ensure_ascii=False))
    raw = raw_with(corpus, tmp_path / "raw", **{"decisions.csv": decisions.to_csv(index=False).encode()})
    assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "csv"))[0] == 0
    assert clap("assetize", "--raw", str(corpus), "--out", str(tmp_path / "jsonl"))[0] == 0
    got, want = (pd.read_parquet(tmp_path / d / "decisions.parquet") for d in ("csv", "jsonl"))
    pd.testing.assert_frame_equal(got, want)


def facts_csv(corpus: Path) -> pd.DataFrame:
    return pd.DataFrame(rows(corpus, "facts")).astype({"value": str})


def test_utf16_and_bom_csv_read_like_utf8(corpus, tmp_path):
    for enc in ("utf-16", "utf-8-sig"):
        raw = raw_with(corpus, tmp_path / enc, **{"facts.csv": facts_csv(corpus).to_csv(index=False).encode(enc)})
        assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / f"out-{enc}"))[0] == 0
        assert conserved(tmp_path / f"out-{enc}")["inputs"]["facts"]["rows_in"] == len(rows(corpus, "facts"))


def test_gbk_csv_is_refused_naming_the_file_and_encoding(corpus, tmp_path):
    zh = facts_csv(corpus)
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.csv": zh.to_csv(index=False).encode("gb18030")})
    one_line_error(*clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out")),
                   "facts.csv: not UTF-8", "gb18030")
    assert not (tmp_path / "out").exists()


def test_one_stray_byte_quarantines_that_row_only(corpus, tmp_path):
    lines = facts_csv(corpus).to_csv(index=False).encode().split(b"\n")
    lines[4] = lines[4].replace(b",", b",\xff", 1)
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.csv": b"\n".join(lines)})
    assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))[0] == 0
    conserved(tmp_path / "out")
    q = [json.loads(x) for x in (tmp_path / "out/quarantine.jsonl").read_text().splitlines()]
    assert [(x["rule"], x["row"]) for x in q if x["rule"] == "non_utf8"] == [("non_utf8", 5)]


@pytest.mark.parametrize("table", ["chunks", "facts", "decisions"])
def test_a_table_whose_every_row_is_invalid_is_quarantined_whole(corpus, tmp_path, table):
    broken = [{**r, "lang": "fr"} for r in rows(corpus, table)]
    raw = raw_with(corpus, tmp_path / "raw", **{f"{table}.jsonl": broken})
    assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))[0] == 0
    report = conserved(tmp_path / "out")
    assert report["inputs"][table]["kept"] == 0 and report["inputs"][table]["quarantined"] == len(broken)
    assert len(pd.read_parquet(tmp_path / "out" / f"{table}.parquet")) == 0


def test_header_only_csv_gives_an_empty_asset(corpus, tmp_path):
    raw = raw_with(corpus, tmp_path / "raw", **{"chunks.csv": b"chunk_id,doc_id,page,text,lang,batch\n"})
    assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))[0] == 0
    report = conserved(tmp_path / "out")
    assert report["inputs"]["chunks"]["rows_in"] == 0 and report["verifiable_facts"] == 0


def test_duplicated_csv_column_is_refused_naming_it(corpus, tmp_path):
    text = facts_csv(corpus).to_csv(index=False).replace(",question\n", ",value\n", 1)
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.csv": text.encode()})
    one_line_error(*clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out")),
                   "facts.csv: column 'value' appears twice")


def test_boolean_page_and_look_alike_batch_ids_are_not_silent(corpus, tmp_path):
    facts = rows(corpus, "facts")
    facts[0]["page"], facts[1]["batch"], facts[2]["batch"] = True, f" {facts[1]['batch']} ", facts[2]["batch"].upper()
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.jsonl": facts})
    code, text = clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))
    assert code == 0 and "warning: batch ids" in text and "look alike" in text
    report = conserved(tmp_path / "out")
    q = [json.loads(x) for x in (tmp_path / "out/quarantine.jsonl").read_text().splitlines()]
    assert any(x["row"] == 1 and x["rule"] == "type:int" and x["column"] == "page" for x in q)
    assert facts[1]["batch"].strip() in report["batches"]["rows"] and facts[1]["batch"] not in report["batches"]["rows"]


def test_materializing_a_batch_that_is_not_there_names_the_ones_that_are(corpus, tmp_path, project):
    assert clap("assetize", "--raw", str(corpus), "--out", str(tmp_path / "assets"))[0] == 0
    one_line_error(*clap("materialize", "B1", "--assets", str(tmp_path / "assets")), "batch 'B1' has no facts",
                   "batches present: b1, b2, b3, b4, b5")
    one_line_error(*clap("materialize", "b1", "--assets", str(tmp_path / "nowhere")), "nowhere/facts.parquet")


def test_missing_repaired_folder_is_an_error_not_ignored(corpus, tmp_path):
    one_line_error(*clap("assetize", "--raw", str(corpus), "--out", str(tmp_path / "out"), "--repaired",
                         str(tmp_path / "no/such/dir")), "no/such/dir", "--repaired")


def test_the_installed_command_prints_one_line_not_a_traceback(tmp_path):
    r = subprocess.run([str(Path(sys.executable).parent / "clap"), "assetize", "--raw", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr and "nope: no such folder" in r.stdout


def test_a_chain_step_from_an_unpinned_sft_adapter_is_refused_in_one_line(project, tiny_dir, sft_start):
    """`clap train dpo` continues only an SFT adapter that dvc.lock pins: a copied-in folder is refused."""
    set_param(project, "model.base", str(tiny_dir))
    shutil.copytree(sft_start[0], project / "models/sft/adapter")
    for b in yaml.safe_load((project / "params.yaml").read_text())["data"]["batches"]:  # the batches' inputs exist
        (project / "data/materialized" / b).mkdir(parents=True)
        (project / "data/admission").mkdir(parents=True, exist_ok=True)
        (project / "data/admission" / f"{b}.json").write_text("{}")
    for kind in ("dpo", "grpo"):
        one_line_error(*clap("train", kind), "models/sft/adapter", "not pinned by dvc.lock")
    assert not (project / "models" / "dpo").exists() and not (project / "models" / "grpo").exists()


# ---------------------------------------------------------------- 6. careless input, checked before the work
def test_a_raw_table_that_is_a_folder_is_one_line(corpus, tmp_path):
    raw = raw_with(corpus, tmp_path / "raw")
    (raw / "facts.jsonl").unlink()
    (raw / "facts.jsonl").mkdir()
    one_line_error(*clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out")), "facts.jsonl: is a folder")
    assert not (tmp_path / "out").exists()


def test_a_header_only_facts_csv_is_one_line_or_no_rows(corpus, tmp_path):
    header = ",".join(facts_csv(corpus).columns) + "\n"
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.csv": header.encode()})
    (raw / "facts.jsonl").unlink(missing_ok=True)
    code, text = clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))
    assert "Traceback" not in text
    if code == 0:  # an empty table is legal: nothing kept, nothing lost
        assert conserved(tmp_path / "out")["inputs"]["facts"]["rows_in"] == 0
    else:
        one_line_error(code, text, "facts.csv")


def test_a_key_repeated_inside_one_json_row_is_quarantined_never_resolved(corpus, tmp_path):
    facts = rows(corpus, "facts")
    lines = [json.dumps(r, ensure_ascii=False) for r in facts]
    lines[0] = lines[0][:-1] + ', "value": 99999}'  # the row names `value` twice: which one was meant?
    raw = raw_with(corpus, tmp_path / "raw", **{"facts.jsonl": ("\n".join(lines) + "\n").encode()})
    assert clap("assetize", "--raw", str(raw), "--out", str(tmp_path / "out"))[0] == 0
    report = conserved(tmp_path / "out")
    quarantine = [json.loads(line) for line in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    dup = [q for q in quarantine if q["rule"] == "duplicate_key"]
    assert len(dup) == 1 and dup[0]["row"] == 1 and "99999" in dup[0]["original"], dup
    assert report["inputs"]["facts"]["rows_in"] == len(facts)


def test_a_duplicate_key_in_an_evidence_file_holds_the_gate_naming_it(project):
    """JSON the gate reads is parsed strictly: a repeated key is not silently resolved to its last value."""
    from clap.io import InputFileError, read_json

    path = project / "twice.json"
    path.write_text('{"decision": "hold", "decision": "promote"}')
    with pytest.raises(InputFileError, match="twice.json: not a valid JSON document .*'decision' appears twice"):
        read_json(path)


@pytest.mark.parametrize("cmd, named", [
    (["admit", "b1"], "data/materialized/b1/data_quality.json: missing (made by `dvc repro materialize@b1`"),
    (["train", "sft"], "data/admission/b1.json: missing (made by `dvc repro admit@b1`"),
    (["train", "dpo", "--batch", "b1"], "data/admission/b1.json: missing"),
    (["train", "agent-dpo"], "data/agent_pairs: missing (made by `dvc repro agent_pairs`"),
    (["evaluate", "b1"], "data/materialized/b1/sft_eval.jsonl: missing (made by `dvc repro materialize@b1`"),
    (["evaluate-decisions"], "data/materialized/b1/decision_eval.jsonl: missing"),
    (["index"], "data/assets: missing (made by `dvc repro assetize`"),
    (["replay"], "data/assets: missing"),
    (["bundle"], "metrics/gate.json: missing (made by `dvc repro gate`"),
    (["agent-tasks"], "data/assets: missing"),
    (["agent-pairs"], "data/agent: missing (made by `dvc repro agent_tasks`"),
    (["evaluate-agent"], "data/agent: missing"),
    (["human", "export"], "metrics/eval/b1.json: missing (made by `dvc repro evaluate@b1`"),
])
def test_a_batch_never_materialized_is_named_before_any_model_loads(project, monkeypatch, cmd, named):
    from clap import model

    monkeypatch.setattr(model, "resolve_base", lambda *a, **k: pytest.fail("the base model was converted first"))
    one_line_error(*clap(*cmd), named)


def test_two_writers_of_one_output_one_line_and_nothing_left(tmp_path):
    """The loser of two concurrent writers is refused in one line and leaves no temporary folder."""
    import multiprocessing
    import os

    from clap.io import OutputRefused, atomic_dir

    out = tmp_path / "assets"
    ready, done = multiprocessing.Event(), multiprocessing.Event()

    def first_writer():
        with atomic_dir(out) as tmp:
            (tmp / "x").write_text("first")
            ready.set()
            done.wait(30)

    p = multiprocessing.get_context("fork").Process(target=first_writer)
    p.start()
    assert ready.wait(30)
    with pytest.raises(OutputRefused, match=f"another clap process \\(pid {p.pid}\\) is writing it"):
        with atomic_dir(out):
            pytest.fail("the second writer got a folder")
    assert sorted(x.name for x in tmp_path.iterdir() if str(os.getpid()) in x.name) == []
    done.set()
    p.join(30)
    assert (out / "x").read_text() == "first"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["assets"]


def _racer(out, go, outcomes):
    import os
    import time

    from clap.io import OutputRefused, atomic_dir

    write = os.write

    def slow_write(fd, data):  # widens the window between taking a lock and writing its pid, where a race would hide
        time.sleep(0.002)
        return write(fd, data)

    os.write = slow_write
    go.wait(10)
    try:
        with atomic_dir(out) as tmp:
            holder = os.open(out.parent / "holder", os.O_CREAT | os.O_EXCL)  # a second holder fails here
            (tmp / "x").write_text(str(os.getpid()))
            os.close(holder)
            os.unlink(out.parent / "holder")
        outcomes.put("wrote")
    except OutputRefused as exc:
        outcomes.put("refused" if "is writing it" in str(exc) and "\n" not in str(exc) else f"bad message: {exc}")
    except BaseException as exc:  # a double holder, a raw OSError: the test names it
        outcomes.put(f"{type(exc).__name__}: {exc}")


def test_two_writers_racing_a_thousand_times_never_both_hold_the_lock(tmp_path):
    """1,000 rounds of two processes started together on one output: each round one writes and the other is
    refused in one line (or both write, one after the other), never both at once, and nothing is left behind."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    seen = {}
    for n in range(1000):
        root = tmp_path / f"r{n}"
        root.mkdir()
        go, outcomes = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(root / "assets", go, outcomes)) for _ in range(2)]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(30)
        got = sorted(outcomes.get(timeout=10) for _ in procs)
        assert got in (["refused", "wrote"], ["wrote", "wrote"]), (n, got)
        assert sorted(x.name for x in root.iterdir()) == ["assets"], (n, list(root.iterdir()))
        seen[tuple(got)] = seen.get(tuple(got), 0) + 1
    assert seen.get(("refused", "wrote"), 0) > 0  # the race was run, not two writers one after the other each time


def test_a_killed_writers_lock_is_taken_over(tmp_path):
    from clap.io import atomic_dir

    out = tmp_path / "assets"
    (tmp_path / ".assets.lock").write_text("999999")  # no such process
    with atomic_dir(out) as tmp:
        (tmp / "x").write_text("ok")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["assets"]
