"""base_model: resolve and pin the base model `model.base` names.

    clap base-model            (DVC stage `base_model`, writes models/base/)

A packaged or file GGUF is dequantised once into `model.cache_dir`; a local folder or a Hub snapshot
(`model.download`) is used in place and its files' hashes pinned there (`clap.model`).
"""

from __future__ import annotations

from pathlib import Path

from clap import model
from clap.config import Model, Params
from clap.stages.spec import StageSpec


def run(section: Model) -> tuple[Path, dict]:
    """The base model's folder and its identity (name, hub id, weights sha256) after pinning it again."""
    path = model.resolve(section, repin=True)
    return path, model.identity(path)


def main(params: Params) -> list[str]:
    """Resolve and pin the base model `model.base` names: a packaged or file GGUF dequantised once into
    `model.cache_dir`; a local folder or Hub snapshot used in place, its files' hashes pinned there."""
    path, ident = run(params.model)
    return [f"base model ready: {ident['hub_id']} at {path} {ident['weights_sha256']}"]


STAGE = StageSpec(name="base_model", group="data", main=main)
