"""Evidence bundle per candidate (DESIGN §6): everything needed to re-check a release decision.

    clap bundle                # DVC stage `bundle`: writes release/bundle.json (tracked by git)
    clap verify release/bundle.json

The bundle pins, by sha256: the adapter files, each materialized batch (its dataset version, with
DVC's own directory hash from dvc.lock when there is one), the evaluation and replay records, the
regressed samples, guard reports, admission records and the gate decision; plus the composed
configuration, the base model's identity and the code commit. `verify` recomputes every hash.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from clap.io import read_json, sha256_file, write_json
from clap.schemas import BundleFile, EvidenceBundle


class BundleMismatch(RuntimeError):
    """A file no longer matches the bundle; the message names it."""


ROLES = [  # (glob, role)
    ("models/{c}/adapter/adapter_config.json", "adapter"),
    ("models/{c}/adapter/adapter_model.safetensors", "adapter"),
    ("models/{c}/adapter/manifest.json", "adapter"),
    ("models/*/guard_report.json", "guard_report"),
    ("models/*/train_metrics.json", "train_metrics"),
    ("data/materialized/*/*.jsonl", "dataset"),
    ("data/materialized/*/data_quality.json", "dataset"),
    ("data/admission/*.json", "admission"),
    ("data/eval/*/records.jsonl", "eval_records"),
    ("data/eval/*/regressed_samples.jsonl", "regressed_samples"),
    ("metrics/eval/*.json", "eval_metrics"),
    ("data/replay/records.jsonl", "replay_records"),
    ("data/replay/failed_cases.jsonl", "replay_failed"),
    ("metrics/replay.json", "replay_metrics"),
    ("metrics/gate.json", "gate_decision"),
]


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def _dvc_dir_hashes(root: Path) -> dict[str, str]:
    lock = root / "dvc.lock"
    if not lock.exists():
        return {}
    data = yaml.safe_load(lock.read_text()) or {}
    out = {}
    for stage in (data.get("stages") or {}).values():
        for o in stage.get("outs", []):
            if "md5" in o:
                out[o["path"]] = o["md5"]
    return out


def build(root: Path, params: dict, candidate: str = "sft") -> EvidenceBundle:
    from clap import model

    root = Path(root)
    files = []
    for pattern, role in ROLES:
        for p in sorted(root.glob(pattern.format(c=candidate))):
            files.append(BundleFile(path=str(p.relative_to(root)), sha256=sha256_file(p), role=role))
    base = model.identity(root / params["model"]["cache_dir"]) if params["model"]["base"] == "smollm2" \
        else model.identity(Path(params["model"]["base"]))
    base["path"] = str(Path(base["path"]).relative_to(root)) if Path(base["path"]).is_relative_to(root) else base["path"]
    dvc = _dvc_dir_hashes(root)
    versions = {}
    for b in params["data"]["batches"]:
        members = sorted(f"{f.path}:{f.sha256}" for f in files if f.path.startswith(f"data/materialized/{b}/"))
        versions[b] = hashlib.sha256("\n".join(members).encode()).hexdigest()
        if f"data/materialized/{b}" in dvc:
            versions[f"{b}:dvc_md5"] = dvc[f"data/materialized/{b}"]
    decision = read_json(root / "metrics/gate.json")
    config_text = json.dumps(params, sort_keys=True)
    return EvidenceBundle(candidate=candidate, code_commit=git_commit(root), base_model=base,
                          config_sha256=hashlib.sha256(config_text.encode()).hexdigest(), config=params, files=files,
                          decision=decision, dataset_versions=versions)


def write(root: Path, params: dict, out: Path, candidate: str = "sft") -> EvidenceBundle:
    b = build(root, params, candidate)
    write_json(out, b.model_dump())
    return b


def verify(bundle_path: Path, root: Path | None = None) -> EvidenceBundle:
    """Recompute every hash; raise BundleMismatch naming the first file that differs."""
    from clap import model

    bundle_path = Path(bundle_path)
    try:
        b = EvidenceBundle.model_validate(read_json(bundle_path))
    except (ValueError, json.JSONDecodeError) as exc:
        raise BundleMismatch(f"{bundle_path}: not a valid evidence bundle ({str(exc)[:200]})") from exc
    root = Path(root) if root else bundle_path.resolve().parent.parent
    if hashlib.sha256(json.dumps(b.config, sort_keys=True).encode()).hexdigest() != b.config_sha256:
        raise BundleMismatch(f"{bundle_path}: config does not match config_sha256")
    for f in b.files:
        p = root / f.path
        if not p.exists():
            raise BundleMismatch(f"{p}: missing (bundle expects sha256 {f.sha256[:12]}…)")
        if sha256_file(p) != f.sha256:
            raise BundleMismatch(f"{p}: sha256 differs from the bundle")
    base_path = root / b.base_model["path"] if not Path(b.base_model["path"]).is_absolute() else Path(b.base_model["path"])
    if base_path.exists():
        if model.identity(base_path)["weights_sha256"] != b.base_model["weights_sha256"]:
            raise BundleMismatch(f"{base_path}: base model weights differ from the bundle")
    gate = root / "metrics/gate.json"
    if gate.exists() and read_json(gate) != b.decision:
        raise BundleMismatch(f"{gate}: gate decision differs from the bundle")
    return b


def adapter_expectation(b: EvidenceBundle) -> dict:
    """The adapter manifest the bundle pins, for the serving check."""
    files = {Path(f.path).name: f.sha256 for f in b.files if f.role == "adapter"
             and Path(f.path).name != "manifest.json"}
    return {"files": files, "base_model": {"name": b.base_model["name"],
                                           "weights_sha256": b.base_model["weights_sha256"]}}
