"""Where a training run shows up besides the pipeline's own files: DVCLive by default, MLflow as an option.

    train.report_to: [dvclive]            # conf/config.yaml; [dvclive, mlflow] or [] also valid
    train.mlflow.tracking_uri: ""         # "" = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the project

DVCLive writes each trainer's per-step log into `metrics/dvclive/<trainer>/` (`metrics.json`, the last values,
and `plots/metrics/*.tsv`, one row per logged step at the trainer's global step), the files that trainer's
`dvc.yaml` stage declares as an output and plots: `dvc plots show`, `dvc exp show` and Studio read them where they
already look. A trainer that did not run (switched off, or DVCLive not asked for) still writes that folder, empty of
steps, so the pipeline's outputs exist.

MLflow gets one run per trainer in the experiment `train.mlflow.experiment`: TrainingArguments and the model's
config as params (transformers' `MLflowCallback`), the per-step metrics, then CLAP's own summary, the base model's
identity and the adapter's sha256 as tags. `clap bundle` later tags the same run with the gate's decision and the
evidence bundle's sha256 (`log_release`), so the run that trained an adapter says whether it may ship.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from clap import paths
from clap.config import Train
from clap.errors import UserError
from clap.io import InputFileError, read_json

TRACKERS = ("dvclive", "mlflow")


class TrackingUnavailable(UserError, RuntimeError):
    """A tracker named in `train.report_to` is not installed; the message says how to install it."""


def mlflow_uri(setting: str, root: Path = Path(".")) -> str:
    """The MLflow tracking URI: `train.mlflow.tracking_uri`, else $MLFLOW_TRACKING_URI, else a SQLite store
    `<root>/mlflow.db` (`mlflow ui --backend-store-uri sqlite:///mlflow.db`). MLflow 3 refuses its old file store
    (`./mlruns`) unless MLFLOW_ALLOW_FILE_STORE is set; SQLite is the local store it keeps developing."""
    return setting or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(Path(root).resolve() / 'mlflow.db')}"


class Tracking:
    """The trackers of one training run: `callbacks()` before `trainer.train()`, `close(metrics, adapter_sha256)`
    after the run's outputs are written. Returns what the run's metrics record about where it was logged."""

    def __init__(self, kind: str, train_cfg: Train, root: Path = Path(".")):
        self.kind, self.root = kind, Path(root)
        self.report_to = list(train_cfg.report_to)
        self.mlflow_cfg = train_cfg.mlflow
        self.dvclive_dir = self.root / paths.dvclive(kind)
        self.run_id: str | None = None
        self._live = None

    def callbacks(self) -> list:
        """The transformers callbacks of the trackers asked for (each started here: a missing package fails before
        the first step, not after the run)."""
        out = []
        if "dvclive" in self.report_to:
            try:
                from dvclive import Live
                _StepsOnly = _steps_only()
            except ImportError:
                raise TrackingUnavailable("train.report_to names dvclive, which is not installed: "
                                          "pip install dvclive (or set train.report_to: [])") from None
            if self.dvclive_dir.exists():
                shutil.rmtree(self.dvclive_dir)  # this trainer's own output: a fresh run's log, not two interleaved
            self._live = Live(dir=str(self.dvclive_dir), save_dvc_exp=False, dvcyaml=None, report=None)
            out.append(_StepsOnly(live=self._live, log_model=False))
        if "mlflow" in self.report_to:
            mlflow = _mlflow()
            from transformers.integrations import MLflowCallback

            mlflow.set_tracking_uri(mlflow_uri(self.mlflow_cfg.tracking_uri, self.root))
            mlflow.set_experiment(self.mlflow_cfg.experiment)
            run = mlflow.start_run(run_name=self.kind, tags={"clap.trainer": self.kind})
            self.run_id = run.info.run_id
            out.append(MLflowCallback())  # logs into the run started here; it leaves ending it to `close`
        return out

    def close(self, metrics: dict, base_identity: dict | None = None, adapter_sha256: str | None = None) -> dict:
        """End the trackers; the record of where this run was logged (added to the trainer's metrics)."""
        if self._live is not None:
            self._live.end()
        complete_outputs(self.dvclive_dir)  # not asked for, or no step logged (a short run, a finished checkpoint)
        record = {"tracking": {"report_to": self.report_to, "dvclive": self.dvclive_dir.as_posix()}}
        if self.run_id is not None:
            mlflow = _mlflow()
            summary = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            mlflow.log_metrics({f"clap.{k}": float(v) for k, v in summary.items()})
            tags = {"clap.status": str(metrics.get("status"))}
            if base_identity:
                weights = base_identity["weights_sha256"]  # {file: sha256} of the base's weight files
                tags |= {"clap.base_model": base_identity["name"], "clap.base_weights_sha256":
                         weights if isinstance(weights, str) else json.dumps(weights, sort_keys=True)}
            if adapter_sha256:
                tags["clap.adapter_sha256"] = adapter_sha256
            mlflow.set_tags(tags)
            mlflow.end_run(status="FINISHED" if metrics.get("status") == "ok" else "FAILED")
            record["tracking"] |= {"mlflow_run_id": self.run_id,
                                   "mlflow_tracking_uri": mlflow_uri(self.mlflow_cfg.tracking_uri, self.root)}
        return record


def _steps_only():
    from transformers.integrations import DVCLiveCallback

    class StepsOnly(DVCLiveCallback):
        """DVCLive's callback without its params.yaml: the run's settings are the pipeline's params.yaml, which the
        stage declares, and the folder holds only the files dvc.yaml declares (a stray file would dirty the tree)."""

        def setup(self, args, state, model):
            self._initialized = True

        def on_log(self, args, state, control, model=None, logs=None, **kwargs):
            # the plots' x axis is the trainer's global step (DVCLive's own counts the logs: 0, 1, 2, … whatever
            # logging_steps is), so a curve lines up with the checkpoints and with MLflow's
            self.live.step = state.global_step
            super().on_log(args, state, control, model=model, logs=logs, **kwargs)

    return StepsOnly


def complete_outputs(folder: Path) -> None:
    """What the stage declares, whatever DVCLive wrote: `metrics.json` and a non-empty `plots/metrics/`. DVCLive
    writes its summary at the end of every run but a plot only for a step it logged, so a run that logged none (a
    trainer resumed from its finished checkpoint) leaves no plot; a header-only loss plot stands in (an empty
    folder is no DVC output)."""
    folder = Path(folder)
    plots = folder / "plots" / "metrics"
    if not plots.is_dir() or not any(plots.iterdir()):
        plots.mkdir(parents=True, exist_ok=True)
        (plots / "loss.tsv").write_text("step\tloss\n", encoding="utf-8")
    if not (folder / "metrics.json").exists():
        (folder / "metrics.json").write_text("{}\n", encoding="utf-8")


def write_empty(folder: Path) -> None:
    """The DVCLive folder of a trainer that logged no step: `metrics.json` `{}` and a header-only loss plot, the
    outputs its stage declares."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    complete_outputs(folder)


def log_release(train_metrics: Path, decision: str, bundle_sha256: str) -> str | None:
    """Tag the MLflow run that trained a candidate (its id in `train_metrics`, `metrics/train_<kind>.json`) with
    the gate's decision and its evidence bundle's sha256. Returns the run id, or None when that run was not
    logged to MLflow."""
    try:
        record = read_json(train_metrics).get("tracking") or {}
    except (OSError, InputFileError, AttributeError):
        return None
    run_id = record.get("mlflow_run_id")
    if not run_id:
        return None
    mlflow = _mlflow()
    client = mlflow.MlflowClient(tracking_uri=record["mlflow_tracking_uri"])
    client.set_tag(run_id, "clap.gate.decision", decision)
    client.set_tag(run_id, "clap.bundle.sha256", bundle_sha256)
    return run_id


def _mlflow():
    try:
        import mlflow
    except ImportError:
        raise TrackingUnavailable("train.report_to names mlflow, which is not installed: "
                                  "pip install 'clap-loop[mlflow]' (or remove it from train.report_to)") from None
    return mlflow
