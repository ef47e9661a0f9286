"""The adapter in production, restored for the pipeline: the baseline every candidate is judged against.

    clap prod-adapter --out models/prod        (DVC stage `prod_adapter`, depends on release/prod.json)

`release/prod.json` (written by `clap release` / `clap rollback`, git-tracked) names the version the
registry's `prod` stage points at; the stage checks it against the tags, then restores that version's
adapter byte for byte from the DVC cache: the release commit's `dvc.lock` pins the candidate's output
folder, whose directory object lists each file's md5; every file is then checked against the sha256
of the evidence bundle committed at the release tag. With nothing in prod the folder holds only
`prod.json` with version null, and evaluation compares against the base model alone.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import yaml

from clap import paths, vcs
from clap.domain.contracts import EvidenceBundle
from clap.errors import UserError
from clap.integrity import dvc_cache_path, dvc_dir_listing, pinned_expectation
from clap.io import atomic_dir, git_text, read_json_if_exists, sha256_file, write_json
from clap.release.bundle import adapter_expectation, agent_source
from clap.release.registry import current


class ProdUnavailable(UserError, RuntimeError):
    """The prod pointer disagrees with the registry, or the prod adapter cannot be restored."""


def pointer(root: Path) -> dict:
    """release/prod.json, checked against the registry's tags (GTO's or CLAP's)."""
    root = Path(root)
    ptr = read_json_if_exists(root / paths.PROD_POINTER) or {"version": None}
    holder = current(root, "prod")
    if (holder or {}).get("version") != ptr.get("version"):
        raise ProdUnavailable(f"{paths.PROD_POINTER} says prod is {ptr.get('version')} but the registry says "
                              f"{(holder or {}).get('version')}: run `clap registry --sync` and commit it")
    return ptr


def restore(root: Path, out: Path) -> dict:
    """Write `out`/prod.json and, when a version is in prod, `out`/adapter/ restored and checked — and
    `out`/agent_adapter/ when that release also shipped a tool-calling agent adapter (the agent
    evaluation's prod arm)."""
    root = Path(root)
    ptr = pointer(root)
    with atomic_dir(out) as tmp:
        if ptr.get("version"):
            bundle = EvidenceBundle.model_validate_json(git_text(root, ptr["version_tag"], str(paths.BUNDLE), ProdUnavailable))
            _restore_adapter(root, ptr, bundle, tmp / "adapter")
            ptr = ptr | {"candidate": bundle.candidate}
            source = agent_source(root, ptr["version"], bundle)
            if source is not None:
                version, agent_bundle = source
                _restore_adapter(root, {"version": version, "version_tag": f"{paths.ARTIFACT}@{version}"}, agent_bundle,
                                 paths.prod_agent_adapter(tmp), "agent_adapter")
                ptr = ptr | {"agent_candidate": _agent_candidate(agent_bundle), "agent_version": version}
        write_json(tmp / "prod.json", ptr)
    return ptr


def _bundle_at(root: Path, version: str) -> EvidenceBundle:
    return EvidenceBundle.model_validate_json(git_text(root, f"{paths.ARTIFACT}@{version}", str(paths.BUNDLE), ProdUnavailable))


def _agent_candidate(bundle: EvidenceBundle) -> str:
    weights = next(f.path for f in bundle.files if f.role == "agent_adapter" and f.path.endswith(".safetensors"))
    return Path(weights).parent.parent.name


def restore_version_adapter(root: Path, version: str, dest: Path, role: str = "adapter") -> tuple[Path, dict]:
    """Restore a registered version's adapter into `dest` (replaced) and return it with the manifest its
    release tag's bundle pins — what `serving.attach` checks before the canary server loads it.
    `role="agent_adapter"`: the tool-calling agent's adapter that release serves — the one its gate shipped, or the
    one in prod it kept when its gate held the agent; refused when it serves none."""
    bundle = _bundle_at(root, version)
    if role == "agent_adapter":
        source = agent_source(root, version, bundle)
        if source is None:
            agent = bundle.tracks.get("agent") or bundle.decision.get("agent") or {}
            raise ProdUnavailable(f"{version} serves no agent adapter: its gate's agent verdict was "
                                  f"{agent.get('decision') or 'none (agent track off)'} and no agent adapter was in "
                                  "prod when it was released")
        version, bundle = source
    tag = f"{paths.ARTIFACT}@{version}"
    if dest.exists():
        shutil.rmtree(dest)
    _restore_adapter(root, {"version": version, "version_tag": tag}, bundle, dest, role)
    return dest, pinned_expectation(root, dest, tag, role)


def _restore_adapter(root: Path, ptr: dict, bundle: EvidenceBundle, dest: Path, role: str = "adapter") -> None:
    weights = next((f.path for f in bundle.files if f.role == role and f.path.endswith(paths.ADAPTER_WEIGHTS)),
                   None)
    if weights is None:
        raise ProdUnavailable(f"{ptr['version_tag']}: its bundle pins no {role.replace('_', ' ')}")
    folder = Path(weights).parent.parent.as_posix()  # models/<trainer>: the DVC output holding adapter/
    out = _pinned_out(root, ptr["version_tag"], folder)
    if not dvc_cache_path(root, out["md5"]).exists():
        vcs.dvc(root, "fetch", "--all-tags", "-q")
    entries = [e for e in dvc_dir_listing(root, out["md5"]) if e["relpath"].startswith("adapter/")]
    dest.mkdir(parents=True)
    for e in entries:
        src = dvc_cache_path(root, e["md5"])
        if not src.exists():
            raise ProdUnavailable(f"{src}: {folder}/{e['relpath']} of {ptr['version']} is not in the DVC cache "
                                  "or remote (`dvc pull`)")
        target = dest / e["relpath"].removeprefix("adapter/")
        shutil.copyfile(src, target)
        if hashlib.md5(target.read_bytes()).hexdigest() != e["md5"]:
            raise ProdUnavailable(f"{src}: DVC cache object does not match its hash")
    for name, digest in adapter_expectation(bundle, role)["files"].items():
        if not (dest / name).exists() or sha256_file(dest / name) != digest:
            raise ProdUnavailable(f"{dest / name}: differs from the bundle of {ptr['version_tag']}")


def _pinned_out(root: Path, tag: str, folder: str) -> dict:
    """The DVC output record ({path, md5}) that pins `folder` at `tag`: its dvc.lock's stage output, else the
    `<folder>.dvc` file committed there (an output tracked with `dvc add`)."""
    try:
        lock = vcs.lock_outs(git_text(root, tag, vcs.LOCK, ProdUnavailable))
    except ProdUnavailable:
        lock = []
    out = next((o for o in lock if o["path"] == folder), None)
    if out is not None:
        return out
    try:
        outs = (yaml.safe_load(git_text(root, tag, f"{folder}.dvc", ProdUnavailable)) or {}).get("outs", [])
    except ProdUnavailable:
        outs = []
    if outs:
        return outs[0] | {"path": folder}
    raise ProdUnavailable(f"{tag}: neither dvc.lock nor {folder}.dvc pins {folder}")

