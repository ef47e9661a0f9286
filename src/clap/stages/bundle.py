"""bundle: an evidence bundle per candidate the gate judged, the shipped one's adapter as the `clap-adapter`
artifact, and the verdict on each candidate's MLflow run.

    clap bundle                (DVC stage `bundle`, writes release/bundle.json, release/bundles/, models/shipped/)

The bundle pins by sha256 everything a verdict rests on (`clap.release.bundle`); `release/bundle.json` is the
shipped candidate's, the one a release commits.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import Params, read
from clap.io import require_inputs, sha256_file
from clap.release import bundle
from clap.stages.spec import StageSpec
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


def main(params: Params, out: Path = paths.BUNDLE, each: Path = paths.BUNDLES) -> list[str]:
    """Write an evidence bundle per candidate (hashes of everything its verdict rests on); `out` = the shipped one's."""
    result = run(Path("."), read(Path("params.yaml")), out, each)  # the bundle pins the file as written
    lines = [f"bundle {c} → {each / (c + '.json')}: {len(res.files)} files pinned, "
             f"verdict {result['verdicts'].get(c, res.decision['decision'])}" for c, res in result["written"].items()]
    lines += [f"bundle {c}: none — the gate judged it but models/{c}/adapter holds no adapter" for c in result["missing"]]
    lines.append(f"bundle → {out}: the shipped candidate {result['shipped']}, decision "
                 f"{result['decision']['decision']}; its adapter → {paths.SHIPPED}/adapter (the `clap-adapter` artifact)")
    return lines + [f"mlflow run {run_id} ({c}): tagged with its verdict and the bundle's sha256"
                    for c, run_id in result["mlflow_runs"].items()]


STAGE = StageSpec(name="bundle", group="release", main=main, helps={
    "out": "the bundle of the candidate the gate ships",
    "each": "one bundle per candidate the gate judged: <candidate>.json"})
