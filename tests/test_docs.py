"""The front door: the README stays short, the documentation site builds strict (no broken link or anchor, no page
outside the navigation), and no README, page, conf comment, docstring or build file names a file or a design
section that does not exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT

PATH_TOKEN = re.compile(r"(?<![\w./-])((?:docs|benchmarks|src|tests|conf|\.ci)/[\w./-]*\w\.(?:md|py|yaml|json|txt|png|svg|sh))")
SOURCES = [ROOT / "README.md", ROOT / "Makefile", ROOT / "dvc.yaml", ROOT / "mkdocs.yml", ROOT / "setup.py",
           *ROOT.glob("docs/**/*.md"), *ROOT.glob("conf/**/*.yaml"), *ROOT.glob("src/clap/**/*.py"),
           *ROOT.glob("benchmarks/*.py"), *ROOT.glob("tests/**/*.py")]


def test_the_readme_is_a_front_door_not_a_notebook():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dates belong in benchmarks/README.md and CHANGELOG.md"
    assert not re.search(r"\b(fresh clone of|commit) [0-9a-f]{7}\b", text), "commit hashes belong in git log"
    assert "../shared" not in text


def test_the_site_builds_strict(tmp_path):
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "site" / "tutorial" / "own-data" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_text_names_exists(source):
    text = source.read_text(encoding="utf-8")
    written = set(re.findall(r"Path\(\"([^\"]+)\"\)", text)) if source.suffix == ".py" else set()  # outputs it makes
    missing = sorted({m for m in PATH_TOKEN.findall(text) if not (ROOT / m).exists() and m not in written})
    assert not missing, f"{source.relative_to(ROOT)} names files that do not exist: {missing}"


def test_every_design_section_cited_exists():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\.", design, flags=re.M)}
    for source in SOURCES:
        for n in re.findall(r"docs/design\.md §(\d+)", source.read_text(encoding="utf-8")):
            assert int(n) in sections, f"{source.relative_to(ROOT)} cites docs/design.md §{n}, which does not exist"


def test_nothing_points_into_the_readme_for_what_moved_out():
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        assert not re.search(r"README(?:\.md)?(?: §|, \")", text.replace("benchmarks/README.md", "")), \
            f"{source.relative_to(ROOT)} cites a README section; cite the docs page instead"


def test_the_gpu_setup_line_of_the_how_to_reaches_pip_as_separate_arguments(tmp_path):
    """docs/how-to/gpu.md's `make setup TORCH_SPEC="torch==… --index-url …"`: pip gets the spec and the index URL as
    arguments of their own (a quoted spec was one `Invalid requirement`)."""
    import shlex

    line = re.search(r'`make setup TORCH_SPEC="([^"]+)"`', (ROOT / "docs/how-to/gpu.md").read_text()).group(1)
    r = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}", f"TORCH_SPEC={line}"], cwd=ROOT,
                       capture_output=True, text=True)
    pip = next(x for x in r.stdout.splitlines() if "pip install" in x and "torch" in x)
    args = shlex.split(pip)
    assert args[args.index("-q") + 1:] == line.split(), pip


def test_clap_version_names_the_version_and_the_commit():
    import clap

    r = subprocess.run([str(Path(sys.executable).parent / "clap"), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith(f"clap {clap.__version__}"), r.stdout + r.stderr
    if (ROOT / ".git").exists():
        assert "(commit " in r.stdout
