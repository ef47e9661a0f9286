"""`clap init`: a project whose pipeline starts at `ingest` (or the demo's, with --demo), composed from this
repository's own dvc.yaml and conf/; never over a folder's files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.conftest import ROOT

from clap.project import project_config, project_pipeline

ENV = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def clap(*args, cwd=None):
    return subprocess.run(["clap", *args], cwd=cwd, env=ENV, capture_output=True, text=True)


def test_init_makes_a_project_that_starts_from_its_sources(tmp_path):
    r = clap("init", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    p = tmp_path / "p"
    for f in ("conf/config.yaml", "conf/ingest/default.yaml", "conf/gate/default.yaml", "dvc.yaml", "params.yaml",
              ".gitignore", "README.md", ".dvc/config", "release/prod.json", "metrics/human.json",
              "sources/docs/.gitkeep", "sources/tables/.gitkeep", "repair/fixed/README.md"):
        assert (p / f).exists(), f
    pipeline = yaml.safe_load((p / "dvc.yaml").read_text())
    assert list(pipeline["stages"])[0] == "ingest" and "demo_data" not in pipeline["stages"]
    deps = [d for s in pipeline["stages"].values() for d in s.get("do", s).get("deps", [])]
    assert not [d for d in deps if str(d).startswith("src/")]
    params = yaml.safe_load((p / "params.yaml").read_text())
    assert "demo" not in params and params["ingest"]["docs"] == "sources/docs" and params["data"]["batches"] == ["b1"]
    assert not params["train"]["dpo"]["enabled"] and not params["train"]["grpo"]["enabled"]
    assert not params["agent"]["enabled"]
    # sized from the project's data, not the demo's caps: every row, SFT steps from epochs
    assert params["train"]["sft"]["max_steps"] == -1 and params["train"]["sft"]["epochs"] == 2
    assert params["train"]["sft"]["max_length"] == 2048  # an application prompt of 3 retrieved report chunks fits
    assert (params["train"]["sft"]["per_device_batch_size"], params["train"]["sft"]["gradient_accumulation"]) == (1, 8)
    assert params["replay"]["max_new_tokens"] == 384  # an app answer naming long chunk and document ids closes
    assert all(params["materialize"][k] is None for k in ("max_train_per_batch", "max_eval_per_batch",
                                                          "max_replay_per_batch"))
    assert "demo sizing" not in (p / "conf/config.yaml").read_text()
    assert clap("params", "--check", cwd=p).returncode == 0
    log = subprocess.run(["git", "log", "--oneline"], cwd=p, capture_output=True, text=True).stdout
    assert "clap init" in log
    r = clap("registry", cwd=p)  # no release yet: said, not an empty screen
    assert r.returncode == 0 and "no versions of clap-adapter yet" in r.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=p, capture_output=True, text=True).stdout
    assert status == ""
    assert "dvc repro" in (p / "README.md").read_text() and "clap release" in (p / "README.md").read_text()


def test_init_demo_keeps_the_demo_pipeline(tmp_path):
    assert clap("init", "--demo", str(tmp_path / "d")).returncode == 0
    pipeline = yaml.safe_load((tmp_path / "d" / "dvc.yaml").read_text())
    assert list(pipeline["stages"])[0] == "demo_data" and "ingest" not in pipeline["stages"]
    assert not (tmp_path / "d" / "conf" / "ingest").exists()
    assert yaml.safe_load((tmp_path / "d" / "params.yaml").read_text())["demo"]["seed"] == 7


def test_init_refuses_a_non_empty_folder_and_never_overwrites(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "notes.txt").write_text("mine")
    r = clap("init", str(tmp_path / "p"))
    assert r.returncode == 2 and "not empty" in r.stdout and "Traceback" not in r.stderr
    assert clap("init", "--force", str(tmp_path / "p")).returncode == 0
    assert (tmp_path / "p" / "notes.txt").read_text() == "mine"
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "dvc.yaml").write_text("stages: {}\n")
    r = clap("init", "--force", str(tmp_path / "q"))
    assert r.returncode == 2 and "dvc.yaml: exists; clap init never overwrites a file" in r.stdout
    assert (tmp_path / "q" / "dvc.yaml").read_text() == "stages: {}\n"


def test_the_project_pipeline_is_this_repositorys_own():
    """One definition: every stage but demo_data is the repository's, with the same command, outs and params."""
    ours = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    theirs = project_pipeline(ours, demo=False)
    assert set(theirs["stages"]) == set(ours["stages"]) - {"demo_data"} | {"ingest"}
    assert theirs["artifacts"] == ours["artifacts"]  # `dvc artifacts get` works in a team's project too
    for name, stage in ours["stages"].items():
        if name != "demo_data":
            body, copy = stage.get("do", stage), theirs["stages"][name].get("do", theirs["stages"][name])
            assert copy["params"][-1] == {"clap-code.json": [f"stages.{name}"]}  # CLAP's code, pinned per stage
            copy = copy | {"params": copy["params"][:-1]}
            assert {k: v for k, v in body.items() if k not in ("deps", "params")} == \
                {k: v for k, v in copy.items() if k not in ("deps", "params")}
            assert body.get("params", []) == copy["params"]


@pytest.mark.parametrize("key", ["  - ingest: default", "data:\n  batches: [b1]"])
def test_the_project_config_is_this_repositorys_own(key):
    text = project_config((ROOT / "conf" / "config.yaml").read_text())
    assert key in text and "\ndemo:" not in text



def test_the_wheel_installs_in_a_clean_venv_and_starts_a_project(tmp_path):
    """The wheel (PEP 517 build through setup.py's hook, which carries dvc.yaml and conf/ as clap/_template) installed
    into a new venv: `clap --help` lists the commands and `clap init` makes a project without this checkout. The new
    venv borrows the dependencies of this one through a path file (not its .pth files, so not the editable install)."""
    import site
    import venv

    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("clap_loop-*.whl"))  # the distribution `clap-loop`
    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    (packages / "borrowed_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"} | {"PATH": f"{python.parent}:{ENV['PATH']}"}
    r = subprocess.run([str(python.parent / "clap"), "--help"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "ingest" in r.stdout and "release" in r.stdout, r.stdout + r.stderr
    where = subprocess.run([str(python), "-c", "import clap.project as p; print(p.template_root())"], env=env,
                           capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert where == str(packages / "clap" / "_template")
    r = subprocess.run([str(python.parent / "clap"), "init", "proj"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(x.name for x in (tmp_path / "proj" / "conf").iterdir()) == ["accelerate", "config.yaml", "gate", "ingest", "model"]


def git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout


def test_init_in_an_existing_repository_commits_only_its_own_files(tmp_path):
    """The user's edited, staged and untracked files (an API key in .env.local among them) stay out of the commit
    and as they were."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "tracked.txt").write_text("v1\n")
    git("add", "tracked.txt", cwd=repo)
    git("commit", "-qm", "first", cwd=repo)
    (repo / "tracked.txt").write_text("v1\nunfinished edit\n")
    (repo / "staged.txt").write_text("staged\n")
    git("add", "staged.txt", cwd=repo)
    (repo / ".env.local").write_text("OPENAI_API_KEY=sk-not-for-git\n")
    (repo / "notes.md").write_text("my notes\n")
    r = clap("init", "--force", str(repo))
    assert r.returncode == 0, r.stdout + r.stderr
    committed = git("show", "--name-only", "--format=", "HEAD", cwd=repo).split()
    assert "dvc.yaml" in committed and "params.yaml" in committed
    assert not {"tracked.txt", "staged.txt", ".env.local", "notes.md"} & set(committed)
    assert sorted(git("status", "--porcelain", cwd=repo).splitlines()) == [" M tracked.txt", "?? .env.local", "?? notes.md",
                                                                          "A  staged.txt"]


@pytest.mark.parametrize("make", ["params", "dangling_symlink", "symlinked_folder"])
def test_init_force_never_clobbers_nor_writes_through_a_symlink(tmp_path, make):
    p, outside = tmp_path / "p", tmp_path / "outside"
    p.mkdir()
    outside.mkdir()
    if make == "params":
        (p / "params.yaml").write_text("mine: 1\n")
        named = "params.yaml: exists; clap init never overwrites a file"
    elif make == "dangling_symlink":
        (p / "README.md").symlink_to(outside / "written-through.md")
        named = "README.md: exists; clap init never overwrites a file"
    else:
        (p / "conf").symlink_to(outside, target_is_directory=True)
        named = "conf: a symlink; clap init writes only inside the project folder"
    r = clap("init", "--force", str(p))
    assert r.returncode == 2 and named in r.stdout and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert list(outside.iterdir()) == []
    assert not (p / "dvc.yaml").exists() and not (p / ".git").exists()
    if make == "params":
        assert (p / "params.yaml").read_text() == "mine: 1\n"


def test_the_installed_clap_code_is_pinned_per_stage_and_a_mismatch_is_one_line(tmp_path):
    """clap-code.json pins each stage's code; every stage depends on its own pin; a stage run under other code stops
    before any work naming both identities; `clap upgrade` re-pins and DVC sees exactly that stage's pin change."""
    import json

    p = tmp_path / "p"
    assert clap("init", str(p)).returncode == 0
    pins = json.loads((p / "clap-code.json").read_text())
    pipeline = yaml.safe_load((p / "dvc.yaml").read_text())
    assert set(pins["stages"]) == set(pipeline["stages"]) and pins["commands"]["train_sft"] == "train sft"
    for name, stage in pipeline["stages"].items():
        assert {"clap-code.json": [f"stages.{name}"]} in stage.get("do", stage)["params"], name
    pinned = pins["stages"]["train_sft"]
    pins["stages"]["train_sft"] = "0" * 16  # the project was pinned by another CLAP
    (p / "clap-code.json").write_text(json.dumps(pins))
    git("commit", "-qam", "pinned by another clap", cwd=p)
    r = clap("train", "sft", "--out", "models/sft", cwd=p)
    out = " ".join(r.stdout.split())
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert (f"clap-code.json: stage train_sft is pinned to CLAP {pins['clap']} code 0000000000000000, the installed "
            f"CLAP {pins['clap']} runs code {pinned}; run `clap upgrade` to re-pin") in out
    assert not (p / "models" / "sft").exists()
    r = clap("upgrade", cwd=p)
    assert r.returncode == 0 and f"train_sft: 0000000000000000 → {pinned}" in r.stdout
    diff = subprocess.run(["dvc", "params", "diff"], cwd=p, env=ENV, capture_output=True, text=True).stdout
    changed = [line for line in diff.splitlines() if "stages." in line]
    assert len(changed) == 1 and "stages.train_sft" in changed[0], diff


def test_clap_upgrade_brings_an_older_projects_conf_to_this_clap(tmp_path):
    """As a user meets an upgrade: the project's conf/ was written by an older CLAP (a key under its old name, a key
    CLAP has since added missing, params.yaml composed from that). `clap upgrade` moves the one, adds the other with
    CLAP's default and comment, leaves every other line of the file as it was, and writes params.yaml; a key no CLAP
    knows stops it in one line before any file is written."""
    import re

    p = tmp_path / "p"
    assert clap("init", str(p)).returncode == 0
    conf = p / "conf" / "config.yaml"
    now = conf.read_text()
    older = re.sub(r"\n  latency_requests: .*\n(?: +#.*\n)*", "\n", now, count=1)  # not under replay yet ...
    older = older.replace("  unconstrained_format_check: true", "  latency_requests: 6           # mine\n"
                          "  unconstrained_format_check: true", 1)  # ... but under evaluate, the user's value
    older = re.sub(r"\n    pad_to_multiple_of: .*\n(?: +#.*\n)*", "\n", older, count=1)  # not there at all
    older = older.replace("  k: 3\n", "  k: 3                          # three chunks: our pages are long\n", 1)
    conf.write_text(older)
    r = clap("params", cwd=p)
    assert r.returncode == 2 and "unknown key evaluate.latency_requests" in r.stdout + r.stderr
    r = clap("upgrade", cwd=p)
    said = r.stdout.splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert said[:3] == ["conf/config.yaml: evaluate.latency_requests → replay.latency_requests (moved by CLAP; the "
                        "value kept: 6)",
                        "conf/config.yaml: train.sft.pad_to_multiple_of = 64 (new in CLAP; its default)",
                        "params.yaml: written from conf/"]
    params = yaml.safe_load((p / "params.yaml").read_text())
    assert params["replay"]["latency_requests"] == 6 and "latency_requests" not in params["evaluate"]
    assert params["train"]["sft"]["pad_to_multiple_of"] == 64
    text = conf.read_text()
    assert "  k: 3                          # three chunks: our pages are long\n" in text  # the user's own lines stay
    assert set(older.splitlines()) - set(text.splitlines()) == {"  latency_requests: 6           # mine"}
    assert re.search(r"\n    pad_to_multiple_of: 64 +# a batch .*\n(?: +#.*\n)* +# \(added by clap upgrade\)\n", text)
    assert clap("params", "--check", cwd=p).returncode == 0
    again = clap("upgrade", cwd=p)
    assert again.returncode == 0 and again.stdout.splitlines()[0] == "params.yaml: written from conf/"
    assert conf.read_text() == text
    conf.write_text(text.replace("  k: 3 ", "  fusion: max\n  k: 3 ", 1))
    before = conf.read_text()
    r = clap("upgrade", cwd=p)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2 and "Traceback" not in out
    assert "conf/config.yaml: unknown key retrieval.fusion — not something `clap upgrade` can decide" in out
    assert conf.read_text() == before


def test_clap_upgrade_adds_a_key_to_a_mapping_written_in_flow_style(tmp_path):
    """`evaluate.weights` is one line (`{parse_ok: 0.1, …}`): a weight the project lacks joins that line, which stays
    one line; what the edit makes composes and meets the schema before any file is written."""
    p = tmp_path / "p"
    assert clap("init", str(p)).returncode == 0
    conf = p / "conf" / "config.yaml"
    conf.write_text(conf.read_text().replace(", target_match: 0.2}", "}", 1))
    r = clap("upgrade", cwd=p)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "conf/config.yaml: evaluate.weights.target_match = 0.2 (new in CLAP; its default)" in r.stdout
    line = next(x for x in conf.read_text().splitlines() if x.startswith("  weights: {parse_ok"))
    assert line.startswith("  weights: {parse_ok: 0.1, field_accuracy: 0.2, value_accuracy: 0.3, evidence_accuracy: "
                           "0.2, target_match: 0.2}") and "(added by clap upgrade)" in line
    assert yaml.safe_load((p / "params.yaml").read_text())["evaluate"]["weights"]["target_match"] == 0.2
