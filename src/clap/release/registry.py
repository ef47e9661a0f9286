"""Release, rollback and the registry, as annotated git tags in GTO's format.

    clap release [--push]      # gate said promote/canary, tree committed, bundle verifies → tags
    clap rollback [--to vN]    # prod → an earlier version, artifacts restored byte-identically
    clap rollback --to base    # prod withdrawn (GTO unassign tags): the base model serves
    clap registry              # versions and stage assignments (GTO reads the same tags)

Tags follow GTO's format exactly and are read with GTO's own parser: `clap-adapter@v0.0.1` registers
a version (first v0.0.1, then the patch bumped, as `gto register` does), `clap-adapter#prod#K` (or
`#canary#K`) assigns a stage, K counting all stage tags of the artifact as GTO counts them; GTO's
unassign (`#prod!#K`) and deregister (`@vX.Y.Z!`) tags are honoured. `gto show` / `gto history` read
CLAP's releases, and `clap registry` / `clap rollback` read what `gto register` / `gto assign` wrote.
After a release or rollback, `release/prod.json` names the version in prod: the pipeline's
`prod_adapter` stage depends on it, so `dvc repro` re-runs exactly what depends on prod. A release holds an exclusive lock file in .git, and tag creation itself
refuses an existing name, so two releases at once cannot both succeed. Tags are signed (`git tag -s`)
when `CLAP_SIGNING_KEY` names a key or git's `user.signingkey` is set.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

from clap import paths, vcs
from clap.errors import UserError
from clap.io import write_json
from clap.release.bundle import BUNDLE_PATH, BundleMismatch, shipped_candidate, verify

ARTIFACT = paths.ARTIFACT
BASE = "base"  # `clap rollback --to base`: no adapter in prod, the base model serves
BUNDLE = Path(BUNDLE_PATH)


class ReleaseRefused(UserError, RuntimeError):
    pass


def _git(root: Path, *args: str, check: bool = True) -> str:
    r = vcs.git(root, *args)
    if check and r.returncode != 0:
        raise ReleaseRefused(f"git {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def _tags(root: Path) -> list[tuple[str, dict]]:
    """(tag, GTO's parse of it) for every tag of the artifact, read by GTO's own parser."""
    from gto.tag import parse_name

    out = []
    for t in _git(root, "tag", "--list").splitlines():
        parsed = parse_name(t, raise_on_fail=False) if t.startswith(ARTIFACT) else None
        if parsed and parsed.get("name") == ARTIFACT:
            out.append((t, parsed))
    return out


def _semver(v: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in re.match(r"v(\d+)\.(\d+)\.(\d+)", v).groups())
    return major, minor, patch


def versions(root: Path) -> dict[str, str]:
    """Registered version (GTO semver, e.g. `v0.0.1`) → commit, deregistered ones left out, in semver order."""
    from gto.tag import Action

    out, dropped = {}, set()
    for t, p in _tags(root):
        if p["action"] == Action.REGISTER:
            out[p["version"]] = _git(root, "rev-list", "-n", "1", t)
        elif p["action"] == Action.DEREGISTER:
            dropped.add(p["version"])
    return dict(sorted(((v, c) for v, c in out.items() if v not in dropped), key=lambda vc: _semver(vc[0])))


def next_version(root: Path) -> str:
    """GTO's rule: v0.0.1 first, then the greatest registered version with its patch bumped."""
    vs = list(versions(root))
    if not vs:
        return "v0.0.1"
    major, minor, patch = _semver(vs[-1])
    return f"v{major}.{minor}.{patch + 1}"


def assignments(root: Path) -> list[dict]:
    """Every stage event in GTO's order (its counter): {stage, n, tag, commit, version, action}."""
    from gto.tag import Action

    by_commit = {c: v for v, c in versions(root).items()}
    out = []
    for t, p in _tags(root):
        if p["action"] in (Action.ASSIGN, Action.UNASSIGN) and "counter" in p:
            commit = _git(root, "rev-list", "-n", "1", t)
            out.append({"stage": p["stage"], "n": p["counter"], "tag": t, "commit": commit,
                        "version": by_commit.get(commit), "action": p["action"].value})
    return sorted(out, key=lambda a: a["n"])


def holders(root: Path, stage: str) -> list[dict]:
    """Every version whose last event for `stage` is an assign (not undone by `#stage!#N`), by counter: GTO lets
    several versions hold a stage at once, the latest assigned one answering for it."""
    active: dict[str, dict] = {}
    for a in assignments(root):
        if a["stage"] != stage:
            continue
        if a["action"] == "assign":
            active[a["commit"]] = a
        else:
            active.pop(a["commit"], None)
    return sorted(active.values(), key=lambda a: a["n"])


def current(root: Path, stage: str) -> dict | None:
    """The assignment that holds `stage` now, as GTO reads it: of `holders`, the one assigned most recently."""
    held = holders(root, stage)
    return held[-1] if held else None


def previous_prod(root: Path) -> str | None:
    """The greatest version below the one in prod that was ever assigned prod: what `clap rollback` restores."""
    cur = current(root, "prod")
    if cur is None:
        return None
    earlier = [a["version"] for a in assignments(root) if a["stage"] == "prod" and a["action"] == "assign"
               and a["version"] not in (None, cur["version"]) and _semver(a["version"]) < _semver(cur["version"])]
    return max(earlier, key=_semver) if earlier else None


def _next_counter(root: Path) -> int:
    """GTO numbers stage tags per artifact across all stages: the greatest counter plus one."""
    return max((a["n"] for a in assignments(root)), default=0) + 1


def write_prod_pointer(root: Path) -> dict:
    """release/prod.json from the registry: the stage `prod_adapter` depends on it (and checks it)."""
    cur = current(root, "prod")
    pointer = {"artifact": ARTIFACT, "version": cur["version"], "commit": cur["commit"], "tag": cur["tag"],
               "version_tag": f"{ARTIFACT}@{cur['version']}"} if cur else {"artifact": ARTIFACT, "version": None}
    write_json(root / paths.PROD_POINTER, pointer)  # git-tracked: `dvc repro` sees prod change
    return pointer


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


_COARSE_CLOCK_S = 0.05  # the most CLOCK_REALTIME_COARSE (git's `time()`) lags CLOCK_REALTIME: a tick is 1–10 ms


def _after_last_stage_tag(root: Path) -> None:
    """Wait, at most a second, until the clock has left the second of the newest stage tag.

    Git dates a tag to the second and GTO orders stage events by that date alone; two stage tags in one second tie,
    and GTO breaks the tie by event kind, not by the counter, so an assignment made in the second of an unassignment
    (a rollback to base, then back) would read as withdrawn. Each stage tag therefore gets a second of its own. git
    reads the coarse clock, which lags the one `time.time()` reads by up to a kernel tick: the wait covers it."""
    newest = _git(root, "for-each-ref", "--sort=-taggerdate", "--count=1", "--format=%(taggerdate:unix)",
                  f"refs/tags/{ARTIFACT}#*")
    if newest:
        wait = int(newest) + 1 + _COARSE_CLOCK_S - time.time()
        if wait > 0:
            time.sleep(wait)


def _tag(root: Path, name: str, message: str, commit: str) -> None:
    if "#" in name:
        _after_last_stage_tag(root)
    _git(root, "tag", *_sign_args(root), name, "-m", message, commit)


def release(root: Path, bundle_path: Path = BUNDLE) -> dict:
    """Tag the committed candidate: register the next version and assign prod or canary per the gate."""
    root = Path(root)
    dirty = [line for line in _git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line]
    if dirty:
        raise ReleaseRefused(f"working tree has uncommitted changes ({dirty[0].strip()} …): commit first")
    try:
        b = verify(root / bundle_path, root)  # also refuses a code_commit that is not HEAD or its ancestor
    except BundleMismatch as exc:
        raise ReleaseRefused(f"bundle does not verify: {exc}") from exc
    if b.candidate != shipped_candidate(b):  # a candidate's own bundle (release/bundles/) is evidence, not a release
        raise ReleaseRefused(f"{bundle_path} pins candidate {b.candidate!r}; the gate ships {shipped_candidate(b)!r}")
    decision = b.decision["decision"]
    if decision not in ("promote", "canary"):
        raise ReleaseRefused(f"gate decision is '{decision}': only promote or canary may be released")
    head = _git(root, "rev-parse", "HEAD")
    stage = "prod" if decision == "promote" else "canary"
    with _lock(root):
        existing = versions(root)
        if head in existing.values():
            v = next(v for v, c in existing.items() if c == head)
        else:
            v = next_version(root)
            _tag(root, f"{ARTIFACT}@{v}", _summary(b, f"Registering artifact {ARTIFACT} version {v}"), head)
        k = _next_counter(root)
        _tag(root, f"{ARTIFACT}#{stage}#{k}", _summary(b, f"Assigning stage {stage} to artifact {ARTIFACT} version {v}"),
             head)
    write_prod_pointer(root)
    return {"version": v, "stage": stage, "tag": f"{ARTIFACT}#{stage}#{k}", "commit": head}


def _summary(b, head: str) -> str:
    d = b.decision
    lines = [head, "", f"gate {d['decision']} (policy {d['policy']}, candidate {b.candidate})", ""]
    lines += [f"- {r['rule']}: observed {r['observed']} vs {r['threshold']} → {r['outcome']}"
              + (f" [{r['batch']}]" if r.get("batch") else "") for r in d["reasons"]]
    lines += ["", f"per batch: {d['per_batch']}", f"code {b.code_commit}", f"config sha256 {b.config_sha256}"]
    return "\n".join(lines)


def rollback(root: Path, to: str | None = None, restore: bool = True) -> dict:
    """Assign prod to an earlier version (default: the one in prod before the current) and restore it.

    `to="base"` withdraws prod instead: GTO's unassign tag (`#prod!#K`, what `gto deprecate clap-adapter vX prod`
    writes) for every version holding prod, so `release/prod.json` names no version and the base model serves —
    docs/design.md §6's fallback that is always available. With nothing in prod, `to` names the version to bring back."""
    root = Path(root)
    cur = current(root, "prod")
    if to == BASE:
        if cur is None:
            raise ReleaseRefused("nothing is in prod: the base model serves already")
        return _withdraw_prod(root, cur["version"])
    if to is None:
        if cur is None:
            raise ReleaseRefused("nothing is in prod: name the version to restore (--to vX.Y.Z), or keep the base model")
        to = previous_prod(root)
        if to is None:
            raise ReleaseRefused(f"prod is {cur['version']} and no earlier version was ever in prod "
                                 "(--to base falls back to the base model)")
    to = to if to.startswith("v") else f"v{to}"
    vs = versions(root)
    if to not in vs:
        raise ReleaseRefused(f"{to} is not a registered version ({', '.join(vs) or 'none'})")
    if cur is not None and cur["version"] == to:
        raise ReleaseRefused(f"{to} is in prod already")
    was = cur["version"] if cur else BASE
    if restore:  # first: a version that cannot be restored and verified is never assigned
        restore_version(root, vs[to])
    with _lock(root):
        k = _next_counter(root)
        _tag(root, f"{ARTIFACT}#prod#{k}", f"Assigning stage prod to artifact {ARTIFACT} version {to}\n\n"
             f"rollback from {was}", vs[to])
    result = {"from": was, "to": to, "tag": f"{ARTIFACT}#prod#{k}", "commit": vs[to], "verified": restore}
    write_prod_pointer(root)
    return result


def _withdraw_prod(root: Path, was: str) -> dict:
    """Unassign prod from every version holding it, one GTO unassign tag each, most recent first."""
    with _lock(root):
        k = _next_counter(root)
        tags = []
        for held in reversed(holders(root, "prod")):
            tag = f"{ARTIFACT}#prod!#{k}"
            _tag(root, tag, f"Unassigning stage prod from artifact {ARTIFACT} version {held['version']}\n\n"
                 f"rollback from {was} to the base model", held["commit"])
            tags.append(tag)
            k += 1
    write_prod_pointer(root)
    return {"from": was, "to": BASE, "tag": tags[0], "tags": tags, "commit": None, "verified": False}


def conclude_canary(root: Path, analysis: dict) -> dict:
    """End the canary the analysis (metrics/canary.json) judged: successful → the canary version is assigned
    prod (`#prod#K`) and its canary stage closed (`#canary!#K+1`); failed → the canary is rolled back
    (`#canary!#K`), prod untouched; inconclusive → nothing is tagged."""
    root = Path(root)
    holder = current(root, "canary")
    if holder is None:
        raise ReleaseRefused("nothing is in canary: `clap release` with a gate decision of canary puts a version there")
    logged = (analysis.get("versions") or {}).get("canary")
    if logged != holder["version"]:
        raise ReleaseRefused(f"the analysis is of canary {logged}, but the registry's canary is {holder['version']}: "
                             "analyse this canary's logs first")
    verdict = analysis["verdict"]
    if verdict not in ("successful", "failed"):
        raise ReleaseRefused(f"canary analysis is {verdict}: serve more traffic, then analyse again")
    why = "; ".join(f"{r['rule']}: {r['observed']} → {r['outcome']}" for r in analysis["reasons"])
    with _lock(root):
        k = _next_counter(root)
        tags = []
        if verdict == "successful":
            _tag(root, f"{ARTIFACT}#prod#{k}", f"Assigning stage prod to artifact {ARTIFACT} version {holder['version']}"
                 f"\n\ncanary analysis successful: {why}", holder["commit"])
            tags.append(f"{ARTIFACT}#prod#{k}")
            k += 1
        _tag(root, f"{ARTIFACT}#canary!#{k}", f"Unassigning stage canary from artifact {ARTIFACT} version "
             f"{holder['version']}\n\ncanary analysis {verdict}: {why}", holder["commit"])
        tags.append(f"{ARTIFACT}#canary!#{k}")
    write_prod_pointer(root)
    return {"version": holder["version"], "verdict": verdict, "tags": tags,
            "action": "promoted to prod" if verdict == "successful" else "canary rolled back"}


def restore_version(root: Path, commit: str) -> None:
    """Bring back a version's configuration (conf/, params.yaml), dvc.lock and evidence, check out its data
    through DVC, verify the bundle. The configuration comes back with the lock: the pipeline's stages follow
    params.yaml (`foreach` over its batches), so a lock restored under another round's params would name
    outputs that round never produced. Outputs git keeps (`cache: false`, e.g. the repair queue) come back from git,
    the others from the DVC cache; a later round's outputs the version's pipeline does not define are set aside
    (`stray_outputs`), so `dvc status` afterwards shows only what depends on the prod it now points at."""
    in_git = tuple(f"{o}/" for o in vcs.out_hashes(_git(root, "show", f"{commit}:{vcs.LOCK}", check=False)))

    def wanted(p: str) -> bool:
        return p != str(paths.PROD_POINTER) and (p in (str(vcs.LOCK), "params.yaml") or p.endswith(".dvc") or p.startswith(
            ("release/", "metrics/", "conf/", f"{paths.ADMISSION}/", f"{paths.REPAIR_FIXED}/", f"{paths.AGENT_CORRECTIONS}/",
             str(paths.AGENT_HUMAN_LABELS))) or f"{p}/".startswith(in_git))

    restored = [p for p in _git(root, "ls-tree", "-r", "--name-only", commit).splitlines() if wanted(p)]
    if str(BUNDLE) not in restored:
        raise ReleaseRefused(f"{commit[:10]} has no {BUNDLE}: not a CLAP release commit")
    lock = root / vcs.LOCK
    running = set(pipeline_outputs(root))  # what the workspace's rounds produced: the lock's other entries are stale
    before = {p: md5 for p, md5 in vcs.out_hashes(lock.read_text(encoding="utf-8") if lock.exists() else "").items()
              if p in running}
    later = sorted({p for p in _git(root, "ls-files").splitlines() if wanted(p)} - set(restored))
    if later:  # evidence the version did not have (a later batch's admission, a later repair file) goes too
        _git(root, "rm", "-q", "--", *later)
    _git(root, "checkout", commit, "--", *restored)
    r = vcs.dvc(root, "checkout", "--force")
    if r.returncode != 0:
        r = vcs.dvc(root, "pull", "--force")
        if r.returncode != 0:
            raise ReleaseRefused(f"dvc checkout/pull failed: {r.stderr.strip()[-400:]}")
    _set_aside_later_outputs(root, before, pipeline_outputs(root) + restored)  # what git restored stays
    try:
        verify(root / BUNDLE, root)
    except BundleMismatch as exc:
        raise ReleaseRefused(f"restored artifacts do not verify: {exc}") from exc


def pipeline_outputs(root: Path) -> list[str]:
    """Every output of the pipeline as `dvc.yaml` defines it under the workspace's params.yaml (foreach expanded)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return sorted(str(out.def_path) for stage in repo.index.stages for out in stage.outs)


def stray_outputs(pinned: dict[str, str], defined: list[str]) -> list[str]:
    """Outputs the workspace's lock pinned that the restored pipeline (or git) does not define, overlapping none it does: a
    later round's stage output (`materialize@b5`'s `data/materialized/b5`), which `dvc checkout` leaves in place.
    (The restored lock itself is no guide: DVC keeps the entries of stages a round no longer runs.) Left there, it
    changes every directory dependency above it (`data/materialized`), and `dvc repro` would retrain the version."""
    def overlaps(p: str, q: str) -> bool:
        return p == q or p.startswith(q + "/") or q.startswith(p + "/")

    return sorted(p for p in pinned if not any(overlaps(p, q) for q in defined))


def _set_aside_later_outputs(root: Path, before: dict[str, str], defined: list[str]) -> None:
    """Delete `stray_outputs` whose content the DVC cache holds (the later round's commit restores them with
    `dvc checkout`); one the cache does not hold is left alone, never lost."""
    cache = vcs.dvc(root, "cache", "dir").stdout.strip()
    for path in stray_outputs(before, defined):
        md5, target = before[path], root / path
        cached = md5 and cache and (Path(cache) / "files" / "md5" / md5[:2] / md5[2:]).exists()
        if cached and target.is_dir():
            shutil.rmtree(target)
        elif cached and target.exists():
            target.unlink()


def registry(root: Path) -> list[dict]:
    """One row per registered version: commit, stage tags, and the stages it holds now."""
    root = Path(root)
    vs = versions(root)
    asg = assignments(root)
    live = {s: (current(root, s) or {}).get("version") for s in {a["stage"] for a in asg}}
    return [{"version": v, "commit": commit[:10], "assignments": [a["tag"] for a in asg if a["version"] == v],
             "current": sorted(s for s, holder in live.items() if holder == v)} for v, commit in vs.items()]
