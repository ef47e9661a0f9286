"""Evidence bundle per candidate (docs/design.md §6): everything needed to re-check a release decision.

    clap bundle                # DVC stage `bundle`: release/bundles/<candidate>.json for every candidate the
                               # gate judged, and release/bundle.json = the one the gate ships (tracked by git)
    clap verify release/bundle.json
    clap verify release/bundles/dpo.json     # the evidence of a candidate that did not ship

The bundle pins, by sha256: the adapter files, every file of each materialized batch (its dataset
version, with DVC's own directory hash from dvc.lock when there is one), the evaluation and replay
records, the regressed samples, guard reports, admission records and the gate decision; plus the composed
configuration, the base model's identity (repository path and the sha256 of each of its files), the code
commit and what each track ships (`tracks`: a held agent adapter is never pinned). `verify` recomputes
every field it can — the file set each role must pin from the working tree, the data folders' DVC hashes
from their files, the base model's files — and refuses the ones it cannot check. With `CLAP_BUNDLE_KEY` in the environment (never in a
tracked file) the bundle carries an HMAC-SHA256 signature, and verification requires it: someone who
can write the repository but does not hold the key cannot forge a release.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
from pathlib import Path, PurePosixPath

from clap import model, paths, vcs
from clap.config import Model
from clap.domain.contracts import BundleFile, EvidenceBundle
from clap.integrity import BundleMismatch, adapter_expectation
from clap.io import OUTPUT_MARKER, atomic_dir, git_show, read_json, sha256_file, write_json

BUNDLE_PATH = str(paths.BUNDLE)
GATE_PATH = str(paths.GATE)
ADAPTER_DIR = str(paths.MODELS / "{c}" / "adapter")
ADAPTER_REQUIRED = (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS, paths.MANIFEST)
SIGNING_ENV = "CLAP_BUNDLE_KEY"

_ADAPTER = (paths.MODELS / "{c}" / "adapter").as_posix()  # the shipped candidate's adapter folder
_AGENT = (paths.MODELS / "{a}" / "adapter").as_posix()  # the agent adapter the gate shipped (tracks.agent.ships)
ROLES = [  # (glob under the repository, role): what a release pins, from the paths the pipeline writes (clap.paths)
    *[(f"{_ADAPTER}/{n}", "adapter") for n in (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS, paths.MANIFEST,
                                              "README.md")],
    (f"{paths.MODELS.as_posix()}/*/{paths.GUARD_REPORT_FILE}", "guard_report"),
    (f"{paths.MODELS.as_posix()}/*/{paths.TRAIN_METRICS_FILE}", "train_metrics"),
    (f"{paths.MATERIALIZED.as_posix()}/*/**/*", "dataset"),  # every file of each batch's folder (its DVC hash too)
    (f"{paths.ADMISSION.as_posix()}/*.json", "admission"),
    (f"{paths.EVAL.as_posix()}/*/records.jsonl", "eval_records"),
    (f"{paths.EVAL.as_posix()}/*/regressed_samples.jsonl", "regressed_samples"),
    (f"{paths.EVAL_METRICS.as_posix()}/*.json", "eval_metrics"),
    (f"{paths.REPLAY.as_posix()}/records.jsonl", "replay_records"),
    (f"{paths.REPLAY.as_posix()}/failed_cases.jsonl", "replay_failed"),
    (paths.REPLAY_METRICS.as_posix(), "replay_metrics"),
    (f"{paths.EVAL_DECISIONS.as_posix()}/records.jsonl", "decision_records"),
    (f"{paths.EVAL_DECISIONS.as_posix()}/regressed.jsonl", "decision_regressed"),
    (paths.DECISION_METRICS.as_posix(), "decision_metrics"),
    (paths.HUMAN_METRICS.as_posix(), "human_evaluation"),
    *[(f"{_AGENT}/{n}", "agent_adapter") for n in (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS, paths.MANIFEST,
                                                  "README.md")],
    (f"{paths.AGENT_TASKS.as_posix()}/tasks.jsonl", "agent_tasks"),
    (f"{paths.AGENT_PAIRS.as_posix()}/pairs.jsonl", "agent_pairs"),
    (f"{paths.AGENT_EVAL.as_posix()}/episodes.jsonl", "agent_episodes"),
    (f"{paths.AGENT_EVAL.as_posix()}/next_calls.jsonl", "agent_next_calls"),
    (paths.AGENT_METRICS.as_posix(), "agent_metrics"),
    (f"{paths.AGENT_PASS_K.as_posix()}/episodes.jsonl", "agent_pass_k_episodes"),
    (paths.AGENT_PASS_K_METRICS.as_posix(), "agent_pass_k_metrics"),
    (paths.GATE.as_posix(), "gate_decision"),
    (paths.CODE_PINS.as_posix(), "clap_code"),  # a `clap init` project: the CLAP code each stage ran (pinned)
]


def git_commit(root: Path) -> str:
    try:
        out = vcs.git(root, "rev-parse", "HEAD")
    except FileNotFoundError:  # no git installed
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _dvc_dir_hashes(root: Path) -> dict[str, str]:

    lock = root / vcs.LOCK
    if not lock.exists():
        return {}
    return {o["path"]: o["md5"] for o in vcs.lock_outs(lock.read_text(encoding="utf-8")) if "md5" in o}


def build(root: Path, params: dict, candidate: str = "sft", hashes: dict[str, str] | None = None,
          base: dict | None = None) -> EvidenceBundle:
    """The bundle of one candidate. `hashes` (path → sha256) and `base` (the base model's identity) carry what
    one candidate's bundle computed to the next: the candidates share every file but their adapter."""
    root = Path(root)
    decision = read_json(root / GATE_PATH)
    tracks = release_tracks(decision, candidate, prod_agent(root))
    files = _pinned_files(root, candidate, tracks["agent"]["ships"], {} if hashes is None else hashes)
    base = base or base_identity(root, params)
    bundle = EvidenceBundle(candidate=candidate, code_commit=git_commit(root), base_model=base,
                            config_sha256=_config_sha256(params), config=params, files=files, decision=decision,
                            dataset_versions=_dataset_versions(files, params["data"]["batches"], _dvc_dir_hashes(root)),
                            tracks=tracks)
    key = signing_key()
    return bundle.model_copy(update={"signature": sign(bundle, key)}) if key else bundle


SHIPPABLE = ("promote", "canary")  # the verdicts whose adapter a release may pin, restore and serve


def release_tracks(decision: dict, candidate: str, prod_agent_version: str | None) -> dict:
    """What a release ships on each track, from the gate's record: `ships` is the candidate the gate promoted or
    canaried, else None. The extraction track's bundle is evidence for a held candidate (release refuses it);
    on the agent track a held adapter is never pinned — the agent adapter already in prod stays
    (`carried_from`: the version whose bundle pins it), else none ships."""
    agent = decision.get("agent") or {}
    agent_ships = agent.get("candidate") if agent.get("decision") in SHIPPABLE else None
    return {"extraction": {"candidate": candidate, "decision": decision.get("decision"),
                           "ships": candidate if decision.get("decision") in SHIPPABLE else None},
            "agent": {"candidate": agent.get("candidate"), "decision": agent.get("decision"), "ships": agent_ships,
                      "carried_from": None if agent_ships or not agent else prod_agent_version}}


def prod_agent(root: Path) -> str | None:
    """The version whose bundle pins the agent adapter in prod (following `carried_from`), or None."""
    pointer = root / paths.PROD_POINTER
    version = (read_json(pointer) if pointer.exists() else {}).get("version")
    source = agent_source(root, version) if version else None
    return source[0] if source else None


def agent_source(root: Path, version: str, bundle: EvidenceBundle | None = None
                 ) -> tuple[str, EvidenceBundle] | None:
    """(version, its committed bundle) of the release that pins the agent adapter `version` serves: `version`
    itself when its gate shipped one, else the release it carried prod's from (followed to the end), else None.
    `bundle`: `version`'s own, when the caller has read it already."""
    seen: set[str] = set()
    while version not in seen:
        seen.add(version)
        if bundle is None:
            shown, _ = git_show(root, f"{paths.ARTIFACT}@{version}", BUNDLE_PATH)
            if shown is None:
                return None
            bundle = EvidenceBundle.model_validate_json(shown)
        if any(f.role == "agent_adapter" for f in bundle.files):
            return version, bundle
        version, bundle = (bundle.tracks.get("agent") or {}).get("carried_from"), None
        if version is None:
            return None
    raise BundleMismatch(f"{version}: the agent adapter's carried_from chain comes back to itself")


def _pinned_files(root: Path, candidate: str, agent_candidate: str | None, hashes: dict[str, str]) -> list[BundleFile]:
    """Every file of ROLES that exists; the agent adapter only when the gate shipped one (`agent_candidate`)."""
    files = []
    for path, role in expected_entries(root, candidate, agent_candidate):
        if path not in hashes:
            hashes[path] = sha256_file(root / path)
        files.append(BundleFile(path=path, sha256=hashes[path], role=role))
    return files


def expected_entries(root: Path, candidate: str, agent_candidate: str | None) -> list[tuple[str, str]]:
    """(path, role) of every file a release of `candidate` must pin, found in the working tree by ROLES: what
    `build` pins and what `verify` recomputes, so an entry dropped from the bundle or a file added beside the
    pinned ones is named."""
    out, seen = [], set()
    for pattern, role in ROLES:
        if agent_candidate is None and "{a}" in pattern:
            continue
        for p in sorted(root.glob(pattern.format(c=candidate, a=agent_candidate))):
            path = p.relative_to(root).as_posix()
            if any(_WRITER_TEMP.fullmatch(x) for x in PurePosixPath(path).parts):
                continue  # a writer's temporary sibling or lock (`.b1.tmp-PID-…`, `.b1.lock`): never an output
            if p.is_file() and path not in seen:
                seen.add(path)
                out.append((path, role))
    return out


_WRITER_TEMP = re.compile(r"\..+\.(?:(?:tmp|old)-\d+(?:-.*)?|lock)")  # clap.io.atomic_dir's siblings


def _role_of(path: str, candidate: str, agent_candidate: str | None) -> set[str]:
    """The roles whose ROLES pattern `path` matches."""
    return {role for pattern, role in ROLES if (agent_candidate is not None or "{a}" not in pattern)
            and _glob_regex(pattern.format(c=candidate, a=agent_candidate or "")).fullmatch(path)}


def _glob_regex(pattern: str) -> re.Pattern:
    """Path.glob's pattern as a regex over a POSIX relative path: `*` within one folder, `**/` across folders."""
    out = []
    for part in re.split(r"(\*\*/|\*)", pattern):
        out.append("(?:[^/]+/)*" if part == "**/" else "[^/]*" if part == "*" else re.escape(part))
    return re.compile("".join(out))


def base_identity(root: Path, params: dict) -> dict:
    """The base model's identity by content — every file of its folder hashed (`files_sha256`), the weights also
    under `weights_sha256` as the serving check reads them — with its path relative to the repository when inside
    it (a clone elsewhere verifies it), absolute only for a folder outside the repository."""
    folder = _base_dir(root, params)
    base = model.identity(folder)
    base["files_sha256"] = base_files(folder)
    where, top = Path(base["path"]).resolve(), Path(root).resolve()
    base["path"] = where.relative_to(top).as_posix() if where.is_relative_to(top) else str(where)
    return base


def base_files(folder: Path) -> dict[str, str]:
    """sha256 of every file in the base model's folder (config, tokenizer, weights, manifest), by relative path."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != OUTPUT_MARKER}


def _base_dir(root: Path, params: dict) -> Path:
    return model.base_folder(Model.model_validate(params["model"]), root)


def _config_sha256(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def _dataset_versions(files: list[BundleFile], batches: list[str], dvc: dict[str, str]) -> dict[str, str]:
    versions = {}
    for b in batches:
        members = sorted(f"{f.path}:{f.sha256}" for f in files if f.path.startswith(f"data/materialized/{b}/"))
        versions[b] = hashlib.sha256("\n".join(members).encode()).hexdigest()
        if f"data/materialized/{b}" in dvc:
            versions[f"{b}:dvc_md5"] = dvc[f"data/materialized/{b}"]
    return versions


def signing_key() -> bytes | None:
    """The HMAC key from the environment (`CLAP_BUNDLE_KEY`), never from a tracked file."""
    key = os.environ.get(SIGNING_ENV, "")
    return key.encode() if key else None


def sign(bundle: EvidenceBundle, key: bytes) -> str:
    """HMAC-SHA256 over the bundle's canonical JSON without its signature."""
    body = json.dumps(bundle.model_dump(exclude={"signature"}), sort_keys=True, ensure_ascii=False).encode()
    return "hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest()


def write(root: Path, params: dict, out: Path, candidate: str = "sft", hashes: dict[str, str] | None = None,
          base: dict | None = None) -> EvidenceBundle:
    b = build(root, params, candidate, hashes, base)
    write_json(out, b.model_dump())
    return b


def write_each(root: Path, params: dict, shipped_out: Path, folder: Path) -> tuple[dict[str, EvidenceBundle], list[str]]:
    """One bundle per candidate the gate judged (`folder/<candidate>.json`), so that a held or canaried
    candidate's evidence is pinned as the shipped one's is; `shipped_out` gets the bundle of the candidate
    the gate names, byte for byte. Returns (bundles by candidate, candidates with no adapter to pin)."""
    root, folder = Path(root), Path(folder)
    decision = read_json(root / GATE_PATH)
    shipped = decision.get("candidate", "sft")
    judged = list(decision.get("candidates") or {shipped: None})
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.json"):  # a candidate this gate did not judge keeps no bundle from an earlier run
        if stale.stem not in judged:
            stale.unlink()
    written, missing, hashes, base = {}, [], {}, base_identity(root, params)
    for c in judged:
        if c != shipped and not (root / ADAPTER_DIR.format(c=c) / paths.ADAPTER_WEIGHTS).exists():
            missing.append(c)
            (folder / f"{c}.json").unlink(missing_ok=True)
            continue
        written[c] = write(root, params, folder / f"{c}.json", c, hashes, base)
    shipped_out.parent.mkdir(parents=True, exist_ok=True)
    shipped_out.write_bytes((folder / f"{shipped}.json").read_bytes())
    return written, missing


def write_shipped(root: Path, shipped: EvidenceBundle, adapter_dir: Path, out: Path) -> None:
    """`out`/adapter: the shipped candidate's adapter folder, byte for byte, each weight file checked against the
    hash `shipped` pins — the one path dvc.yaml's `artifacts:` entry names for every version, whichever trainer
    made it (`dvc artifacts get REPO clap-adapter --rev vX` and GTO's `clap-adapter@vX` then name the same bytes)."""
    expected = adapter_expectation(shipped)
    with atomic_dir(Path(root) / out) as tmp:
        shutil.copytree(Path(root) / adapter_dir, tmp / "adapter")
        for name, digest in expected["files"].items():
            if sha256_file(tmp / "adapter" / name) != digest:
                raise BundleMismatch(f"{adapter_dir / name}: differs from the bundle it ships with")


def verify(bundle_path: Path, root: Path | None = None) -> EvidenceBundle:
    """Recompute every field that can be recomputed; raise BundleMismatch naming the first that differs.

    Fields: signature (when a key is configured or the bundle is signed), config (its hash, and the
    values dvc.lock — or params.yaml without a pipeline — ran with), code_commit (a commit of this
    repository and an ancestor of HEAD), candidate (the pinned adapter is exactly the candidate's adapter
    folder), files (every sha256), dataset_versions, base_model (present, same weights), decision (the
    gate record). A field that cannot be checked is refused, never skipped.
    """
    bundle_path = Path(bundle_path)
    if not bundle_path.exists():  # a fresh clone: main carries no run state
        raise BundleMismatch(f"{bundle_path}: no bundle here, so nothing is verified — the gate stage writes it "
                             "(`dvc repro`), `dvc pull` fetches a pushed one")
    try:
        b = EvidenceBundle.model_validate(read_json(bundle_path))
    except (ValueError, OSError) as exc:
        raise BundleMismatch(f"{bundle_path}: not a valid evidence bundle ({str(exc)[:200]})") from None
    root = Path(root) if root else bundle_path.resolve().parent.parent
    where = str(bundle_path)
    _check_signature(b, where)
    _check_config(b, root, where)
    _check_code_commit(b, root, where)
    _check_candidate(b, root, where)
    _check_tracks(b, root, where)
    _check_entries(b, root, where)
    for f in b.files:
        p = root / f.path
        if not p.exists():
            raise BundleMismatch(f"{p}: missing (bundle expects sha256 {f.sha256[:12]}…)")
        if sha256_file(p) != f.sha256:
            raise BundleMismatch(f"{p}: sha256 differs from the bundle")
    _check_dataset_versions(b, root, where)
    _check_base_model(b, root, where)
    gate = root / GATE_PATH
    if not gate.exists():
        raise BundleMismatch(f"{where}: decision cannot be checked ({gate} is missing)")
    if read_json(gate) != b.decision:
        raise BundleMismatch(f"{gate}: gate decision differs from the bundle (field decision)")
    judged = set(b.decision.get("candidates") or ()) | ({b.decision["candidate"]} if b.decision.get("candidate") else set())
    if judged and b.candidate not in judged:
        raise BundleMismatch(f"{where}: candidate {b.candidate!r} is not one the gate judged ({', '.join(sorted(judged))})")
    return b


def shipped_candidate(b: EvidenceBundle) -> str:
    """The candidate the gate ships (its record's `candidate`; SFT in records from before the chain)."""
    return b.decision.get("candidate") or b.candidate


def _check_signature(b: EvidenceBundle, where: str) -> None:
    key = signing_key()
    if key is None:
        if b.signature is not None:
            raise BundleMismatch(f"{where}: signature cannot be checked: set {SIGNING_ENV}")
        return
    if b.signature is None:
        raise BundleMismatch(f"{where}: signature missing, and {SIGNING_ENV} is set: unsigned evidence is refused")
    if not hmac.compare_digest(b.signature, sign(b, key)):
        raise BundleMismatch(f"{where}: signature does not match the bundle (forged or edited)")


def _check_config(b: EvidenceBundle, root: Path, where: str) -> None:
    """The config hash, and the config itself against what dvc.lock recorded for the `bundle` stage
    (it declares all of params.yaml), or params.yaml where the bundle was not built by the pipeline."""
    if _config_sha256(b.config) != b.config_sha256:
        raise BundleMismatch(f"{where}: config does not match config_sha256")
    recorded = (vcs.stages(vcs.read_lock(root)).get("bundle") or {}).get("params", {}).get("params.yaml")
    if recorded:
        pinned, source = recorded, "dvc.lock (stage bundle)"
    elif (root / "params.yaml").exists():
        pinned, source = vcs.read_yaml12(root / "params.yaml"), "params.yaml"
    else:
        raise BundleMismatch(f"{where}: config cannot be checked (no dvc.lock or params.yaml in {root})")
    for key, value in pinned.items():
        got = b.config
        for part in key.split("."):
            got = got.get(part, _MISSING) if isinstance(got, dict) else _MISSING
        if got != value:
            raise BundleMismatch(f"{where}: config key {key} differs from {source}")


_MISSING = object()


def _check_code_commit(b: EvidenceBundle, root: Path, where: str) -> None:
    def git(*args: str) -> int:
        return vcs.git(root, *args).returncode

    if not re.fullmatch(r"[0-9a-f]{40}", b.code_commit) or git("cat-file", "-e", f"{b.code_commit}^{{commit}}"):
        raise BundleMismatch(f"{where}: code_commit {b.code_commit[:12]!r} is not a commit of this repository")
    if git("merge-base", "--is-ancestor", b.code_commit, "HEAD"):
        raise BundleMismatch(f"{where}: code_commit {b.code_commit[:10]} is not an ancestor of HEAD")


def _check_candidate(b: EvidenceBundle, root: Path, where: str) -> None:
    folder = ADAPTER_DIR.format(c=b.candidate)
    pinned = {f.path for f in b.files if f.role == "adapter"}
    if any(not p.startswith(folder + "/") for p in pinned):
        raise BundleMismatch(f"{where}: adapter files outside {folder} for candidate {b.candidate!r}")
    required = {f"{folder}/{n}" for n in ADAPTER_REQUIRED}
    if not required <= pinned:
        raise BundleMismatch(f"{where}: files pin no {', '.join(sorted(required - pinned))}")
    present = {str(p.relative_to(root)) for p in (root / folder).iterdir()} if (root / folder).is_dir() else set()
    extra = sorted(present - pinned)
    if extra:
        raise BundleMismatch(f"{root / extra[0]}: in the adapter folder but not pinned by the bundle")


def required_entries(params: dict) -> list[str]:
    """Files every release's bundle pins whatever else ran: the gate's record, and each batch's admission record
    and evaluation metrics (the evidence its rules read)."""
    return [GATE_PATH] + [p.as_posix() for b in params["data"]["batches"]
                          for p in (paths.admission(b), paths.eval_metrics(b))]


def _check_entries(b: EvidenceBundle, root: Path, where: str) -> None:
    """The bundle's file list is recomputed, not trusted: every entry stays inside the repository, is a file the
    pipeline makes for its role, appears once; every file the roles find in the tree is pinned; the evidence every
    release needs is there."""
    top = root.resolve()
    agent = (b.tracks.get("agent") or {}).get("ships") if b.tracks else \
        next((PurePosixPath(f.path).parts[1] for f in b.files if f.role == "agent_adapter"), None)
    seen: set[str] = set()
    for f in b.files:
        pure = PurePosixPath(f.path)
        if pure.is_absolute() or ".." in pure.parts or "\\" in f.path or not (root / f.path).resolve().is_relative_to(top):
            raise BundleMismatch(f"{where}: entry {f.path!r} leaves the repository")
        if f.path in seen:
            raise BundleMismatch(f"{where}: entry {f.path!r} appears twice")
        seen.add(f.path)
        if f.role not in _role_of(f.path, b.candidate, agent):
            raise BundleMismatch(f"{where}: entry {f.path!r} is not a file the pipeline makes as {f.role!r}")
    for path, role in expected_entries(root, b.candidate, agent):
        if path not in seen:
            raise BundleMismatch(f"{root / path}: exists but the bundle does not pin it (role {role})")
    for path in required_entries(b.config):
        if path not in seen:
            raise BundleMismatch(f"{where}: pins no {path} (every release's evidence)")


def _check_tracks(b: EvidenceBundle, root: Path, where: str) -> None:
    """The tracks are what the gate's record says they are, and the agent adapter pinned is exactly the one the
    gate shipped: none when its verdict was not promote/canary (a held agent adapter never ships)."""
    agent = b.tracks.get("agent") or {}
    expected = release_tracks(b.decision, b.candidate, agent.get("carried_from"))
    if b.tracks and b.tracks != expected:  # a bundle written before tracks existed is checked on its pins alone
        raise BundleMismatch(f"{where}: tracks do not follow the gate's record (expected {expected})")
    pinned = {f.path for f in b.files if f.role == "agent_adapter"}
    ships = expected["agent"]["ships"]
    if ships is None and pinned:
        raise BundleMismatch(f"{where}: pins an agent adapter ({sorted(pinned)[0]}) the gate did not ship "
                             f"(agent verdict {agent.get('decision')})")
    if ships is not None:
        folder = ADAPTER_DIR.format(c=ships)
        required = {f"{folder}/{n}" for n in ADAPTER_REQUIRED}
        if any(not p.startswith(folder + "/") for p in pinned) or not required <= pinned:
            raise BundleMismatch(f"{where}: the agent adapter pinned is not exactly {folder} (the gate ships {ships})")
    carried = expected["agent"]["carried_from"]
    if carried is not None and (agent_source(root, carried) or (None,))[0] != carried:
        raise BundleMismatch(f"{where}: tracks.agent.carried_from {carried} is not a release that pins an agent adapter")


def _check_dataset_versions(b: EvidenceBundle, root: Path, where: str) -> None:
    expected = _dataset_versions(b.files, b.config["data"]["batches"], {})
    got = {k: v for k, v in b.dataset_versions.items() if not k.endswith(":dvc_md5")}
    if got != expected:
        raise BundleMismatch(f"{where}: dataset_versions do not match the pinned dataset files")
    dvc = _dvc_dir_hashes(root)
    for k, v in b.dataset_versions.items():
        if k.endswith(":dvc_md5"):
            path = f"data/materialized/{k.removesuffix(':dvc_md5')}"
            if path not in dvc:
                raise BundleMismatch(f"{where}: dataset_versions {k} cannot be checked ({path} not in dvc.lock)")
            if dvc[path] != v:
                raise BundleMismatch(f"{where}: dataset_versions {k} differs from dvc.lock")
            if dvc_dir_md5(root / path) != v:
                raise BundleMismatch(f"{root / path}: its files no longer hash to the DVC directory hash the bundle "
                                     f"pins ({v}): a file was added, removed or changed")


def dvc_dir_md5(folder: Path) -> str:
    """DVC's directory hash of `folder`, recomputed from its files: md5 of the sorted [{md5, relpath}] listing as
    dvc-data serialises it (`Tree.as_bytes`), with `.dir` appended."""
    folder = Path(folder)
    entries = sorted(({"md5": hashlib.md5(p.read_bytes()).hexdigest(), "relpath": p.relative_to(folder).as_posix()}
                      for p in folder.rglob("*") if p.is_file()), key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"


def _check_base_model(b: EvidenceBundle, root: Path, where: str) -> None:
    raw = b.base_model.get("path")
    if not raw:
        raise BundleMismatch(f"{where}: base_model.path is missing")
    base_path = Path(raw) if Path(raw).is_absolute() else root / raw
    if not base_path.is_dir():
        raise BundleMismatch(f"{where}: base_model cannot be checked ({base_path} is missing)")
    ident = model.identity(base_path)
    if ident["weights_sha256"] != b.base_model.get("weights_sha256"):
        raise BundleMismatch(f"{base_path}: base model weights differ from the bundle (field base_model)")
    pinned = b.base_model.get("files_sha256")
    if pinned is not None:  # bundles from before content identity pin the weights alone
        now = base_files(base_path)
        changed = sorted(set(pinned) ^ set(now)) + sorted(n for n in set(pinned) & set(now) if pinned[n] != now[n])
        if changed:
            raise BundleMismatch(f"{base_path / changed[0]}: base model file differs from the bundle (field base_model)")
    if ident["name"] != b.base_model.get("name"):
        raise BundleMismatch(f"{base_path}: base model is {ident['name']!r}, the bundle names {b.base_model.get('name')!r}")
