"""The OpenAI API's request and response shapes `clap serve` speaks, and the pure rules it applies to them.

Requests are checked by pydantic before anything decodes: a bad field is a 400 naming it. Fields an OpenAI client
sends that CLAP does not use (`user`, `logprobs: false`, `presence_penalty: 0`, …) are accepted and ignored; a
field whose value would change the answer in a way CLAP cannot honour (`n` > 1) is refused.

Tool calling (the agent, `clap canary serve --agent`) follows OpenAI's shapes: the request lists its `tools`, an
assistant turn carries `tool_calls` (each function's `arguments` a JSON string), a tool's return is a `tool` message
naming the call it answers by `tool_call_id`. `internal_messages` turns such a conversation into the one the agent was
trained on (`clap.agent.chat`: arguments as an object, a tool turn named by its tool), and `tool_call_message` an
action the agent wrote back into OpenAI's assistant message, so an episode served over HTTP renders exactly as in
training and evaluation.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_SCHEMA_DEPTH = 24  # a response_format schema nested deeper is refused before its grammar is compiled
MAX_SCHEMA_NODES = 50_000  # objects, arrays and values (an enum's strings included): CLAP's own answer schema over
# three retrieved report chunks is about 5,000; an enum of 100,000 strings wedged the engine for minutes


def check_schema(schema, where: str = "response_format.json_schema.schema") -> None:
    """A JSON schema small enough to compile into a grammar in bounded time and memory (pure): ValueError naming the
    bound past which it goes (a schema of 100,000 enum strings wedged the engine for minutes)."""
    nodes, stack = 0, [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"{where}: nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"{where}: more than {MAX_SCHEMA_NODES} nodes (keys, values, enum members)")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((c, depth + 1) for c in children)


def check_prompt_length(prompt_tokens: int, max_tokens: int, context: int | None) -> None:
    """The prompt and the answer it may grow to must fit the model's context (pure): ValueError naming both."""
    if context is not None and prompt_tokens + max_tokens > context:
        raise ValueError(f"the prompt is {prompt_tokens} tokens; with max_tokens {max_tokens} it does not fit the "
                         f"model's context of {context} tokens")


def request_memory_mb(prompt_tokens: int, max_tokens: int, kv_bytes_per_token: int, activation_bytes_per_token: int,
                      grammar_bytes: int = 0) -> float:
    """What one request holds while it decodes (pure), in MB: its KV cache at full length (prompt + max_tokens), one
    decoder layer's activations over the whole prompt at prefill (the layers run one after the other), the prefill's
    fp32 attention mask (prompt²: CPU attention itself is tiled, the mask is not), and its grammar. A batch of
    requests holds the sum, padded to its longest prompt. Measured against the real model by
    `benchmarks/bench_serve_memory.py`."""
    kv = (prompt_tokens + max_tokens) * kv_bytes_per_token
    prefill = prompt_tokens * activation_bytes_per_token + prompt_tokens * prompt_tokens * 4
    return (kv + prefill + grammar_bytes) / 2**20


def check_request_memory(needs_mb: float, limit_mb: float | None) -> None:
    """A request whose estimate (`request_memory_mb`) is past the server's per-request bound (pure): ValueError naming
    the estimate, the bound and its flag."""
    if limit_mb is not None and needs_mb > limit_mb:
        raise ValueError(f"the request would hold about {needs_mb:,.0f} MB while it decodes (prompt, max_tokens and "
                         f"grammar), more than this server's {limit_mb:,.0f} MB a request (--max-request-mb)")


# OpenAI request fields this server does not implement, with the value that asks for nothing (absent or this value
# is accepted; anything else is refused naming the field, never silently ignored).
UNSUPPORTED = {"logprobs": False, "top_logprobs": None, "presence_penalty": 0, "frequency_penalty": 0,
               "logit_bias": None, "best_of": 1, "echo": False, "suffix": None,
               "parallel_tool_calls": None, "functions": None, "function_call": None, "modalities": None,
               "audio": None, "prediction": None, "reasoning_effort": None, "service_tier": None}
COMPLETIONS_ONLY_CHAT = ("response_format", "tools", "tool_choice", "messages")


def unsupported(body: dict, chat: bool) -> tuple[str, str] | None:
    """(message, field) for the first field of an OpenAI request body this server would otherwise ignore (pure):
    a field of `UNSUPPORTED` set to anything but the value that asks for nothing, or a chat-only field on
    `/v1/completions`. None when every field given is one the server honours."""
    for field, neutral in UNSUPPORTED.items():
        if field in body and body[field] not in (None, neutral, {}, []):
            return f"{field}: not supported by this server (clap serve); leave it out", field
    if not chat:
        for field in COMPLETIONS_ONLY_CHAT:
            if field in body:
                return f"{field}: not supported on /v1/completions; use /v1/chat/completions", field
    return None


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: Annotated[str, Field(min_length=1)]
    arguments: str  # a JSON object, as a string (OpenAI's shape)


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: Annotated[str, Field(min_length=1)]
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None   # null only on an assistant turn that calls a tool
    tool_calls: Annotated[list[ToolCall], Field(min_length=1, max_length=1)] | None = None  # the agent calls one
    tool_call_id: str | None = None  # a tool turn: the call it answers ...
    name: str | None = None          # ... or the tool's name (CLAP's error turns answer no call)


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    parameters: dict = Field(default_factory=dict)


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"]
    function: FunctionSpec


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: str = "answer"
    schema_: dict = Field(alias="schema")


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an option this server does not know is named, not ignored
    include_usage: bool = False  # a last chunk with no choices and the request's token usage


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Annotated[str, Field(min_length=1)] | None = None  # required unless the server routes (the canary)
    request_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None  # CLAP's: the id feedback names
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0  # the nucleus a sampled token is drawn from (greedy: moot)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    n: Literal[1] = 1

    @field_validator("stream_options")
    @classmethod
    def _only_when_streaming(cls, v, info):
        if v is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return v

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v):
        stops = [v] if isinstance(v, str) else (v or [])
        if any(s == "" for s in stops):
            raise ValueError("a stop sequence may not be empty")
        return stops or None

    def token_limit(self, default: int, cap: int) -> int:
        """The request's max_tokens (or max_completion_tokens), else `default`; never above `cap`."""
        asked = self.max_completion_tokens or self.max_tokens or default
        if asked > cap:
            raise ValueError(f"max_tokens {asked} is above this server's limit {cap} (clap serve --max-tokens-cap)")
        return asked


class ChatRequest(_Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    response_format: ResponseFormat | None = None
    tools: Annotated[list[Tool], Field(min_length=1)] | None = None
    tool_choice: Literal["auto", "required"] | None = None  # the agent picks its tool (or finish) every turn
    episode_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None  # CLAP's: one agent episode's
    # turns share it, and a routing server sends every turn of an episode to the arm its first turn went to

    def schema(self) -> dict | None:
        """The JSON schema the answer decodes under: `json_schema`'s, `{"type": "object"}` for `json_object`."""
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "object"}
        if fmt.json_schema is None:
            raise ValueError("response_format json_schema needs a json_schema.schema")
        check_schema(fmt.json_schema.schema_)
        return fmt.json_schema.schema_


class CompletionRequest(_Sampling):
    prompt: Annotated[str, Field(min_length=1)]


def internal_messages(messages: list[Message]) -> list[dict]:
    """The conversation as the agent track writes it (pure): an assistant tool call's `arguments` as an object, a
    tool turn named by the tool whose call it answers. ValueError naming `messages.<i>.<field>` for a turn that
    cannot be read: a tool call whose arguments are not a JSON object, a tool turn answering no earlier call, a
    missing content."""
    out, names = [], {}
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            call = m.tool_calls[0]
            try:
                arguments = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                raise ValueError(f"messages.{i}.tool_calls.0.function.arguments: not a JSON object")
            names[call.id] = call.function.name
            out.append({"role": "assistant", "content": m.content or "", "tool_calls": [
                {"type": "function", "function": {"name": call.function.name, "arguments": arguments}}]})
        elif m.role == "tool":
            name = names.get(m.tool_call_id) if m.tool_call_id else m.name
            if name is None or m.content is None:
                raise ValueError(f"messages.{i}.tool_call_id: {m.tool_call_id!r} answers no tool call of an earlier turn"
                                 if m.content is not None else f"messages.{i}.content: Field required")
            out.append({"role": "tool", "name": name, "content": m.content})
        elif m.content is None:
            raise ValueError(f"messages.{i}.content: Field required")
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def tool_call_message(thought: str, tool: str, arguments: dict) -> dict:
    """The assistant message of one agent action: its thought as content, the call as OpenAI's `tool_calls`."""
    return {"role": "assistant", "content": thought,
            "tool_calls": [{"id": completion_id("call"), "type": "function",
                            "function": {"name": tool, "arguments": json.dumps(arguments, ensure_ascii=False)}}]}


def cut_at_stop(text: str, stops: list[str] | None) -> tuple[str, bool]:
    """`text` up to the first stop sequence, and whether one was found (the stop itself is not returned)."""
    cut = min((i for i in (text.find(s) for s in stops or ()) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def held_back(text: str, stops: list[str] | None) -> int:
    """How many characters at the end of streamed `text` could still begin a stop sequence: not sent yet."""
    return max((k for s in stops or () for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def finish_reason(new_tokens: int, max_tokens: int, stopped: bool) -> str:
    return "stop" if stopped or new_tokens < max_tokens else "length"


def completion_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def chat_response(rid: str, model: str, text: str, reason: str, prompt_tokens: int, new_tokens: int,
                  message: dict | None = None) -> dict:
    """`message`: the assistant message when it is not the plain text (an agent's tool call)."""
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message or {"role": "assistant", "content": text},
                         "finish_reason": reason}],
            "usage": usage(prompt_tokens, new_tokens)}


def text_response(rid: str, model: str, text: str, reason: str, prompt_tokens: int, new_tokens: int) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": reason}], "usage": usage(prompt_tokens, new_tokens)}


def chat_chunk(rid: str, model: str, delta: dict, reason: str | None = None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}


def text_chunk(rid: str, model: str, text: str, reason: str | None = None) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": reason}]}


def usage_chunk(rid: str, model: str, chat: bool, prompt_tokens: int, new_tokens: int) -> dict:
    """The stream's last chunk under `stream_options.include_usage`: no choices, the request's usage (OpenAI's)."""
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [], "usage": usage(prompt_tokens, new_tokens)}


def usage(prompt_tokens: int, new_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": new_tokens,
            "total_tokens": prompt_tokens + new_tokens}


def error(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
