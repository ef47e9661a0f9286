"""The agent's environment: deterministic, sandboxed tools over the report assets.

Each tool is a typed method whose JSON schema comes from its signature and docstring
(`transformers.utils.get_json_schema`), which is what the chat template shows the model. `call` is
the one way an episode runs a tool: unknown tools, missing, unknown or mistyped arguments and tool
failures (an unknown chunk id, a division by zero, no hit) come back as an `{"error": ...}`
observation, never as an exception, so a bad step costs the agent a turn, not the run.
"""

from __future__ import annotations

import json
import math
from functools import cache, cached_property

import pandas as pd

from clap.domain.prompts import json_number
from clap.domain.quantities import UNITS
from clap.evaluate.decoding import sentences
from clap.retrieval import BM25Index

ABSTAIN = "not found"  # the answer when the reports do not hold what was asked
OPS = ("add", "sub", "mul", "div", "pct_change")
MAX_K = 5
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}


def observation(value) -> str:
    """A tool return as the model reads it: text as it is, anything else as JSON with non-ASCII kept."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ReportTools:
    """`ReportTools(chunks)`; `tools.call("search_reports", {"query": "...", "k": 3})` → observation text.

    `chunks`: the chunk asset (chunk_id, doc_id, page, text). The BM25 index is the project's
    (`clap.retrieval`), built over exactly these chunks, so an episode sees the batches it was given.
    """

    NAMES = ("search_reports", "read_chunk", "convert_unit", "calculate", "finish")

    def __init__(self, chunks: pd.DataFrame):
        self.chunks = {r.chunk_id: r for r in chunks.itertuples(index=False)}

    @cached_property
    def index(self) -> BM25Index:
        return BM25Index(list(self.chunks), [r.text for r in self.chunks.values()])

    @classmethod
    def over_batches(cls, assets, batches: list[str]) -> ReportTools:
        """The environment an episode of these batches sees: the chunk asset of `assets`, those batches only."""
        from pathlib import Path

        chunks = pd.read_parquet(Path(assets) / "chunks.parquet")
        return cls(chunks[chunks["batch"].isin(batches)])

    @classmethod
    @cache
    def tool_schemas(cls) -> list[dict]:
        """The tools' schemas as the model sees them; they depend on no data, so they are built once (every
        rendered turn of training, mining and evaluation lists them)."""
        return cls(pd.DataFrame({"chunk_id": [], "text": []})).schemas

    # ------------------------------------------------------------------ the tools
    def search_reports(self, query: str, k: int = 3) -> list:
        """Search the company reports; each hit is a page with its id and its title line.

        Args:
            query: what to look for, e.g. the company, the metric and the year
            k: how many hits to return, 1 to 5
        """
        if not query.strip():
            raise ValueError("empty query")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be 1 to {MAX_K}")
        hits = self.index.search([query], k)[0]
        return [{"chunk_id": c, "title": sentences(self.chunks[c].text)[0]} for c in hits]

    def read_chunk(self, chunk_id: str) -> str:
        """Read one report page in full.

        Args:
            chunk_id: the id of a page, as a search hit gives it
        """
        if chunk_id not in self.chunks:
            raise KeyError(f"unknown chunk_id {chunk_id!r}")
        return self.chunks[chunk_id].text

    def convert_unit(self, value: float, from_unit: str, to_unit: str) -> float:
        """Convert a value between units of one kind (元, 千元, 万元, 百万元, 亿元; 吨, 千克; 件, 万件).

        Args:
            value: the number to convert
            from_unit: the unit it is written in
            to_unit: the unit asked for
        """
        if from_unit not in UNITS or to_unit not in UNITS:
            raise ValueError(f"unknown unit {from_unit if from_unit not in UNITS else to_unit!r}")
        (dim_a, fa), (dim_b, fb) = UNITS[from_unit], UNITS[to_unit]
        if dim_a != dim_b:
            raise ValueError(f"cannot convert {from_unit} to {to_unit}")
        return round(value * fa / fb, 6)

    def calculate(self, op: str, a: float, b: float) -> float:
        """Arithmetic on two numbers, rounded to 2 decimals; pct_change is (b - a) / a * 100.

        Args:
            op: the operation (choices: ["add", "sub", "mul", "div", "pct_change"])
            a: the first number
            b: the second number
        """
        if op == "add":
            out = a + b
        elif op == "sub":
            out = a - b
        elif op == "mul":
            out = a * b
        elif op in ("div", "pct_change"):
            if a == 0 if op == "pct_change" else b == 0:
                raise ZeroDivisionError("division by zero")
            out = a / b if op == "div" else (b - a) / a * 100
        else:
            raise ValueError(f"unknown op {op!r}; one of {', '.join(OPS)}")
        return round(out, 2)

    def finish(self, answer: str) -> str:
        """End the task with the answer: a number and its unit, a company name, or "not found".

        Args:
            answer: the answer
        """
        return answer

    # ------------------------------------------------------------------ the interface episodes use
    @cached_property
    def schemas(self) -> list[dict]:
        """The tools' JSON schemas in the chat template's `tools` format."""
        from transformers.utils import get_json_schema

        return [get_json_schema(getattr(self, n)) for n in self.NAMES]

    def call(self, name: str, arguments) -> tuple[str, bool]:
        """Run one tool call; (observation text, ok). Never raises on anything the model wrote."""
        problem = self.argument_problem(name, arguments)
        if problem:
            return observation({"error": problem}), False
        try:
            result = getattr(self, name)(**arguments)
        except (KeyError, ValueError, ZeroDivisionError, OverflowError) as exc:
            return observation({"error": exc.args[0] if exc.args else type(exc).__name__}), False
        if isinstance(result, float) and not math.isfinite(result):
            return observation({"error": "result is not a finite number"}), False
        if name == "search_reports" and not result:
            return observation({"error": "no hits"}), False
        return observation(json_number(result) if isinstance(result, float) else result), True

    def argument_problem(self, name: str, arguments) -> str | None:
        """Why a call cannot run (unknown tool; argument missing, unknown or of the wrong type), else None."""
        if name not in self.NAMES:
            return f"unknown tool {name!r}; tools: {', '.join(self.NAMES)}"
        if not isinstance(arguments, dict):
            return "arguments must be a JSON object"
        params = next(s for s in self.schemas if s["function"]["name"] == name)["function"]["parameters"]
        props = params["properties"]
        unknown = sorted(set(arguments) - set(props))
        missing = [p for p in params.get("required", []) if p not in arguments]
        if unknown or missing:
            return "; ".join([f"unknown argument(s) {', '.join(unknown)}"] * bool(unknown) +
                             [f"missing argument(s) {', '.join(missing)}"] * bool(missing))
        for key, value in arguments.items():
            want = props[key]
            if isinstance(value, bool) or not isinstance(value, _JSON_TYPES[want["type"]]):
                return f"argument {key} must be a {want['type']}"
            if "enum" in want and value not in want["enum"]:
                return f"argument {key} must be one of {', '.join(map(str, want['enum']))}"
        return None
