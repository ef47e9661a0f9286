"""The OpenAI-compatible application `clap serve` runs (FastAPI + uvicorn).

    clap serve                         # the version in prod, on 127.0.0.1:8000
    clap serve --version v0.0.2        # any registered version, restored and verified first
    curl localhost:8000/v1/chat/completions -d '{"model": "clap-adapter@v0.0.2", "messages": [...]}'

Models served: the adapter (named `clap-adapter@<version>`, or `candidate` for an unreleased adapter dvc.lock
pins) and `base`, the base model with the adapter switched off. `response_format` with a JSON schema decodes the
answer under that schema's grammar (xgrammar), as the evaluation does. A malformed request is a 400 whose message
names the field; an unknown model a 404; nothing a client sends produces a traceback.

An application built with `agent` serves the tool-calling agent instead (`clap canary serve --agent`): every chat
request lists the agent's tools (OpenAI's `tools`), each turn decodes under the action grammar, and the answer is the
agent's action as OpenAI's `tool_calls` (`finish_reason: "tool_calls"`; `finish` is a tool too, its `answer` the
episode's). A request may carry `episode_id`: a routing server sends every turn of an episode to one arm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from clap import lazy
from clap.agent.chat import parse_action
from clap.agent.engine import AgentServing
from clap.serve import openai_api as api
from clap.serve.batcher import Answer, Batcher, ContinuousBatcher, Job
from clap.serve.grammar_worker import GrammarWorker

fastapi = lazy.module("fastapi")
responses = lazy.module("fastapi.responses")

ROUTED = "clap"  # the model name a routing server (the canary) answers by request id
DISCONNECT_POLL_S = 0.25  # how often a request waiting for its answer checks that its client is still there


def refuse(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> responses.JSONResponse:
    """An OpenAI-shaped error response with one message naming the field."""
    return responses.JSONResponse(api.error(message, kind, param), status_code=status)


@dataclass
class Completions:
    """What answers `/v1/chat/completions` and `/v1/completions`: a request parsed and checked, queued on the
    batcher, answered whole or streamed; the canary's hooks (`route`, `on_answer`) as `create_app` documents."""

    batcher: Batcher
    models: dict[str, bool | str]
    default_max_tokens: int
    max_tokens_cap: int
    route: Callable[[str], str] | None = None
    on_answer: Callable[[dict], None] | None = None
    agent: AgentServing | None = None
    grammar_worker: GrammarWorker | None = None  # compiles a schema the engine has not seen, under its limits
    max_request_mb: float | None = None  # the per-request memory bound (`openai_api.request_memory_mb`)
    memory_shape: tuple[int, int] | None = None  # the engine's model's bytes a token (`_memory_shape`), read once

    async def parse(self, request: fastapi.Request, shape) -> tuple[tuple | None, responses.JSONResponse | None]:
        """(request, request id, job) or the 4xx refusing it."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, refuse(400, "the request body is not JSON")
        if not isinstance(body, dict):
            return None, refuse(400, "the request body must be a JSON object")
        if (ignored := api.unsupported(body, chat=shape is api.ChatRequest)) is not None:
            return None, refuse(400, *ignored)
        try:
            req = shape.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return None, refuse(400, f"{where}: {first['msg']}", where)
        chat = isinstance(req, api.ChatRequest)
        request_id = req.request_id or api.completion_id("chatcmpl" if chat else "cmpl")
        if (problem := self.tool_problem(req)) is not None:
            return None, refuse(400, *problem)
        if self.route is not None and req.model in (None, ROUTED):
            req.model = self.route((req.episode_id if chat else None) or request_id)
        if req.model is None:
            return None, refuse(400, "model: Field required", "model")
        if req.model not in self.models:
            return None, refuse(404, f"model {req.model!r} is not served here; GET /v1/models lists "
                                     f"{', '.join(self.models)}", "model")
        try:
            limit = req.token_limit(self.default_max_tokens, self.max_tokens_cap)
            schema = req.schema() if chat else None
        except ValueError as exc:
            return None, refuse(400, str(exc), "max_tokens" if "max_tokens" in str(exc) else "response_format")
        if self.agent is not None:
            try:
                prompt = api.internal_messages(req.messages)
            except ValueError as exc:
                return None, refuse(400, str(exc), str(exc).split(":")[0])
            schema = self.agent.action_schema
        else:
            prompt = [m.model_dump(exclude_none=True) for m in req.messages] if chat else req.prompt
        field = "messages" if chat else "prompt"
        problem, prompt_tokens = self.length_problem(prompt, limit)
        if problem is not None:
            return None, refuse(400, problem, field)
        job = Job(prompt, self.models[req.model], limit, req.temperature, schema, req.seed,
                  asyncio.Queue() if req.stream else None, top_p=req.top_p)
        if (refusal := await self.bound(job, prompt_tokens, field)) is not None:
            return None, refusal
        return (req, request_id, job), None

    def length_problem(self, prompt, limit: int) -> tuple[str | None, int]:
        """(why the prompt cannot be served — its tokens and max_tokens past the model's context —, its tokens),
        before it is queued: one long prompt batched with others took the server from 0.8 to 7.2 GB."""
        engine = self.batcher.engine
        encode = getattr(engine, "encode", None)
        if encode is None:
            return None, 0
        config = getattr(getattr(engine, "model", None), "config", None)
        context = getattr(config, "max_position_embeddings", None)
        chars = len(prompt) if isinstance(prompt, str) else sum(len(str(m.get("content") or "")) for m in prompt)
        if isinstance(context, int) and chars > 8 * context:  # past any tokenisation that could fit: not tokenised
            return f"the prompt is {chars} characters, far more than the model's context of {context} tokens", 0
        tokens = len(encode(prompt))
        try:
            api.check_prompt_length(tokens, limit, context if isinstance(context, int) else None)
        except ValueError as exc:
            return str(exc), tokens
        return None, tokens

    async def bound(self, job: Job, prompt_tokens: int, field: str) -> responses.JSONResponse | None:
        """The 400 for a request past the server's limits on its grammar (compiled here, in the worker, with a time
        and memory limit, so the engine's thread never compiles an unseen schema) or on the memory it would hold."""
        engine = self.batcher.engine
        grammars = getattr(engine, "grammars", None) if self.grammar_worker is not None else None
        grammar_bytes = 0
        if job.schema is not None and grammars is not None:
            if not grammars.has(job.schema):
                try:
                    compiled = await asyncio.to_thread(self.grammar_worker.compile, job.schema)
                except ValueError as exc:
                    return refuse(400, str(exc), "response_format")
                grammars.adopt(job.schema, compiled)
            grammar_bytes = grammars.compiled(job.schema).memory_size_bytes
        if self.memory_shape is not None and self.max_request_mb is not None:
            needs = api.request_memory_mb(prompt_tokens, job.max_tokens, *self.memory_shape,
                                          grammar_bytes=grammar_bytes)
            try:
                api.check_request_memory(needs, self.max_request_mb)
            except ValueError as exc:
                return refuse(400, str(exc), field)
        return None

    async def until_answered(self, request: fastapi.Request, job: Job) -> Answer | None:
        """The job's answer, or None once its client has gone away: the job is then cancelled, so it is not decoded
        or leaves its batch at the next step (a client that hangs up does not keep the engine busy)."""
        waiting = asyncio.ensure_future(self.batcher.submit(job))
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
            if done:
                return waiting.result()
            if await request.is_disconnected():
                job.cancelled = True
                waiting.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, never logged
                return None

    def tool_problem(self, req) -> tuple[str, str] | None:
        """(message, field) when a request does not fit what this server serves: tools sent to a server that
        serves no agent, an agent turn without the agent's tools, streamed, or under another response format."""
        tools = getattr(req, "tools", None)
        if self.agent is None:
            if tools is not None:
                return "tools: this server serves no tool-calling agent (`clap canary serve --agent` does)", "tools"
            for i, m in enumerate(getattr(req, "messages", ())):
                if m.tool_calls or m.content is None:
                    field = "tool_calls" if m.tool_calls else "content"
                    return (f"messages.{i}.{field}: " + ("this server serves no tool-calling agent" if m.tool_calls
                                                         else "Field required"), f"messages.{i}.{field}")
            return None
        if tools is None:
            return (f"tools: this server serves the tool-calling agent; every chat request lists its tools "
                    f"({', '.join(self.agent.names)}) on POST /v1/chat/completions", "tools")
        sent = [t.function.name for t in tools]
        if sorted(sent) != sorted(self.agent.names):
            return (f"tools: the agent served here was trained with {', '.join(self.agent.names)}; the request lists "
                    f"{', '.join(sent)}", "tools")
        if req.stream:
            return "stream: an agent turn is answered whole (its tool call is parsed from the complete action)", "stream"
        if req.response_format is not None and req.response_format.type != "text":
            return "response_format: an agent turn decodes under the action grammar, not another format", \
                "response_format"
        return None

    def answered(self, req, rid: str, job: Job, text: str, new_tokens: int, started: float) -> None:
        if self.on_answer is not None:
            self.on_answer({"request_id": rid, "model": req.model, "prompt": job.prompt, "text": text,
                            "new_tokens": new_tokens, "latency_ms": round((time.perf_counter() - started) * 1000, 2),
                            "episode_id": getattr(req, "episode_id", None)})

    @staticmethod
    def agent_message(text: str) -> dict | None:
        """The assistant message of an agent turn: its action as OpenAI's `tool_calls`; None for a turn that is not an
        action (free decoding), answered as plain content, which the client's loop reads as a malformed action."""
        action = parse_action(text)
        return None if action is None else api.tool_call_message(action.thought, action.tool, action.arguments)

    async def answer(self, request: fastapi.Request, shape, chat: bool):
        started = time.perf_counter()
        parsed, refusal = await self.parse(request, shape)
        if refusal is not None:
            return refusal
        req, rid, job = parsed
        if req.stream:
            return responses.StreamingResponse(self.stream(req, job, rid, chat, started), media_type="text/event-stream")
        try:
            got = await self.until_answered(request, job)
        except ValueError as exc:
            return refuse(400, str(exc), "response_format")
        if got is None:  # nobody is there to read a response
            return refuse(499, "the client closed the request before its answer", kind="client_closed_request")
        self.answered(req, rid, job, got.text, got.new_tokens, started)
        text, stopped = api.cut_at_stop(got.text, req.stop)
        reason = api.finish_reason(got.new_tokens, job.max_tokens, stopped)
        if self.agent is not None:
            message = self.agent_message(got.text)
            return api.chat_response(rid, req.model, got.text, "tool_calls" if message else reason, got.prompt_tokens,
                                     got.new_tokens, message)
        build = api.chat_response if chat else api.text_response
        return build(rid, req.model, text, reason, got.prompt_tokens, got.new_tokens)

    async def stream(self, req, job: Job, rid: str, chat: bool, started: float) -> AsyncIterator[str]:
        """Server-sent events: the text as the engine's loop decodes it, held back where a stop sequence may begin."""
        def piece(text: str, reason: str | None = None) -> str:
            body = api.chat_chunk(rid, req.model, {"content": text} if text else {}, reason) if chat \
                else api.text_chunk(rid, req.model, text, reason)
            return _event(body)

        done = asyncio.ensure_future(self.batcher.submit(job))
        try:
            if chat:
                yield _event(api.chat_chunk(rid, req.model, {"role": "assistant", "content": ""}))
            sent, stopped = "", False
            while (so_far := await job.stream.get()) is not None:
                if stopped:
                    continue
                text, stopped = api.cut_at_stop(so_far, req.stop)
                ready = text if stopped else text[:len(text) - api.held_back(text, req.stop)]
                if len(ready) > len(sent) and ready.startswith(sent):
                    yield piece(ready[len(sent):])
                    sent = ready
        finally:
            if not done.done():  # the client went away mid-stream (the response task was cancelled): stop decoding
                job.cancelled = True
                done.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            got = await done
        except Exception as exc:  # noqa: BLE001 - the stream ends with the error, as OpenAI's does
            yield _event(api.error(f"{type(exc).__name__}: {exc}", "server_error"))
            yield "data: [DONE]\n\n"
            return
        self.answered(req, rid, job, got.text, got.new_tokens, started)
        final, stopped = api.cut_at_stop(got.text, req.stop)
        if len(final) > len(sent) and final.startswith(sent):
            yield piece(final[len(sent):])
        yield piece("", api.finish_reason(got.new_tokens, job.max_tokens, stopped))
        if req.stream_options is not None and req.stream_options.include_usage:
            yield _event(api.usage_chunk(rid, req.model, chat, got.prompt_tokens, got.new_tokens))
        yield "data: [DONE]\n\n"


def _memory_shape(engine) -> tuple[int, int] | None:
    """(KV cache bytes a token, one decoder layer's prefill activations a token) of the engine's model, for
    `openai_api.request_memory_mb`: keys and values of every layer; the layer's input and output, queries, keys,
    values and the MLP's three intermediate tensors, each alive twice (a tensor and the one made from it). None for
    an engine that is not a local model (an upstream server bounds its own)."""
    model = getattr(engine, "model", None)
    config = getattr(model, "config", None)
    try:
        heads, layers, hidden = int(config.num_attention_heads), int(config.num_hidden_layers), int(config.hidden_size)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        intermediate = int(config.intermediate_size)
        width = next(model.parameters()).element_size()
    except (AttributeError, TypeError, StopIteration):
        return None
    kv = kv_heads * head_dim
    return 2 * layers * kv * width, 2 * (2 * hidden + heads * head_dim + 2 * kv + 3 * intermediate) * width


def _event(body: dict) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def create_app(engine, models: dict[str, bool | str], default_max_tokens: int = 256, max_tokens_cap: int = 2048,
               max_batch: int = 16, wait_ms: float = 5.0, route: Callable[[str], str] | None = None,
               on_answer: Callable[[dict], None] | None = None, feedback: Callable[..., dict] | None = None,
               health: dict | None = None, agent: AgentServing | None = None, wedged_after_s: float = 300.0,
               grammar_timeout_s: float | None = 10.0, grammar_memory_mb: int | None = 4096,
               max_request_mb: float | None = 2048, batching: str = "continuous"):
    """The application over `engine` (`clap.evaluate.generate.Engine`), serving `models` ({served name: the engine's
    adapter name, or False for the base}). `max_batch` 1 decodes one request at a time (the load test's peer).

    The canary's hooks (`clap.serve.canary`): `route(request_id)` names the model of a request that names none (or
    `clap`); `on_answer(record)` sees every answer ({request_id, model, prompt, text, new_tokens, latency_ms}); with
    `feedback`, `POST /v1/feedback` passes its body's fields to it (a ValueError is a 400); `health`: what
    `GET /health` adds (the canary's arms and the versions they serve). `agent`: serve the tool-calling agent (the
    engine renders the agent's conversations with these tools, `clap.agent.chat.engine_rendering`). `GET /health` is a
    503 `wedged` while one batch has decoded longer than `wedged_after_s` (a load balancer then stops sending).

    The bounds on one request, checked before it is queued: a schema the engine has not compiled compiles in a child
    process within `grammar_timeout_s` and `grammar_memory_mb` (`clap.serve.grammar_worker`; None: on the engine's
    thread, unbounded), and the memory the request would hold (`openai_api.request_memory_mb`) is at most
    `max_request_mb` (None: unbounded). A request whose client hangs up is cancelled (`Completions.until_answered`).

    `batching`: "continuous" (a request joins the batch already decoding at its next step: `ContinuousBatcher`, on an
    engine with its own model) or "static" (requests that arrive together form a batch that decodes to its end:
    `Batcher`, also the only way for an engine that is an upstream server)."""
    if batching not in ("continuous", "static"):
        raise ValueError(f"batching {batching!r}: continuous or static")
    continuous = batching == "continuous" and hasattr(engine, "adapter_context")
    batcher = (ContinuousBatcher if continuous else Batcher)(engine, max_batch=max_batch, wait_ms=wait_ms)
    grammars = getattr(engine, "grammars", None) if grammar_timeout_s is not None else None  # vLLM compiles its own
    worker = None if grammars is None else GrammarWorker(grammars.tokenizer_info, grammar_timeout_s, grammar_memory_mb)
    completions = Completions(batcher, models, default_max_tokens, max_tokens_cap, route, on_answer, agent, worker,
                              max_request_mb, _memory_shape(engine))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        task = asyncio.create_task(batcher.run())
        yield
        task.cancel()
        batcher.executor.shutdown(wait=False, cancel_futures=True)
        if worker is not None:
            worker.close()

    app = fastapi.FastAPI(title="clap serve", lifespan=lifespan)
    app.state.batcher = batcher

    _refuse_errors(app)
    @app.get("/health")
    async def get_health():
        busy = batcher.busy_for()
        if busy > wedged_after_s:
            return responses.JSONResponse({"status": "wedged", "busy_s": round(busy, 1), "wedged_after_s": wedged_after_s},
                                status_code=503)
        return {"status": "ok", "models": list(models), **(health or {}),
                **({"tools": agent.tool_schemas, "system": agent.system} if agent is not None else {})}

    @app.get("/v1/models")
    async def list_models():
        names = [*([ROUTED] if route is not None else []), *models]
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "clap"}
                                           for name in names]}

    @app.get("/v1/stats")
    async def stats():
        sizes = batcher.batches
        return {"batching": "continuous" if continuous else "static", "batches": len(sizes),
                "requests": batcher.requests, "max_batch_seen": max(sizes, default=0),
                "cancelled": batcher.cancelled, "grammar_compiles_stopped": 0 if worker is None else worker.stopped}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: fastapi.Request):
        return await completions.answer(request, api.ChatRequest, chat=True)

    @app.post("/v1/completions")
    async def text_completions(request: fastapi.Request):
        return await completions.answer(request, api.CompletionRequest, chat=False)

    if feedback is not None:
        _feedback_route(app, feedback)
    return app


def _refuse_errors(app: fastapi.FastAPI) -> None:
    """A request FastAPI cannot validate is a 400 naming the field; anything unexpected a 500 with one line."""
    @app.exception_handler(fastapi.exceptions.RequestValidationError)
    async def _invalid(_request, exc):
        first = exc.errors()[0]
        return refuse(400, f"{'.'.join(map(str, first['loc']))}: {first['msg']}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request, exc):  # 404 no such route, 405 wrong method: OpenAI's error object, not {"detail": …}
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return refuse(exc.status_code, f"{_request.method} {_request.url.path}: {exc.detail}", kind=kind)

    @app.exception_handler(Exception)
    async def _unexpected(_request, exc):  # one line, never a traceback in the response
        return refuse(500, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", kind="server_error")


def _feedback_route(app: fastapi.FastAPI, feedback: Callable[..., dict]) -> None:
    """`POST /v1/feedback`: the canary's outcome for a request it served (a ValueError from `feedback` is a 400)."""
    @app.post("/v1/feedback")
    async def post_feedback(request: fastapi.Request):
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            return feedback(body.get("request_id"), body.get("outcome"), body.get("reason"),
                            body.get("record_id"), body.get("scores"))
        except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
            return refuse(400, str(exc))
