"""docs/reference/ is generated from the code (`clap reference`): a stale page fails here."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

ENV = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def clap(*args, cwd=None):
    return subprocess.run(["clap", *args], cwd=cwd, env=ENV, capture_output=True, text=True)


def test_the_reference_pages_are_what_the_code_generates():
    r = clap("reference", "--check", "--out", str(ROOT / "docs" / "reference"), cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    from clap.domain.contracts import RAW_SCHEMAS
    from clap.reference import raw_contract

    page = raw_contract()
    for name, model in RAW_SCHEMAS.items():
        for field in model.to_schema().columns:
            assert f"| `{field}` |" in page, (name, field)
