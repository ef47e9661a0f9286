"""Tracking: a tiny SFT logs its steps to DVCLive (the files dvc.yaml declares) and to an MLflow file store, and the
bundle's verdict reaches the MLflow run that trained the adapter."""

import copy
import json

import pytest

from clap import paths
from clap.config import Mlflow, Train
from clap.io import read_json, write_json
from clap.stages import train_sft
from clap.train import tracking
from clap.train.tracking import Tracking, TrackingUnavailable


def _train(params, report_to: list[str]) -> Train:
    """A `train` section that logs to `report_to` (the trainer's own keys are not read by `Tracking`)."""
    return params.train.model_copy(update={"report_to": report_to, "mlflow": Mlflow(tracking_uri="", experiment="x")})


def _tiny(params, tmp_path, report_to):
    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=3, logging_steps=1, save_steps=3, per_device_batch_size=2,
                               gradient_accumulation=1))
    cfg.train.report_to = report_to
    cfg.train.mlflow = Mlflow(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="clap-test")
    return cfg


def test_a_tiny_sft_logs_each_step_to_dvclive_and_mlflow(params, small_loop, tiny_dir, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    cfg = _tiny(params, tmp_path, ["dvclive", "mlflow"])
    run = Tracking("sft", cfg.train, root=tmp_path)
    out = tmp_path / "models" / "sft"
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, out,
                      tmp_path / "ckpt", callbacks=run.callbacks())
    manifest = read_json(out / "adapter" / "manifest.json")
    adapter_sha = manifest["files"]["adapter_model.safetensors"]
    m |= run.close(m, manifest["base_model"], adapter_sha)

    live = tmp_path / paths.dvclive("sft")  # the files the train_sft stage declares as metrics and plots
    loss = (live / "plots" / "metrics" / "loss.tsv").read_text().splitlines()
    assert loss[0].split("\t")[:2] == ["step", "loss"] and len(loss) - 1 == m["steps"] == 3  # a row per logged step
    assert [row.split("\t")[0] for row in loss[1:]] == ["1", "2", "3"]  # x: the trainer's global step
    assert {p.name for p in live.iterdir()} == {"metrics.json", "plots"}  # only what dvc.yaml declares
    summary = json.loads((live / "metrics.json").read_text())
    assert summary["loss"] > 0 and summary["train"]["loss"] == pytest.approx(m["train_loss"])

    record = m["tracking"]
    assert record["report_to"] == ["dvclive", "mlflow"] and record["dvclive"] == live.as_posix()
    client = mlflow.MlflowClient(tracking_uri=record["mlflow_tracking_uri"])
    logged = client.get_run(record["mlflow_run_id"])
    assert logged.info.status == "FINISHED" and logged.info.run_name == "sft"
    assert float(logged.data.params["learning_rate"]) == cfg.train.sft.learning_rate
    assert len(client.get_metric_history(logged.info.run_id, "loss")) == 3  # one point per logged step
    assert logged.data.metrics["clap.steps"] == 3
    assert logged.data.tags["clap.adapter_sha256"] == adapter_sha
    assert json.loads(logged.data.tags["clap.base_weights_sha256"]) == manifest["base_model"]["weights_sha256"]

    write_json(tmp_path / "train_sft.json", m)  # what `clap train` writes; `clap bundle` then tags the run
    assert tracking.log_release(tmp_path / "train_sft.json", "promote", "ab" * 32) == record["mlflow_run_id"]
    tags = client.get_run(record["mlflow_run_id"]).data.tags
    assert tags["clap.gate.decision"] == "promote" and tags["clap.bundle.sha256"] == "ab" * 32


def test_no_tracker_still_writes_the_declared_dvclive_files(params, tmp_path):
    run = Tracking("dpo", _train(params, []), root=tmp_path)
    assert run.callbacks() == []
    record = run.close({"status": "ok", "steps": 0})
    live = tmp_path / paths.dvclive("dpo")
    assert json.loads((live / "metrics.json").read_text()) == {}
    assert (live / "plots" / "metrics" / "loss.tsv").read_text() == "step\tloss\n"
    assert record == {"tracking": {"report_to": [], "dvclive": live.as_posix()}}
    assert tracking.log_release(tmp_path / "absent.json", "promote", "0" * 64) is None  # never logged: nothing to tag


def test_a_tracker_that_is_not_installed_is_one_line_before_training(params, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name == "mlflow":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    run = Tracking("sft", _train(params, ["mlflow"]), root=tmp_path)
    with pytest.raises(TrackingUnavailable, match=r"pip install 'clap-loop\[mlflow\]'"):
        run.callbacks()


def test_mlflow_uri_prefers_the_setting_then_the_environment_then_a_local_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.mlflow_uri("", tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")
    assert tracking.mlflow_uri("", tmp_path) == "http://mlflow.internal:5000"
    assert tracking.mlflow_uri("sqlite:////srv/mlflow.db", tmp_path) == "sqlite:////srv/mlflow.db"


def test_a_run_that_logs_no_step_still_writes_what_the_stage_declares(params, tmp_path):
    """A run resumed from its finished checkpoint trains no step: DVCLive still writes its summary at the end, but
    no plot, and `dvc repro` would fail on the missing `plots/metrics` output without the stand-in."""
    pytest.importorskip("dvclive")
    run = Tracking("sft", _tiny(params, tmp_path, ["dvclive"]).train, root=tmp_path)
    run.callbacks()  # the trainer would start here; a finished checkpoint means it has nothing to do
    run.close({"status": "ok", "steps": 0})
    live = tmp_path / paths.dvclive("sft")
    assert (live / "metrics.json").is_file()
    assert [p.name for p in (live / "plots" / "metrics").iterdir()] == ["loss.tsv"]  # a DVC output that exists


def test_the_mlflow_ui_environment_reads_the_store_the_mlflow_extra_writes():
    """`make mlflow-ui` installs the full `mlflow` (the UI) in its own environment at the version of the lock's
    mlflow-skinny: another version refuses the store ("out-of-date database schema")."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = re.search(r"^mlflow==(\S+)$", (root / "tools" / "mlflow-ui.in").read_text(), re.M)
    ui = re.search(r"^mlflow-skinny==(\S+)$", (root / "tools" / "mlflow-ui.lock").read_text(), re.M)
    pinned = re.search(r"^mlflow-skinny==(\S+)$", (root / "requirements.lock").read_text(), re.M)
    assert spec and ui and pinned and spec.group(1) == ui.group(1) == pinned.group(1), (spec, ui, pinned)


@pytest.mark.slow
def test_mlflow_server_shows_a_run_clap_logged(tmp_path):
    """The run CLAP's tracking logs (MLflow's client from the `mlflow` extra, the local SQLite store) as users
    read it: `mlflow server` from `make mlflow-ui`'s environment on a loopback port answers its web page and the
    run through the REST API."""
    import socket
    import subprocess
    import time
    import urllib.request
    from pathlib import Path

    mlflow = pytest.importorskip("mlflow")
    server_bin = Path(__file__).resolve().parents[2] / ".venv-mlflow" / "bin" / "mlflow"
    if not server_bin.exists():
        pytest.skip(f"{server_bin}: MLflow's UI is not installed (`make mlflow-env`)")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("clap")
    run = client.create_run(experiment, run_name="sft")
    client.log_metric(run.info.run_id, "loss", 1.25, step=3)
    client.set_tag(run.info.run_id, "clap.gate.decision", "promote")
    client.set_terminated(run.info.run_id)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(server_bin), "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                page = urllib.request.urlopen(url, timeout=10).read().decode()
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, server.stdout.read() if server.poll() else ""
                time.sleep(0.5)
        request = urllib.request.Request(f"{url}/api/2.0/mlflow/runs/search", method="POST",
                                         data=json.dumps({"experiment_ids": [experiment]}).encode(),
                                         headers={"Content-Type": "application/json"})
        runs = json.loads(urllib.request.urlopen(request, timeout=30).read())["runs"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "<title>MLflow</title>" in page and "static-files/static/js/main." in page  # the UI's page, its app
    assert [r["info"]["run_name"] for r in runs] == ["sft"]
    assert {m["key"]: m["value"] for m in runs[0]["data"]["metrics"]} == {"loss": 1.25}
    assert {t["key"]: t["value"] for t in runs[0]["data"]["tags"]}["clap.gate.decision"] == "promote"
