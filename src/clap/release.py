"""Release, rollback and the registry, as annotated git tags in GTO's format.

    clap release [--push]      # gate said promote/canary, tree committed, bundle verifies → tags
    clap rollback [--to vN]    # prod → an earlier version, artifacts restored byte-identically
    clap registry              # versions and stage assignments (GTO reads the same tags)

`clap-adapter@vN` registers version N on the commit; `clap-adapter#prod#K` (or `#canary#K`) is
the K-th stage assignment. A release holds an exclusive lock file in .git, and tag creation itself
refuses an existing name, so two releases at once cannot both succeed. Tags are signed (`git tag -s`)
when `CLAP_SIGNING_KEY` names a key or git's `user.signingkey` is set.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

from clap.bundle import BUNDLE_PATH, BundleMismatch, verify
from clap.errors import UserError

ARTIFACT = "clap-adapter"
BUNDLE = Path(BUNDLE_PATH)


class ReleaseRefused(UserError, RuntimeError):
    pass


def _git(root: Path, *args: str, check: bool = True) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise ReleaseRefused(f"git {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def _tags(root: Path) -> list[str]:
    return [t for t in _git(root, "tag", "--list", f"{ARTIFACT}*").splitlines() if t]


def versions(root: Path) -> dict[int, str]:
    """version number → commit."""
    out = {}
    for t in _tags(root):
        m = re.fullmatch(rf"{ARTIFACT}@v(\d+)", t)
        if m:
            out[int(m.group(1))] = _git(root, "rev-list", "-n", "1", t)
    return out


def assignments(root: Path) -> list[dict]:
    """Every stage assignment in order: {stage, n, tag, commit, version}."""
    by_commit = {c: v for v, c in versions(root).items()}
    out = []
    for t in _tags(root):
        m = re.fullmatch(rf"{ARTIFACT}#(\w+)#(\d+)", t)
        if m:
            commit = _git(root, "rev-list", "-n", "1", t)
            msg = _git(root, "tag", "-l", "--format=%(contents:subject)", t)
            v = re.search(r"\bv(\d+)\b", msg)
            out.append({"stage": m.group(1), "n": int(m.group(2)), "tag": t, "commit": commit,
                        "version": int(v.group(1)) if v else by_commit.get(commit)})
    return sorted(out, key=lambda a: (a["stage"], a["n"]))


def current(root: Path, stage: str) -> dict | None:
    hits = [a for a in assignments(root) if a["stage"] == stage]
    return max(hits, key=lambda a: a["n"]) if hits else None


def _sign_args(root: Path) -> list[str]:
    key = os.environ.get("CLAP_SIGNING_KEY") or _git(root, "config", "--get", "user.signingkey", check=False)
    return ["-u", key] if key else ["-a"]


@contextlib.contextmanager
def _lock(root: Path):
    lock = Path(_git(root, "rev-parse", "--git-dir"))
    lock = (root / lock if not lock.is_absolute() else lock) / "clap-release.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError as exc:
        raise ReleaseRefused(f"{lock}: another release is in progress") from exc
    try:
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)
        lock.unlink(missing_ok=True)


def _tag(root: Path, name: str, message: str, commit: str) -> None:
    _git(root, "tag", *_sign_args(root), name, "-m", message, commit)


def release(root: Path, bundle_path: Path = BUNDLE) -> dict:
    """Tag the committed candidate: register vN and assign prod or canary per the gate decision."""
    root = Path(root)
    dirty = [line for line in _git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line]
    if dirty:
        raise ReleaseRefused(f"working tree has uncommitted changes ({dirty[0].strip()} …): commit first")
    try:
        b = verify(root / bundle_path, root)
    except BundleMismatch as exc:
        raise ReleaseRefused(f"bundle does not verify: {exc}") from exc
    decision = b.decision["decision"]
    if decision not in ("promote", "canary"):
        raise ReleaseRefused(f"gate decision is '{decision}': only promote or canary may be released")
    head = _git(root, "rev-parse", "HEAD")  # verify() refused a code_commit that is not HEAD or its ancestor
    stage = "prod" if decision == "promote" else "canary"
    with _lock(root):
        existing = versions(root)
        if head in existing.values():
            n = next(v for v, c in existing.items() if c == head)
        else:
            n = max(existing, default=0) + 1
            _tag(root, f"{ARTIFACT}@v{n}", _summary(b, f"register v{n}"), head)
        k = max([a["n"] for a in assignments(root) if a["stage"] == stage], default=0) + 1
        _tag(root, f"{ARTIFACT}#{stage}#{k}", _summary(b, f"assign {stage} to v{n}"), head)
    return {"version": n, "stage": stage, "tag": f"{ARTIFACT}#{stage}#{k}", "commit": head}


def _summary(b, head: str) -> str:
    d = b.decision
    lines = [f"{head}: gate {d['decision']} (policy {d['policy']})", ""]
    lines += [f"- {r['rule']}: observed {r['observed']} vs {r['threshold']} → {r['outcome']}"
              + (f" [{r['batch']}]" if r.get("batch") else "") for r in d["reasons"]]
    lines += ["", f"per batch: {d['per_batch']}", f"code {b.code_commit}", f"config sha256 {b.config_sha256}"]
    return "\n".join(lines)


def rollback(root: Path, to: int | None = None, restore: bool = True) -> dict:
    """Assign prod to an earlier version (default: the one before the current prod) and restore it."""
    root = Path(root)
    cur = current(root, "prod")
    if cur is None:
        raise ReleaseRefused("nothing is in prod: fall back to the base model (no adapter) instead")
    vs = versions(root)
    if to is None:
        earlier = [a["version"] for a in assignments(root) if a["stage"] == "prod" and a["version"] != cur["version"]
                   and a["version"] is not None and a["version"] < cur["version"]]
        if not earlier:
            raise ReleaseRefused(f"prod is v{cur['version']} and no earlier version was ever in prod")
        to = max(earlier)
    if to not in vs:
        raise ReleaseRefused(f"v{to} is not a registered version ({', '.join(f'v{v}' for v in sorted(vs))})")
    with _lock(root):
        k = cur["n"] + 1
        _tag(root, f"{ARTIFACT}#prod#{k}", f"assign prod to v{to} (rollback from v{cur['version']})", vs[to])
    result = {"from": cur["version"], "to": to, "tag": f"{ARTIFACT}#prod#{k}", "commit": vs[to]}
    if restore:
        restore_version(root, vs[to])
        result["verified"] = True
    return result


def restore_version(root: Path, commit: str) -> None:
    """Bring back a version's dvc.lock and bundle, check out its data through DVC, verify the bundle."""
    tracked = _git(root, "ls-tree", "-r", "--name-only", commit).splitlines()
    paths = [p for p in tracked if p == "dvc.lock" or p.endswith(".dvc") or p.startswith(("release/", "metrics/"))]
    if str(BUNDLE) not in paths:
        raise ReleaseRefused(f"{commit[:10]} has no {BUNDLE}: not a CLAP release commit")
    _git(root, "checkout", commit, "--", *paths)
    r = subprocess.run(["dvc", "checkout", "--force"], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["dvc", "pull", "--force"], cwd=root, capture_output=True, text=True)
        if r.returncode != 0:
            raise ReleaseRefused(f"dvc checkout/pull failed: {r.stderr.strip()[-400:]}")
    try:
        verify(root / BUNDLE, root)
    except BundleMismatch as exc:
        raise ReleaseRefused(f"restored artifacts do not verify: {exc}") from exc


def registry(root: Path) -> list[dict]:
    vs = versions(Path(root))
    asg = assignments(Path(root))
    rows = []
    for v, commit in sorted(vs.items()):
        stages = [a for a in asg if a["version"] == v]
        live = [s for s in ("prod", "canary") if (current(Path(root), s) or {}).get("version") == v]
        rows.append({"version": f"v{v}", "commit": commit[:10], "assignments": [a["tag"] for a in stages],
                     "current": live})
    return rows
