"""Data commands: the demo's corpus, ingest, assetize, materialize, admit, the retrieval index, the repair queue and
the base model — each registered from its stage's spec (`clap.stages.registry`), whose `main` does the command's
work."""

from __future__ import annotations

from clap.cli.common import register
from clap.stages import registry

for spec in registry.group("data"):
    register(spec)
