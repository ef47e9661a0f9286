"""The agent's engine: one base model serving the named agent adapters with the tool-calling template and the
tools' schemas (`clap agent-pairs`, `clap evaluate-agent`), and what an HTTP server needs to serve the agent
(`AgentServing`: `clap canary serve --agent`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clap import model
from clap.agent.chat import SYSTEM, action_schema, engine_rendering
from clap.agent.tools import ReportTools
from clap.config import Generate, Model
from clap.evaluate.engines import answer_store, decoding, pinned_adapters, prod_baseline
from clap.evaluate.generate import Engine


def agent_engine(generate: Generate, base_section: Model, adapters: list[str], prod: list[tuple[str, Path, dict]] = ()):
    """The engine holding `adapters` (each `models/<name>/adapter`, checked against its pin) and `prod`:
    [("prod", folder, pinned manifest)] of the agent adapter in prod, or nothing."""
    base = model.resolve(base_section)
    others = [*prod, *pinned_adapters(adapters)]
    rendering = engine_rendering(model.load_tokenizer(base), ReportTools.tool_schemas())
    return Engine(base, others=others, answer_store=answer_store(generate), reuse_prefixes=generate.prefix_cache_tokens,
                  **rendering, **decoding(generate))


def prod_agent(prod: Path | None) -> tuple[list[tuple[str, Path, dict]], str | None]:
    """The agent adapter in prod as `agent_engine`'s `prod` ([("prod", folder, pinned manifest)]; [] when nothing is
    in prod or its release shipped no agent adapter), and the line saying which release it is."""
    folder, expected, line = prod_baseline(prod, "agent_adapter")
    return ([("prod", folder, expected)] if folder else []), line


@dataclass(frozen=True)
class AgentServing:
    """What makes a server the agent's (`clap.serve.app.create_app(agent=...)`): the tools it was trained with (its
    engine renders them into every prompt) and the grammar each turn decodes under (`chat.action_schema` with
    `generate.constrained`, as the evaluation decodes; None: free text)."""

    tool_schemas: list[dict]
    action_schema: dict | None
    system: str = SYSTEM  # the system prompt the agent was trained with: an episode opens with it

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tool_schemas]


def served_agent(generate: Generate, base_section: Model, adapters: list[tuple[str, Path, dict]]):
    """(the engine a server answers agent turns with — the base model, `adapters` as (name, folder, pinned manifest)
    attached through the serving check, the agent's tools rendered into every prompt — and its `AgentServing`: each
    turn under the action grammar when `generate.constrained` is on, as the evaluation decodes)."""
    base = model.resolve(base_section)
    schemas = ReportTools.tool_schemas()
    engine = Engine(base, others=list(adapters), **engine_rendering(model.load_tokenizer(base), schemas),
                    **decoding(generate))
    return engine, AgentServing(schemas, action_schema(schemas) if generate.constrained else None)
