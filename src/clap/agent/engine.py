"""The agent's engine: one base model serving the named agent adapters with the tool-calling template and the
tools' schemas (`clap agent-pairs`, `clap evaluate-agent`)."""

from __future__ import annotations

from pathlib import Path

from clap import model
from clap.agent.chat import engine_rendering
from clap.agent.tools import ReportTools
from clap.config import Generate, Model
from clap.evaluate.engines import answer_store, decoding, pinned_adapters


def agent_engine(generate: Generate, base_section: Model, adapters: list[str], prod: list[tuple[str, Path, dict]] = ()):
    """The engine holding `adapters` (each `models/<name>/adapter`, checked against its pin) and `prod`:
    [("prod", folder, pinned manifest)] of the agent adapter in prod, or nothing."""
    from clap.evaluate.generate import Engine

    base = model.resolve(base_section)
    others = [*prod, *pinned_adapters(adapters)]
    rendering = engine_rendering(model.load_tokenizer(base), ReportTools.tool_schemas())
    return Engine(base, others=others, answer_store=answer_store(generate), reuse_prefixes=generate.prefix_cache_tokens,
                  **rendering, **decoding(generate))
