"""What `clap serve` serves: a registered version's adapter (prod's by default) restored from the DVC cache and
checked against the bundle at its release tag, or an unreleased adapter that dvc.lock pins — never an unchecked
folder. Then the engine that answers with it: the CPU/transformers engine here, or on CUDA vLLM's own OpenAI
server with the verified folder as a `--lora-modules` entry. `--agent` serves the tool-calling agent adapter a
version ships instead (`agent_to_serve`, `agent_engine`).
"""

from __future__ import annotations

from pathlib import Path

from clap import model, paths
from clap.agent.engine import served_agent
from clap.config import Params
from clap.errors import UserError
from clap.evaluate.engines import decoding
from clap.evaluate.generate import Engine
from clap.feedback.canary import vllm_command as canary_vllm_command
from clap.integrity import pinned_expectation, verify_adapter
from clap.release.prod import restore_version_adapter
from clap.release.registry import current


class NothingToServe(UserError, RuntimeError):
    """No version is in prod and none was named."""


def adapter_to_serve(root: Path, version: str | None = None, adapter: Path | None = None) -> tuple[str, Path, dict]:
    """(served name, adapter folder, the manifest git pins for it): `adapter` (pinned by dvc.lock) as `candidate`,
    else `version` or the one in prod as `clap-adapter@<version>`, restored into models/serving/<version>/adapter."""
    root = Path(root)
    if adapter is not None:
        return "candidate", Path(adapter), pinned_expectation(root, Path(adapter))
    version = _version(root, version, " (or an unreleased adapter with --adapter)")
    folder, expected = restore_version_adapter(root, version, root / paths.MODELS / "serving" / version / "adapter")
    return f"{paths.ARTIFACT}@{version}", folder, expected


def _version(root: Path, version: str | None, or_else: str = "") -> str:
    """`version`, or the one in prod; NothingToServe when neither."""
    if version is not None:
        return version
    holder = current(root, "prod")
    if holder is None:
        raise NothingToServe(f"nothing is in prod: release a version (`clap release`) or name one with --version{or_else}")
    return holder["version"]


def cpu_engine(cfg: Params, folder: Path | None, expected: dict | None):
    """The transformers engine with the adapter attached through the serving check (`serving.attach`); the base
    model alone when `folder` is None (`clap serve --base`)."""
    return Engine(model.resolve(cfg.model), folder, expected, **decoding(cfg.generate))


def vllm_command(cfg: Params, name: str, folder: Path, expected: dict, host: str, port: int) -> list[str]:
    """`vllm serve` over the base with the verified adapter as its one LoRA module, named as `clap serve` names it."""
    base = model.resolve(cfg.model)
    verify_adapter(folder, expected, model.identity(base))
    return [*canary_vllm_command(base, {name: folder}, port), "--host", host]


def agent_to_serve(root: Path, version: str | None = None) -> tuple[str, Path, dict]:
    """(served name `clap-agent@<version>`, agent adapter folder, its pinned manifest): the tool-calling agent adapter
    the version in prod (or `version`) serves — the one its gate shipped, or the one in prod it carried — restored
    into models/serving/agent/<version>/adapter and checked against the bundle of the release that pinned it."""
    root = Path(root)
    version = _version(root, version)
    folder, expected = restore_version_adapter(root, version, root / paths.MODELS / "serving" / "agent" / version /
                                               "adapter", role="agent_adapter")
    return f"clap-agent@{version}", folder, expected


def agent_engine(cfg: Params, name: str, folder: Path, expected: dict):
    """(the engine rendering the agent's conversations with its tools, the adapter attached as `name` through the
    serving check; the `AgentServing` the application needs) — `clap.agent.engine.served_agent`."""
    return served_agent(cfg.generate, cfg.model, [(name, folder, expected)])
