"""CLAP installs under its own distribution name, `clap-loop` (PyPI's `clap` is an unrelated project): the wheel
built from this checkout is named so, carries its extras and the `clap` command, and pip resolves it with an extra
in a clean virtual environment, as `pip install 'clap-loop[s3]'` would."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_distribution_name_is_clap_loop_everywhere_an_install_is_written():
    import tomllib

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == "clap-loop"
    from clap.cli.common import DISTRIBUTION

    assert DISTRIBUTION == "clap-loop"
    written = [p for p in [ROOT / "README.md", ROOT / "conf" / "config.yaml", *(ROOT / "docs").rglob("*.md"),
                           *(ROOT / "src").rglob("*.py")]
               if "pip install 'clap[" in p.read_text(encoding="utf-8")]
    assert written == []


def test_every_extra_is_bounded_and_the_gpu_extra_starts_where_transformers_loads_4bit():
    """An unbounded extra installs whatever is newest on the day; the gpu extra's floor is the bitsandbytes the
    locked transformers needs for 4-bit loading, so a transformers upgrade that raises it fails here."""
    import tomllib

    from packaging.requirements import Requirement
    from transformers.utils.import_utils import BITSANDBYTES_MIN_VERSION

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    unbounded = [f"{name}: {spec}" for name, specs in extras.items() for spec in specs
                 if not Requirement(spec).specifier]
    assert unbounded == []
    (gpu,) = [Requirement(spec) for spec in extras["gpu"]]
    assert gpu.name == "bitsandbytes" and f">={BITSANDBYTES_MIN_VERSION}" in str(gpu.specifier)
    assert not gpu.specifier.contains("0.46.0") and gpu.specifier.contains(BITSANDBYTES_MIN_VERSION)


@pytest.mark.parametrize("tool", ["label-studio", "mlflow-ui"])
def test_a_tool_environment_installs_exactly_its_lock(tool):
    """`make label-studio` / `make mlflow-env` install `pip install -r tools/<tool>.lock`: every package there is
    pinned with `==` (a dependency's new release, such as sentry-sdk 3 for Label Studio 1.23.2, cannot change what
    the slow tests start), and the lock satisfies every requirement its `tools/<tool>.in` states."""
    import re

    from packaging.requirements import Requirement

    pinned = {}
    for line in (ROOT / "tools" / f"{tool}.lock").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement = Requirement(line)
            assert re.fullmatch(r"==[^,*]+", str(requirement.specifier)), line
            pinned[requirement.name.lower().replace("_", "-")] = str(requirement.specifier)[2:]
    wanted = [Requirement(line) for line in (ROOT / "tools" / f"{tool}.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    unmet = [str(r) for r in wanted if not r.specifier.contains(pinned.get(r.name.lower(), "absent"))]
    assert wanted and unmet == []
    makefile = (ROOT / "Makefile").read_text()
    assert f"LOCK = tools/{tool}.lock" in makefile and "pip install -q -r $(LOCK)" in makefile


@pytest.mark.slow
def test_the_wheel_installs_with_an_extra_in_a_clean_venv(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    assert wheel.name.startswith("clap_loop-")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
        assert any(n.startswith("clap/_template/conf/") for n in z.namelist())  # what `clap init` copies
    assert "Name: clap-loop" in meta and "clap = clap.cli:app" in entry
    for extra in ("s3", "ray", "mlflow"):
        assert f"Provides-Extra: {extra}" in meta
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    report = tmp_path / "report.json"
    resolved = subprocess.run([*pip, "install", "-q", "--dry-run", "--ignore-installed", "--report", str(report),
                               f"{wheel}[s3]", "torch==2.13.0"], capture_output=True, text=True)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    names = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert {"clap-loop", "dvc-s3", "dvc", "transformers"} <= names
    subprocess.run([*pip, "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('clap-loop'))"],
                             capture_output=True, text=True, check=True)
    assert version.stdout.strip() == __import__("clap").__version__ and (venv / "bin" / "clap").exists()
