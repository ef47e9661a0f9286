"""Build hook only (the project is declared in pyproject.toml): a wheel carries this repository's `dvc.yaml`
and `conf/` as `clap/_template/`, the pipeline and configuration `clap init` copies into a new project
(clap.project.template_root), so an installed CLAP can start a project without this checkout."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TEMPLATE = ("dvc.yaml", "conf", "repair/fixed/README.md", "repair/agent/README.md")


class BuildWithTemplate(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "clap" / "_template"
        for name in TEMPLATE:
            source, dest = ROOT / name, target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildWithTemplate})
