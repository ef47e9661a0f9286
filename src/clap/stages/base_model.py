"""base_model: resolve and pin the base model `model.base` names.

    clap base-model            (DVC stage `base_model`, writes models/base/)

A packaged or file GGUF is dequantised once into `model.cache_dir`; a local folder or a Hub snapshot
(`model.download`) is used in place and its files' hashes pinned there (`clap.model`).
"""

from __future__ import annotations

from pathlib import Path

from clap import model
from clap.config import Model


def run(section: Model) -> tuple[Path, dict]:
    """The base model's folder and its identity (name, hub id, weights sha256) after pinning it again."""
    path = model.resolve(section, repin=True)
    return path, model.identity(path)
