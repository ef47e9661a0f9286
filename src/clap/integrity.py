"""Adapter and artifact integrity, on the ground floor (evaluation, training, release and serving all load
adapters through it; it imports none of them).

The serving check: an adapter is loaded only when its files match hashes pinned in git, and its base
model is the one it was trained on. Anything but safetensors weights in the adapter folder — a
pickle posing as an adapter — is refused before a byte of it is loaded.

Where the expected hashes come from (`pinned_expectation`) is the point: never from the adapter
folder alone, which whoever can write the weights can also rewrite. The anchor is either

- a release: the evidence bundle as committed at a git revision (`git show REF:release/bundle.json`,
  read from git's object store, not the working tree), or
- `dvc.lock` (or a `.dvc` file): the hash DVC recorded for the output holding the adapter (e.g.
  `models/sft`), whose directory listing in the DVC cache is itself content-addressed; it pins the
  adapter's `manifest.json`, which pins the weights by sha256.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from clap import paths, vcs
from clap.domain.contracts import EvidenceBundle
from clap.errors import UserError
from clap.io import git_show, read_json, sha256_file

ALLOWED = {paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS, "README.md", paths.MANIFEST}
ADAPTER_FILES = (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS)


class AdapterRefused(UserError, RuntimeError):
    """The adapter (or its base) does not match its evidence; the message names the file."""


class BundleMismatch(UserError, RuntimeError):
    """A file no longer matches the bundle; the message names it."""


def adapter_expectation(b: EvidenceBundle, role: str = "adapter") -> dict:
    """The adapter manifest the bundle pins, for the serving check (`role="agent_adapter"`: the agent's)."""
    files = {Path(f.path).name: f.sha256 for f in b.files if f.role == role
             and Path(f.path).name != paths.MANIFEST}
    if not files:
        raise BundleMismatch(f"the bundle pins no {role.replace('_', ' ')}")
    return {"files": files, "base_model": {"name": b.base_model["name"],
                                           "weights_sha256": b.base_model["weights_sha256"]}}


def adapter_manifest(adapter_dir: Path, base_identity: dict) -> dict:
    adapter_dir = Path(adapter_dir)
    return {"files": {n: sha256_file(adapter_dir / n) for n in ADAPTER_FILES},
            "base_model": {"name": base_identity["name"], "weights_sha256": base_identity["weights_sha256"]}}


def verify_adapter(adapter_dir: Path, expected: dict, base_identity: dict) -> None:
    """Raise AdapterRefused unless the adapter folder matches `expected` (an adapter manifest)."""
    adapter_dir = Path(adapter_dir)
    if not adapter_dir.is_dir():
        raise AdapterRefused(f"{adapter_dir}: no adapter folder")
    for p in sorted(adapter_dir.iterdir()):
        if p.name not in ALLOWED:
            raise AdapterRefused(f"{p}: unexpected file in adapter folder (only safetensors weights are loaded)")
    weights = adapter_dir / paths.ADAPTER_WEIGHTS
    if weights.exists() and weights.read_bytes()[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"PK"):
        raise AdapterRefused(f"{weights}: a pickle/zip archive, not safetensors; refused without loading")
    missing = [n for n in ADAPTER_FILES if n not in expected.get("files", {})]
    if missing:
        raise AdapterRefused(f"{adapter_dir}: the evidence pins no hash for {', '.join(missing)}")
    for name, digest in expected["files"].items():
        path = adapter_dir / name
        if not path.exists():
            raise AdapterRefused(f"{path}: missing")
        if sha256_file(path) != digest:
            raise AdapterRefused(f"{path}: sha256 does not match the evidence")
    want = expected["base_model"]["weights_sha256"]
    if want != base_identity["weights_sha256"]:
        raise AdapterRefused(f"{base_identity['path']}: base model weights differ from the ones the adapter was "
                             f"trained on ({expected['base_model']['name']})")


def pinned_expectation(root: Path, adapter_dir: Path, release_ref: str | None = None, role: str = "adapter") -> dict:
    """The adapter manifest that git pins for `adapter_dir`: from the bundle at `release_ref` (the file role
    `role` pins: `agent_adapter` for the agent's), else dvc.lock."""
    root = Path(root)
    if release_ref is not None:
        return _from_release(root, release_ref, role)
    return _from_dvc_lock(root, Path(adapter_dir))


def _from_release(root: Path, ref: str, role: str = "adapter") -> dict:
    text, why = git_show(root, ref, paths.BUNDLE)
    if text is None:
        raise AdapterRefused(f"{ref}: no committed {paths.BUNDLE.as_posix()} to pin the adapter ({why})")
    return adapter_expectation(EvidenceBundle.model_validate_json(text), role)


def _from_dvc_lock(root: Path, adapter_dir: Path) -> dict:
    try:
        rel = adapter_dir.resolve().relative_to(root.resolve())
    except ValueError:
        raise AdapterRefused(f"{adapter_dir}: outside the project {root}; no pin in dvc.lock can cover it") from None
    owner = next((o for o in _dvc_outs(root, rel) if rel == Path(o["path"]) or Path(o["path"]) in rel.parents), None)
    if owner is None or not str(owner.get("md5", "")).endswith(".dir"):
        raise AdapterRefused(f"{adapter_dir}: not pinned by dvc.lock (no stage output covers it); produce it with "
                             "`dvc repro` or load a released version")
    inner = (rel.relative_to(owner["path"]) / paths.MANIFEST).as_posix()
    pinned_md5 = _dvc_pinned_md5(root, owner["md5"], inner)
    manifest = adapter_dir / paths.MANIFEST
    if pinned_md5 is None:
        raise AdapterRefused(f"{manifest}: {owner['pinned_by']} ({owner['path']}) does not pin it")
    if not manifest.exists() or hashlib.md5(manifest.read_bytes()).hexdigest() != pinned_md5:
        raise AdapterRefused(f"{manifest}: differs from the hash {owner['pinned_by']} pins for {owner['path']}")
    return read_json(manifest)


def _dvc_outs(root: Path, rel: Path) -> list[dict]:
    """DVC outputs that could hold `rel`: dvc.lock's stage outputs and `<folder>.dvc` files of its parents."""
    outs = []
    lock = root / vcs.LOCK
    if lock.exists():
        outs += [o | {"pinned_by": "dvc.lock"} for o in vcs.lock_outs(lock.read_text(encoding="utf-8"))]
    for folder in (rel, *rel.parents):
        dvc_file = root / f"{folder}.dvc"
        if folder != Path(".") and dvc_file.is_file():
            for o in (yaml.safe_load(dvc_file.read_text(encoding="utf-8")) or {}).get("outs", []):
                outs.append(o | {"path": str(folder.parent / o["path"]), "pinned_by": f"{folder}.dvc"})
    return outs


def _dvc_pinned_md5(root: Path, dir_md5: str, relpath: str) -> str | None:
    """md5 of `relpath` inside the DVC directory object `dir_md5`, read from the cache and checked."""
    return next((e["md5"] for e in dvc_dir_listing(root, dir_md5) if e.get("relpath") == relpath), None)


def dvc_cache_path(root: Path, md5: str) -> Path:
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            return Path(repo.cache.local.oid_to_path(md5))
    except Exception as exc:  # not a DVC repository, or its config is broken  # noqa: BLE001
        raise AdapterRefused(f"{root}: cannot read the DVC cache to check the pin ({exc})") from None


def dvc_dir_listing(root: Path, dir_md5: str) -> list[dict]:
    """The entries ({relpath, md5}) of a DVC directory object, after checking it matches its own hash."""
    path = dvc_cache_path(root, dir_md5)
    if not path.exists():
        raise AdapterRefused(f"{path}: the directory object {dir_md5} is not in the DVC cache (`dvc pull`)")
    data = path.read_bytes()
    if hashlib.md5(data).hexdigest() != dir_md5.removesuffix(".dir"):
        raise AdapterRefused(f"{path}: DVC cache object does not match its own hash")
    return json.loads(data)


def attach(model, name: str, adapter_dir: Path, expected: dict, base_identity: dict, trainable: bool = False):
    """Verify, then attach `adapter_dir` under `name` (the first one wraps the model in PEFT);
    `trainable` for a trainer that continues the adapter (DPO and GRPO start from the SFT adapter)."""
    from peft import PeftModel

    if expected is None:
        raise AdapterRefused(f"{adapter_dir}: no pinned evidence given; refusing to load")
    verify_adapter(adapter_dir, expected, base_identity)
    if isinstance(model, PeftModel):
        model.load_adapter(str(adapter_dir), adapter_name=name, is_trainable=trainable, use_safetensors=True)
        return model
    return PeftModel.from_pretrained(model, str(adapter_dir), adapter_name=name, is_trainable=trainable,
                                     use_safetensors=True)


def load_adapter(model, adapter_dir: Path, expected: dict, base_identity: dict):
    """Verify against `expected` (from `pinned_expectation`), then attach the adapter (inference only)."""
    return attach(model, "default", Path(adapter_dir), expected, base_identity)
