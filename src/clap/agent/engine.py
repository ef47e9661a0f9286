"""The agent's engine: one base model serving the named agent adapters with the tool-calling template and the
tools' schemas (`clap agent-pairs`, `clap evaluate-agent`), and what an HTTP server needs to serve the agent
(`AgentServing`: `clap canary serve --agent`)."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class AgentServing:
    """What makes a server the agent's (`clap.serve.app.create_app(agent=...)`): the tools it was trained with (its
    engine renders them into every prompt) and the grammar each turn decodes under (`chat.action_schema` with
    `generate.constrained`, as the evaluation decodes; None: free text)."""

    tool_schemas: list[dict]
    action_schema: dict | None

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tool_schemas]
