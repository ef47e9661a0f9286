"""The agent track's commands: tasks, on-policy pairs, the reward model's check, the agent evaluation and pass^k —
each registered from its stage's spec (`clap.stages.registry`), whose `main` does the command's work — and the
shipped agent adapter."""

from __future__ import annotations

from pathlib import Path

import typer

from clap import paths
from clap.cli.common import _fail, app, console, register
from clap.release.prod import restore_version_adapter
from clap.release.registry import current
from clap.stages import registry

for spec in registry.group("agent"):
    register(spec)


@app.command("agent-adapter")
def agent_adapter(version: str = typer.Argument(None, help="a registered version (default: the one in prod)"),
                  out: Path = typer.Option(paths.MODELS / "serving" / "agent")) -> None:
    """Restore the tool-calling agent adapter a release shipped (from the DVC cache, checked byte for byte
    against the bundle at its tag), ready for `Engine` / vLLM to serve."""
    version = version or (current(Path("."), "prod") or {}).get("version")
    if not version:
        _fail(ValueError("nothing is in prod: name a registered version (`clap registry` lists them)"))
    folder, expected = restore_version_adapter(Path("."), version, out / version / "adapter", role="agent_adapter")
    console.print(f"agent adapter of {version} → {folder} (sha256 {expected['files']['adapter_model.safetensors'][:12]}, "
                  "verified against its release bundle)")
