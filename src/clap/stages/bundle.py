"""bundle: an evidence bundle per candidate the gate judged, the shipped one's adapter as the `clap-adapter`
artifact, and the verdict on each candidate's MLflow run.

    clap bundle                (DVC stage `bundle`, writes release/bundle.json, release/bundles/, models/shipped/)

The bundle pins by sha256 everything a verdict rests on (`clap.release.bundle`); `release/bundle.json` is the
shipped candidate's, the one a release commits.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.io import require_inputs, sha256_file
from clap.release import bundle
from clap.train.tracking import log_release


def run(root: Path, params: dict, out: Path, each: Path) -> dict:
    """Write every candidate's bundle into `each`, the shipped one's to `out` and its adapter to models/shipped.
    Returns {written: candidate → bundle, missing: candidates without an adapter, verdicts, shipped, decision,
    mlflow_runs: candidate → run id tagged}."""
    root = Path(root)
    require_inputs([(root / paths.GATE, "dvc repro gate")])
    written, missing = bundle.write_each(root, params, out, each)
    decision = next(iter(written.values())).decision  # the gate record, the same in every bundle
    verdicts = {c: v["decision"] for c, v in (decision.get("candidates") or {}).items()}
    shipped = decision.get("candidate", "sft")
    bundle.write_shipped(root, written[shipped], root / paths.adapter(shipped), root / paths.SHIPPED)
    runs = {}
    for c in written:  # the MLflow run that trained each candidate (train.report_to: mlflow) learns its verdict
        run_id = log_release(root / paths.train_metrics(c), verdicts.get(c, decision["decision"]),
                             sha256_file(each / f"{c}.json"))
        if run_id:
            runs[c] = run_id
    return {"written": written, "missing": missing, "verdicts": verdicts, "shipped": shipped, "decision": decision,
            "mlflow_runs": runs}
