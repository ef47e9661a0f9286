"""Tamper tests, the serving check, and release/rollback in a temporary git + DVC repo."""

import json
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clap.config import dump
from clap.integrity import AdapterRefused, adapter_manifest, load_adapter, pinned_expectation
from clap.model import identity, load_model
from clap.release import bundle
from clap.release import registry as release


def sh(root, *cmd):
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r.stdout


def make_adapter(tiny_dir, folder):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load_model(tiny_dir), LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(folder, safe_serialization=True)
    (Path(folder) / "manifest.json").write_text(json.dumps(adapter_manifest(folder, identity(tiny_dir))))
    return Path(folder)


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_serving_check_accepts_good_and_refuses_tampered(tiny_dir, tmp_path):
    ad = make_adapter(tiny_dir, tmp_path / "adapter")
    ident = identity(tiny_dir)
    pinned = adapter_manifest(ad, ident)
    load_adapter(load_model(tiny_dir), ad, pinned, ident)
    flip_last_byte(ad / "adapter_model.safetensors")
    with pytest.raises(AdapterRefused, match="adapter_model.safetensors: sha256"):
        load_adapter(load_model(tiny_dir), ad, pinned, ident)
    with pytest.raises(AdapterRefused, match="no pinned evidence"):
        load_adapter(load_model(tiny_dir), ad, None, ident)


def test_pickle_posing_as_adapter_is_refused_unloaded(tiny_dir, tmp_path, monkeypatch):
    ad = make_adapter(tiny_dir, tmp_path / "adapter")
    pinned = adapter_manifest(ad, identity(tiny_dir))
    (ad / "adapter_model.safetensors").write_bytes(pickle.dumps({"w": 1}, protocol=4))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle was loaded"))
    with pytest.raises(AdapterRefused, match="pickle"):
        load_adapter(load_model(tiny_dir), ad, pinned, identity(tiny_dir))
    (ad / "adapter_model.bin").write_bytes(b"\x80\x04junk")
    with pytest.raises(AdapterRefused, match="adapter_model.bin"):
        load_adapter(load_model(tiny_dir), ad, pinned, identity(tiny_dir))


def test_adapter_on_a_different_base_is_refused(tiny_dir, tmp_path):
    ad = make_adapter(tiny_dir, tmp_path / "adapter")
    other = identity(tiny_dir) | {"weights_sha256": {"model.safetensors": "0" * 64}}
    with pytest.raises(AdapterRefused, match="base model weights differ"):
        load_adapter(load_model(tiny_dir), ad, adapter_manifest(ad, identity(tiny_dir)), other)


def _fake_run(root: Path, tiny_dir, params, decision="promote", seed=0):
    """The artifacts a loop run leaves, small: materialized data, adapter, eval/replay metrics, gate."""
    (root / "data/materialized/b1").mkdir(parents=True, exist_ok=True)
    (root / "data/materialized/b1/sft_train.jsonl").write_text(json.dumps({"v": seed}) + "\n")
    (root / "data/admission").mkdir(parents=True, exist_ok=True)
    (root / "data/admission/b1.json").write_text("{}")
    ad = root / "models/sft/adapter"
    if ad.exists():
        shutil.rmtree(ad)
    make_adapter(tiny_dir, ad)
    (root / "models/sft/guard_report.json").write_text(json.dumps({"status": "ok", "seed": seed}))
    (root / "metrics/eval").mkdir(parents=True, exist_ok=True)
    (root / "metrics/eval/b1.json").write_text(json.dumps({"seed": seed}))
    (root / "metrics/gate.json").write_text(json.dumps({"decision": decision, "reasons": [], "per_batch": {},
                                                        "policy": "default", "requires_rag": True}))
    bundle.write(root, params, root / "release/bundle.json")


@pytest.fixture
def repo(tmp_path, tiny_dir, params):
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "git", "init", "-q")
    sh(root, "git", "config", "user.email", "ci@example.com")
    sh(root, "git", "config", "user.name", "CI")
    sh(root, "dvc", "init", "-q")
    sh(root, "dvc", "remote", "add", "-d", "local", str(tmp_path / "remote"))
    base = root / "models/base"
    shutil.copytree(tiny_dir, base)
    (base / "manifest.json").write_text(json.dumps({"name": "tiny", "requested": params.model.base}))
    p = params.as_yaml_dict()
    p["model"]["cache_dir"] = "models/base"
    p["data"]["batches"] = ["b1"]
    (root / "params.yaml").write_text(dump(p))
    sh(root, "git", "add", "params.yaml", ".dvc")
    sh(root, "git", "commit", "-qm", "init")
    return root, p


def _commit_version(root, tiny_dir, params, seed, decision="promote"):
    _fake_run(root, tiny_dir, params, decision, seed)
    sh(root, "dvc", "add", "-q", "data/materialized", "models/sft")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", f"run {seed}")
    return {p: (root / p).read_bytes() for p in ("models/sft/adapter/adapter_model.safetensors",
                                                  "data/materialized/b1/sft_train.jsonl")}


def test_verify_names_the_tampered_file(repo, tiny_dir):
    root, params = repo
    _fake_run(root, tiny_dir, params)
    bundle.verify(root / "release/bundle.json", root)
    target = root / "data/materialized/b1/sft_train.jsonl"
    target.write_text(target.read_text().replace("0", "1"))
    with pytest.raises(bundle.BundleMismatch, match="sft_train.jsonl"):
        bundle.verify(root / "release/bundle.json", root)
    target.write_text(json.dumps({"v": 0}) + "\n")
    b = json.loads((root / "release/bundle.json").read_text())
    b["decision"]["decision"] = "promote-please"
    (root / "release/bundle.json").write_text(json.dumps(b))
    with pytest.raises(bundle.BundleMismatch):
        bundle.verify(root / "release/bundle.json", root)


def test_release_requires_clean_tree_verified_bundle_and_allowed_decision(repo, tiny_dir):
    root, params = repo
    _commit_version(root, tiny_dir, params, 1, decision="hold")
    with pytest.raises(release.ReleaseRefused, match="hold"):
        release.release(root)
    _commit_version(root, tiny_dir, params, 2)
    (root / "metrics/eval/b1.json").write_text("{}")
    with pytest.raises(release.ReleaseRefused, match="uncommitted"):
        release.release(root)
    sh(root, "git", "commit", "-qam", "tamper")
    with pytest.raises(release.ReleaseRefused, match="metrics/eval/b1.json"):
        release.release(root)


def test_concurrent_release_is_refused(repo, tiny_dir):
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    lock = root / ".git" / "clap-release.lock"
    lock.write_text("12345")
    with pytest.raises(release.ReleaseRefused, match="another release"):
        release.release(root)
    lock.unlink()
    assert release.release(root)["version"] == "v0.0.1"


def test_release_release_rollback_restores_v1_byte_identically(repo, tiny_dir):
    root, params = repo
    v1 = _commit_version(root, tiny_dir, params, 1)
    r1 = release.release(root)
    sh(root, "dvc", "push", "-q")
    v2 = _commit_version(root, tiny_dir, params, 2)
    assert v1 != v2
    r2 = release.release(root)
    assert (r1["version"], r2["version"]) == ("v0.0.1", "v0.0.2") and r2["tag"] == "clap-adapter#prod#2"
    rb = release.rollback(root)
    assert rb["from"] == "v0.0.2" and rb["to"] == "v0.0.1" and rb["tag"] == "clap-adapter#prod#3"
    for path, data in v1.items():
        assert (root / path).read_bytes() == data, path
    bundle.verify(root / "release/bundle.json", root)
    tags = sh(root, "git", "tag", "--list").split()
    assert tags == sorted(["clap-adapter@v0.0.1", "clap-adapter@v0.0.2", "clap-adapter#prod#1", "clap-adapter#prod#2",
                           "clap-adapter#prod#3"])
    assert "rollback from v0.0.2" in sh(root, "git", "tag", "-l", "--format=%(contents)", "clap-adapter#prod#3")
    assert "gate promote" in sh(root, "git", "tag", "-l", "--format=%(contents)", "clap-adapter@v0.0.1")
    reg = {r["version"]: r["current"] for r in release.registry(root)}
    assert reg == {"v0.0.1": ["prod"], "v0.0.2": []}
    assert json.loads((root / "release/prod.json").read_text())["version"] == "v0.0.1"


def test_evaluate_refuses_an_adapter_whose_manifest_was_rewritten(repo, tiny_dir):
    """The trust anchor is git (here `models/sft.dvc`), not the manifest beside the weights."""
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    ad = root / "models/sft/adapter"
    assert pinned_expectation(root, ad) == json.loads((ad / "manifest.json").read_text())
    flip_last_byte(ad / "adapter_model.safetensors")
    (ad / "manifest.json").write_text(json.dumps(adapter_manifest(ad, identity(root / "models/base"))))
    (root / "data/materialized/b1/sft_eval.jsonl").write_text("")  # the batch's holdout is there: the adapter is not
    r = subprocess.run(["clap", "evaluate", "b1"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert "manifest.json: differs from the hash models/sft.dvc pins for models/sft" in r.stdout
    (ad / "manifest.json").unlink()
    shutil.rmtree(root / "models/sft/adapter")
    unpinned = make_adapter(tiny_dir, root / "models/other")
    with pytest.raises(AdapterRefused, match="not pinned"):
        pinned_expectation(root, unpinned)


def test_prod_adapter_is_pinned_by_the_bundle_at_its_release_tag(repo, tiny_dir):
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    ad = root / "models/sft/adapter"
    pinned = pinned_expectation(root, ad, "clap-adapter@v0.0.1")
    load_adapter(load_model(root / "models/base"), ad, pinned, identity(root / "models/base"))
    b = json.loads((root / "release/bundle.json").read_text())
    b["files"] = [f for f in b["files"] if "adapter_model" not in f["path"]]  # an edit in the working tree
    (root / "release/bundle.json").write_text(json.dumps(b))
    assert pinned_expectation(root, ad, "clap-adapter@v0.0.1") == pinned  # read from git's objects, not the tree


def _edit_bundle(root: Path, edit) -> None:
    path = root / "release/bundle.json"
    b = json.loads(path.read_text())
    edit(b)
    path.write_text(json.dumps(b))


TAMPERS = {  # what a hostile edit does → what `clap verify` must name
    "code_commit edited": (lambda root, b: b.update(code_commit="f" * 40), "code_commit"),
    "code_commit not a commit": (lambda root, b: b.update(code_commit="unknown"), "code_commit"),
    "dataset_versions edited": (lambda root, b: b["dataset_versions"].update(b1="0" * 64), "dataset_versions"),
    "candidate edited": (lambda root, b: b.update(candidate="dpo"), "candidate 'dpo'"),
    "adapter entries removed": (lambda root, b: b.update(files=[f for f in b["files"] if f["role"] != "adapter"]),
                                "files pin no"),
    "base_model.path missing": (lambda root, b: b["base_model"].update(path="models/nowhere"), "base_model"),
    "config edited": (lambda root, b: b["config"]["gate"].update(min_parse_ok=0.0), "config"),
    "extra adapter_model.bin": (lambda root, b: (root / "models/sft/adapter/adapter_model.bin").write_bytes(b"\x80\x04"),
                                "adapter_model.bin: in the adapter folder but not pinned"),
    "evidence entry dropped, file rewritten": (
        lambda root, b: (b.update(files=[f for f in b["files"] if f["path"] != "metrics/eval/b1.json"]),
                         (root / "metrics/eval/b1.json").write_text('{"forged": true}')),
        "metrics/eval/b1.json: exists but the bundle does not pin it (role eval_metrics)"),
    "evidence entry and file both dropped": (
        lambda root, b: (b.update(files=[f for f in b["files"] if f["path"] != "metrics/eval/b1.json"]),
                         (root / "metrics/eval/b1.json").unlink()),
        "pins no metrics/eval/b1.json"),
    "entry outside the repository": (
        lambda root, b: b["files"].append({"path": "../outside.json", "sha256": "0" * 64, "role": "eval_metrics"}),
        "entry '../outside.json' leaves the repository"),
    "entry under another role": (
        lambda root, b: b["files"].append({"path": "params.yaml", "sha256": bundle.sha256_file(root / "params.yaml"),
                                           "role": "dataset"}),
        "entry 'params.yaml' is not a file the pipeline makes as 'dataset'"),
    "file added to a pinned data folder": (
        lambda root, b: (root / "data/materialized/b1/extra_rows.csv").write_text("v\n9\n"),
        "extra_rows.csv: exists but the bundle does not pin it (role dataset)"),
    "one byte of the base model changed": (
        lambda root, b: flip_last_byte(root / "models/base/config.json"), "base model file differs from the bundle"),
    "one byte of the base weights changed": (
        lambda root, b: flip_last_byte(next((root / "models/base").glob("*.safetensors"))), "base model weights differ"),
}


@pytest.mark.parametrize("case", list(TAMPERS))
def test_verify_refuses_every_tampered_field(repo, tiny_dir, monkeypatch, case):
    from typer.testing import CliRunner

    from clap.cli import app

    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    monkeypatch.chdir(root)
    assert CliRunner().invoke(app, ["verify"]).exit_code == 0
    edit, named = TAMPERS[case]
    _edit_bundle(root, lambda b: edit(root, b))
    r = CliRunner().invoke(app, ["verify"])
    assert r.exit_code == 1 and "verify failed" in r.output and named in r.output, r.output
    r = CliRunner().invoke(app, ["release"])
    assert r.exit_code == 1 and "release refused" in r.output


def test_signed_bundle_cannot_be_forged_without_the_key(repo, tiny_dir, monkeypatch):
    """An attacker who rewrites adapter, manifest and bundle hashes consistently still lacks the key."""
    root, params = repo
    monkeypatch.setenv("CLAP_BUNDLE_KEY", "k" * 32)
    _commit_version(root, tiny_dir, params, 1)
    b = bundle.verify(root / "release/bundle.json", root)
    assert b.signature.startswith("hmac-sha256:")
    weights = root / "models/sft/adapter/adapter_model.safetensors"
    flip_last_byte(weights)
    _edit_bundle(root, lambda d: [f.update(sha256=bundle.sha256_file(weights)) for f in d["files"]
                                  if f["path"].endswith("adapter_model.safetensors")])
    with pytest.raises(bundle.BundleMismatch, match="signature does not match"):
        bundle.verify(root / "release/bundle.json", root)
    monkeypatch.delenv("CLAP_BUNDLE_KEY")
    with pytest.raises(bundle.BundleMismatch, match="signature cannot be checked"):
        bundle.verify(root / "release/bundle.json", root)


def gto_show(root: Path) -> dict:
    return json.loads(sh(root, "gto", "show", "--json"))["clap-adapter"]


def test_gto_reads_clap_releases_and_clap_reads_gto_assignments(repo, tiny_dir):
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    assert gto_show(root) == {"version": "v0.0.1", "stage": {"prod": "v0.0.1"}, "registered": True, "active": True}
    history = sh(root, "gto", "history", "clap-adapter", "--json")
    assert "clap-adapter@v0.0.1" in history and "clap-adapter#prod#1" in history

    # a colleague registers and assigns the next commit with GTO itself
    _commit_version(root, tiny_dir, params, 2)
    sh(root, "gto", "register", "clap-adapter", "HEAD")
    sh(root, "gto", "assign", "clap-adapter", "--version", "v0.0.2", "--stage", "prod")
    assert release.current(root, "prod")["version"] == "v0.0.2"
    assert {r["version"]: r["current"] for r in release.registry(root)} == {"v0.0.1": [], "v0.0.2": ["prod"]}
    assert release.next_version(root) == "v0.0.3"

    rb = release.rollback(root, restore=False)  # CLAP continues GTO's numbering, and GTO sees the rollback
    assert (rb["from"], rb["to"], rb["tag"]) == ("v0.0.2", "v0.0.1", "clap-adapter#prod#3")
    assert gto_show(root)["stage"] == {"prod": "v0.0.1"}
    sh(root, "gto", "deprecate", "clap-adapter", "v0.0.1", "prod")  # GTO writes clap-adapter#prod!#4
    assert "clap-adapter#prod!#4" in sh(root, "git", "tag", "--list").split()
    assert gto_show(root)["stage"] == {"prod": "v0.0.2"}  # GTO: v0.0.2's own assignment was never undone
    assert release.current(root, "prod")["version"] == "v0.0.2"


def test_every_candidate_gets_its_bundle_and_only_the_shipped_one_releases(repo, tiny_dir, monkeypatch):
    from typer.testing import CliRunner

    from clap.cli import app

    root, params = repo
    _fake_run(root, tiny_dir, params)
    for c in ("dpo", "grpo"):
        make_adapter(tiny_dir, root / f"models/{c}/adapter")
        (root / f"models/{c}/guard_report.json").write_text(json.dumps({"status": "ok"}))
    gate = json.loads((root / "metrics/gate.json").read_text()) | {"candidate": "grpo", "candidates": {
        "sft": {"decision": "promote"}, "dpo": {"decision": "hold"}, "grpo": {"decision": "promote"}}}
    (root / "metrics/gate.json").write_text(json.dumps(gate))
    monkeypatch.chdir(root)
    r = CliRunner().invoke(app, ["bundle"])
    assert r.exit_code == 0, r.output
    assert "bundle dpo" in r.output and "verdict hold" in r.output and "the shipped candidate grpo" in r.output
    for c in ("sft", "dpo", "grpo"):
        b = bundle.verify(root / f"release/bundles/{c}.json", root)
        assert b.candidate == c and {f.path.split("/")[1] for f in b.files if f.role == "adapter"} == {c}
    assert (root / "release/bundle.json").read_bytes() == (root / "release/bundles/grpo.json").read_bytes()
    for f in (root / "models/grpo/adapter").iterdir():  # the `clap-adapter` artifact's path: the shipped one's bytes
        assert (root / "models/shipped/adapter" / f.name).read_bytes() == f.read_bytes()

    shipped = (root / "release/bundle.json").read_bytes()
    (root / "release/bundle.json").write_bytes((root / "release/bundles/dpo.json").read_bytes())  # a held one posing
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "held candidate's bundle in the release slot")
    with pytest.raises(release.ReleaseRefused, match="pins candidate 'dpo'; the gate ships 'grpo'"):
        release.release(root)
    (root / "release/bundle.json").write_bytes(shipped)
    sh(root, "git", "commit", "-qam", "the shipped bundle back")
    assert release.release(root)["version"] == "v0.0.1"

    shutil.rmtree(root / "models/dpo")  # judged, but nothing to pin: no bundle, said so, no stale one left behind
    (root / "metrics/gate.json").write_text(json.dumps(gate | {"candidates": {"sft": {"decision": "promote"},
                                                                               "dpo": {"decision": "hold"}}}
                                                       | {"candidate": "sft"}))
    r = CliRunner().invoke(app, ["bundle"])
    assert r.exit_code == 0 and "bundle dpo: none" in r.output, r.output
    assert sorted(p.name for p in (root / "release/bundles").iterdir()) == ["sft.json"]
    assert bundle.verify(root / "release/bundle.json", root).candidate == "sft"


def test_rollback_to_base_withdraws_prod_and_the_version_comes_back_from_the_cache(repo, tiny_dir):
    """docs/design.md §6's fallback: with one version ever in prod, `--to base` unassigns it (GTO's own tag, GTO agrees that
    nothing is in prod), and naming the version brings its deleted adapter back byte for byte."""
    root, params = repo
    v1 = _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    with pytest.raises(release.ReleaseRefused, match="no earlier version was ever in prod .--to base"):
        release.rollback(root)
    out = release.rollback(root, release.BASE)
    assert (out["from"], out["to"], out["tags"]) == ("v0.0.1", "base", ["clap-adapter#prod!#2"])
    assert release.current(root, "prod") is None and gto_show(root)["stage"] == {}
    assert json.loads((root / "release/prod.json").read_text())["version"] is None
    assert "rollback from v0.0.1 to the base model" in sh(root, "git", "tag", "-l", "--format=%(contents)",
                                                          "clap-adapter#prod!#2")
    with pytest.raises(release.ReleaseRefused, match="the base model serves already"):
        release.rollback(root, release.BASE)
    with pytest.raises(release.ReleaseRefused, match="nothing is in prod: name the version"):
        release.rollback(root)
    shutil.rmtree(root / "models/sft/adapter")
    back = release.rollback(root, "0.0.1")
    assert (back["from"], back["to"], back["tag"]) == ("base", "v0.0.1", "clap-adapter#prod#3")
    for path, data in v1.items():
        assert (root / path).read_bytes() == data, path
    assert gto_show(root)["stage"] == {"prod": "v0.0.1"}
    with pytest.raises(release.ReleaseRefused, match="v0.0.1 is in prod already"):
        release.rollback(root, "v0.0.1")


def test_stage_tags_made_back_to_back_get_seconds_of_their_own(tmp_path):
    """GTO orders stage events by the tag's date, to the second: an unassignment and the assignment right after it
    must not share a second, or GTO reads the version as withdrawn."""
    sh(tmp_path, "git", "init", "-q")
    sh(tmp_path, "git", "config", "user.name", "t")
    sh(tmp_path, "git", "config", "user.email", "t@t")
    sh(tmp_path, "git", "commit", "-q", "--allow-empty", "-m", "x")
    head = sh(tmp_path, "git", "rev-parse", "HEAD").strip()
    names = ["clap-adapter#prod#1", "clap-adapter#prod!#2", "clap-adapter#prod#3"]
    for name in names:
        release._tag(tmp_path, name, name, head)
    dates = [int(sh(tmp_path, "git", "for-each-ref", "--format=%(taggerdate:unix)", f"refs/tags/{n}")) for n in names]
    assert dates == sorted(set(dates)), dates


def test_withdrawing_prod_unassigns_every_version_gto_counts_in_it(repo, tiny_dir):
    """GTO lets several versions hold prod (the latest answers): unassigning only the latest would hand prod to the
    one before it, so the withdrawal tags each, most recent first."""
    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    _commit_version(root, tiny_dir, params, 2)
    release.release(root)
    assert [h["version"] for h in release.holders(root, "prod")] == ["v0.0.1", "v0.0.2"]
    out = release.rollback(root, release.BASE)
    assert out["tags"] == ["clap-adapter#prod!#3", "clap-adapter#prod!#4"] and out["from"] == "v0.0.2"
    assert release.holders(root, "prod") == [] and gto_show(root)["stage"] == {}


def test_the_demo_drill_goes_through_the_base_model_when_one_version_was_in_prod(repo, tiny_dir, monkeypatch):
    from clap.demo import rounds
    from clap.release.timeline import stage_events

    root, params = repo
    v1 = _commit_version(root, tiny_dir, params, 1)
    release.release(root)
    sh(root, "git", "add", "release/prod.json")
    sh(root, "git", "commit", "-qm", "prod v0.0.1")
    monkeypatch.chdir(root)
    d = rounds.drill(root)
    assert (d["from"], d["to"], d["restored"], d["withdrawn_tags"], d["restore_tag"]) == (
        "v0.0.1", "base", "v0.0.1", ["clap-adapter#prod!#2"], "clap-adapter#prod#3")
    assert d["adapter_files_identical"] is True and d["deleted_files"] == 4  # config, weights, manifest, model card: all pinned
    for path, data in v1.items():
        assert (root / path).read_bytes() == data, path
    assert sh(root, "git", "log", "-2", "--format=%s").splitlines() == [
        "clap demo rollback drill: v0.0.1 restored from the DVC cache to prod",
        "clap demo rollback drill: prod v0.0.1 → the base model"]
    assert sh(root, "git", "status", "--porcelain", "--untracked-files=no") == ""
    rows = stage_events(root)
    assert [(r["baseline"], r["candidate"], r["tags"]) for r in rows] == [
        ("prod v0.0.1", "base model", ["clap-adapter#prod!#2"]), ("base", "restores v0.0.1", ["clap-adapter#prod#3"])]


def test_clap_rollback_to_base_and_its_refusals_from_the_command_line(repo, tiny_dir, monkeypatch):
    from typer.testing import CliRunner

    from clap.cli import app

    root, params = repo
    _commit_version(root, tiny_dir, params, 1)
    monkeypatch.chdir(root)
    r = CliRunner().invoke(app, ["rollback"])
    assert r.exit_code == 1 and "rollback refused: nothing is in prod: name the version" in " ".join(r.output.split())
    release.release(root)
    r = CliRunner().invoke(app, ["rollback", "--to", "base"])
    assert r.exit_code == 0 and "prod: v0.0.1 → the base model (clap-adapter#prod!#2)" in " ".join(r.output.split())


@pytest.mark.parametrize("pinned, defined, stray", [
    (["data/materialized/b1", "data/materialized/b5"], ["data/materialized/b1"], ["data/materialized/b5"]),
    (["data/materialized/b1"], ["data/materialized/b1", "data/materialized/b2"], []),  # the restore brings b2 back
    (["metrics/eval/b5.json"], ["data/materialized/b1", "metrics/eval/b5.json"], []),  # git restored it: it stays
    (["models/sft"], ["models/sft/adapter"], []),                                       # overlapping paths stay
    (["data/materialized"], ["data/materialized/b1"], []),
])
def test_stray_outputs_are_the_later_rounds_own(pinned, defined, stray):
    assert release.stray_outputs(dict.fromkeys(pinned, "x"), defined) == stray


def test_a_fresh_clone_elsewhere_verifies_a_release_made_here(repo, tiny_dir, tmp_path):
    """The bundle names the base model by a repository path and its content, never by this machine's path."""
    root, params = repo
    sh(root, "dvc", "add", "-q", "models/base")
    _commit_version(root, tiny_dir, params, 1)
    sh(root, "dvc", "push", "-q")
    b = bundle.verify(root / "release/bundle.json", root)
    assert b.base_model["path"] == "models/base" and "config.json" in b.base_model["files_sha256"]
    assert str(tmp_path) not in json.dumps(b.model_dump()["base_model"])
    release.release(root)
    clone = tmp_path / "elsewhere" / "clone"
    sh(tmp_path, "git", "clone", "-q", str(root), str(clone))
    sh(clone, "dvc", "pull", "-q")
    assert bundle.verify(clone / "release/bundle.json", clone).candidate == "sft"
    flip_last_byte(clone / "models/base/tokenizer.json") if (clone / "models/base/tokenizer.json").exists() \
        else flip_last_byte(clone / "models/base/config.json")
    with pytest.raises(bundle.BundleMismatch, match="base model file differs"):
        bundle.verify(clone / "release/bundle.json", clone)


def _agent_run(root: Path, tiny_dir, params, agent_decision: str, seed: int) -> None:
    """A loop run with the agent track: the gate judged agent_sft `agent_decision`."""
    (root / "models/agent_sft/adapter").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(root / "models/agent_sft/adapter")
    make_adapter(tiny_dir, root / "models/agent_sft/adapter")
    (root / "models/agent_sft/guard_report.json").write_text(json.dumps({"status": "ok", "seed": seed}))
    _fake_run(root, tiny_dir, params, "promote", seed)
    gate = json.loads((root / "metrics/gate.json").read_text())
    gate["agent"] = {"candidate": "agent_sft", "decision": agent_decision, "reasons": [], "summary": {}}
    (root / "metrics/gate.json").write_text(json.dumps(gate))
    bundle.write(root, params, root / "release/bundle.json")
    sh(root, "dvc", "add", "-q", "data/materialized", "models/sft", "models/agent_sft")
    outs = {o: yaml.safe_load((root / f"{o}.dvc").read_text())["outs"][0]["md5"] for o in ("models/sft", "models/agent_sft")}
    (root / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {  # the pipeline's lock, as prod restores by
        f"train_{Path(o).name}": {"cmd": "clap train", "outs": [{"path": o, "md5": md5}]} for o, md5 in outs.items()}}))
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", f"run {seed}")


def test_a_held_agent_adapter_never_ships(repo, tiny_dir, monkeypatch):
    """The agent track on and its verdict hold: the bundle pins no agent adapter, `clap agent-adapter` refuses in one
    line; a later release that holds the agent keeps the agent adapter already in prod, pinned by its own release."""
    from typer.testing import CliRunner

    from clap.cli import app
    from clap.release import prod

    root, params = repo
    monkeypatch.chdir(root)
    _agent_run(root, tiny_dir, params, "hold", 1)
    b = bundle.verify(root / "release/bundle.json", root)
    assert not [f for f in b.files if f.role == "agent_adapter"]
    assert b.tracks["agent"] == {"candidate": "agent_sft", "decision": "hold", "ships": None, "carried_from": None}
    assert release.release(root)["version"] == "v0.0.1"
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "prod pointer")
    r = CliRunner().invoke(app, ["agent-adapter"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "v0.0.1 serves no agent adapter: its gate's agent verdict was hold" in " ".join(r.output.split())
    assert not (root / "models/serving/agent/v0.0.1/adapter").exists()
    ptr = prod.restore(root, root / "models/prod")
    assert "agent_candidate" not in ptr and not (root / "models/prod/agent_adapter").exists()

    # a held agent adapter pinned by hand is refused by verify and release
    path = root / "release/bundle.json"
    forged = json.loads(path.read_text())
    forged["files"] += [{"path": f"models/agent_sft/adapter/{n}", "sha256": bundle.sha256_file(
        root / f"models/agent_sft/adapter/{n}"), "role": "agent_adapter"} for n in bundle.ADAPTER_REQUIRED]
    path.write_text(json.dumps(forged))
    with pytest.raises(bundle.BundleMismatch, match="agent adapter"):
        bundle.verify(path, root)
    sh(root, "git", "checkout", "--", "release/bundle.json")

    # round 2 promotes its agent adapter; round 3 holds a new one: prod's (v0.0.2's) stays, restored from v0.0.2
    _agent_run(root, tiny_dir, params, "promote", 2)
    assert {f.path for f in bundle.verify(path, root).files if f.role == "agent_adapter"} >= {
        "models/agent_sft/adapter/adapter_model.safetensors"}
    assert release.release(root)["version"] == "v0.0.2"
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "prod pointer")
    v2_agent = (root / "models/agent_sft/adapter/adapter_model.safetensors").read_bytes()
    _agent_run(root, tiny_dir, params, "hold", 3)
    b3 = bundle.verify(path, root)
    assert b3.tracks["agent"]["carried_from"] == "v0.0.2" and not [f for f in b3.files if f.role == "agent_adapter"]
    assert release.release(root)["version"] == "v0.0.3"
    folder, _ = prod.restore_version_adapter(root, "v0.0.3", root / "served", role="agent_adapter")
    assert (folder / "adapter_model.safetensors").read_bytes() == v2_agent


def test_a_killed_writers_temporary_folder_is_not_evidence(repo, tiny_dir):
    """`.b1.tmp-PID-…` beside a batch (a run killed mid-write, cleared by the stage's next run) is no output: the
    bundle neither pins it nor fails verification over it; a file added inside the batch's folder still fails."""
    root, params = repo
    _fake_run(root, tiny_dir, params)
    stale = root / "data/materialized/.b1.tmp-999999-x"
    stale.mkdir()
    (stale / "sft_train.jsonl").write_text("half\n")
    bundle.write(root, params, root / "release/bundle.json")
    b = bundle.verify(root / "release/bundle.json", root)
    assert not [f for f in b.files if ".tmp-" in f.path]
    (root / "data/materialized/b1/.hidden.jsonl").write_text("x\n")
    with pytest.raises(bundle.BundleMismatch):
        bundle.verify(root / "release/bundle.json", root)


@pytest.mark.parametrize("kind", ["gguf", "folder", "hub"])
def test_verify_fails_when_the_bases_bytes_differ_for_each_kind_of_source(kind, repo, tiny_dir, tmp_path, monkeypatch):
    """A dequantised GGUF in models/base, a local folder used in place, a Hub snapshot used in place: the bundle pins
    the bytes trained on, wherever they lie, and `clap verify` names the base file that changed."""
    import huggingface_hub

    from clap import model
    from clap.config import Model

    root, params = repo
    p = json.loads(json.dumps(params))
    if kind == "gguf":  # the repo's models/base stands for a dequantised GGUF: the weights inside the repository
        weights = root / "models/base/model.safetensors"
    else:
        folder = (tmp_path / "team-model" if kind == "folder"
                  else tmp_path / "hub/models--acme--tiny/snapshots/89abcdef89abcdef")
        shutil.copytree(tiny_dir, folder)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(folder))
        shutil.rmtree(root / "models/base")
        p["model"] |= {"base": str(folder) if kind == "folder" else "acme/tiny", "download": kind == "hub"}
        (root / "params.yaml").write_text(dump(p))
        assert model.resolve(Model(**p["model"] | {"cache_dir": str(root / "models/base")})) == folder
        weights = folder / "model.safetensors"
    _fake_run(root, tiny_dir, p)
    b = json.loads((root / "release/bundle.json").read_text())
    assert Path(b["base_model"]["path"]).name == weights.parent.name  # the folder trained on, not a copy
    r = subprocess.run(["clap", "verify"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    flip_last_byte(weights)
    r = subprocess.run(["clap", "verify"], cwd=root, capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    assert "base model weights differ from the bundle" in r.stdout + r.stderr
