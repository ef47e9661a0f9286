"""Requests decode together on the engine's own loop, not one at a time: two batchers with one interface.

`ContinuousBatcher` (the default of `clap serve`): one engine thread decodes a running batch step by step
(`clap.evaluate.continuous.RunningBatch`); a request joins it at the next step and leaves when it is done.

`Batcher` (static batching, `--batching static`, and the canary's server): the event loop queues each request as a
`Job`; one worker thread owns the engine (its model and tokenizer are used from that thread only) and takes what is
waiting — up to `max_batch` jobs, after waiting at most `wait_ms` for more to join the first — groups them by what a
batch must share (model, temperature, token limit, whether a grammar constrains them), and runs each group through
`Engine.generate` as one batch. While a batch decodes, new requests queue and form the next one.

Either way a streamed job gets its text so far after every step it took, and a job whose client went away
(`Job.cancelled`, set by the application) is not decoded, or leaves its batch at the next step.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from clap.evaluate.continuous import Row, RunningBatch
from clap.evaluate.generate import Sampling, request_generator, truncate_at_json_end


@dataclass
class Job:
    prompt: list[dict] | str  # a conversation (chat) or plain text (a text completion)
    use_adapter: bool | str  # the engine's name for the model that answers
    max_tokens: int
    temperature: float = 0.0
    schema: dict | None = None
    seed: int | None = None
    stream: asyncio.Queue | None = None  # the answer's text so far, after each step (a streamed request)
    done: asyncio.Future | None = None
    tokens: list[int] = field(default_factory=list)
    cancelled: bool = False  # its client went away: not decoded, or it leaves the batch at the next step

    top_p: float = 1.0  # the nucleus a sampled token is drawn from (with temperature > 0)

    def batch_key(self) -> tuple:
        """What one batch of `Engine.generate` must share."""
        return (str(self.use_adapter), self.temperature, self.top_p if self.temperature > 0 else 1.0,
                self.max_tokens, self.schema is None, self.seed)


class Cancelled(Exception):
    """A request whose client went away: nobody waits for its answer."""


@dataclass
class Answer:
    text: str
    new_tokens: int
    prompt_tokens: int
    batch_size: int  # how many requests decoded in the batch this one was in
    decode_s: float  # the batch's decoding time


class Batcher:
    def __init__(self, engine, max_batch: int = 16, wait_ms: float = 5.0):
        self.engine, self.max_batch, self.wait_s = engine, max_batch, wait_ms / 1000
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clap-engine")
        self.batches: list[int] = []  # the size of every batch decoded (GET /v1/stats, the load test)
        self.busy_since: float | None = None  # time.monotonic() when the batch now decoding began (GET /health)
        self.cancelled = 0  # requests whose client went away before their answer was complete (GET /v1/stats)
        self.requests = 0  # requests decoded

    async def submit(self, job: Job) -> Answer:
        loop = asyncio.get_running_loop()
        job.done = loop.create_future()
        await self.queue.put(job)
        return await job.done

    async def run(self) -> None:
        """The scheduler: forever take what waits, decode it in groups on the engine's thread."""
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(jobs) < self.max_batch:
                try:
                    jobs.append(self.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    jobs.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
            groups: dict[tuple, list[Job]] = defaultdict(list)
            for job in jobs:
                groups[job.batch_key()].append(job)
            for group in groups.values():
                await loop.run_in_executor(self.executor, self._decode, group, loop)

    def busy_for(self) -> float:
        """Seconds the batch now decoding has run (0 when idle)."""
        since = self.busy_since
        return 0.0 if since is None else time.monotonic() - since

    def _decode(self, group: list[Job], loop: asyncio.AbstractEventLoop) -> None:
        """On the engine's thread: one batch; each job's future gets its answer or its own error."""
        self.busy_since = time.monotonic()
        try:
            self._decode_group(group, loop)
        finally:
            self.busy_since = None

    def _decode_group(self, group: list[Job], loop: asyncio.AbstractEventLoop) -> None:
        engine = self.engine
        ready = []
        compiles = hasattr(engine, "grammars")  # an upstream server (vLLM) compiles its own
        for job in group:  # a schema xgrammar cannot compile fails its own request, not the batch
            if job.cancelled:
                _resolve(loop, job, error=Cancelled("the client went away before its request decoded"))
                self.cancelled += 1
                continue
            if job.schema is not None and compiles:
                try:
                    engine.grammars.compiled(job.schema)
                except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError variants
                    _resolve(loop, job, error=ValueError(f"response_format schema: {str(exc).splitlines()[0]}"))
                    continue
            ready.append(job)
        if not ready:
            return
        first = ready[0]

        def on_tokens(i: int, tokens: list[int]) -> None:
            _stream(engine, loop, ready[i], tokens)

        streamed = any(j.stream is not None for j in ready)
        started = time.perf_counter()
        try:
            gens = engine.generate([j.prompt for j in ready], first.use_adapter, max_new_tokens=first.max_tokens,
                                   batch_size=len(ready), progress=False,
                                   schemas=None if first.schema is None else [j.schema for j in ready],
                                   temperature=first.temperature,
                                   top_p=first.top_p if first.temperature > 0 and first.top_p < 1 else None,
                                   seed=first.seed if first.temperature > 0 and first.schema is not None else None,
                                   use_store=False, on_tokens=on_tokens if streamed else None,
                                   stop_rows=lambda i: ready[i].cancelled)
            self.batches.append(len(ready))
            self.requests += len(ready)
            self.cancelled += sum(j.cancelled for j in ready)
            encode = getattr(engine, "encode", None)
            for job, gen in zip(ready, gens):
                _resolve(loop, job, Answer(gen.text, gen.new_tokens, len(encode(job.prompt)) if encode else 0,
                                           len(ready), time.perf_counter() - started))
        except Exception as exc:  # noqa: BLE001 - every waiting request learns why, none hangs
            for job in ready:
                _resolve(loop, job, error=exc)


class ContinuousBatcher:
    """Continuous batching (`create_app(batching="continuous")`, the default): one engine thread runs a
    `RunningBatch` step after step, and a request joins it at the next step instead of waiting for the batch to
    finish. The running batch serves one model at a time (the adapter is switched for the whole batch): a request for
    another model waits until the batch drains. The same interface as `Batcher`."""

    def __init__(self, engine, max_batch: int = 16, wait_ms: float = 5.0):
        self.engine, self.max_batch, self.wait_s = engine, max_batch, wait_ms / 1000
        self.inbox: queue.Queue[tuple[Job, asyncio.AbstractEventLoop]] = queue.Queue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clap-engine")
        self.batches: list[int] = []  # the running batch's size after each join (GET /v1/stats)
        self.requests = 0
        self.busy_since: float | None = None  # when the step now running began (GET /health: a step that hangs)
        self.cancelled = 0
        self._stopped = threading.Event()

    async def submit(self, job: Job) -> Answer:
        job.done = asyncio.get_running_loop().create_future()
        self.inbox.put((job, asyncio.get_running_loop()))
        return await job.done

    async def run(self) -> None:
        """The engine thread's loop, for the application's lifetime."""
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self._loop)
        finally:
            self._stopped.set()

    busy_for = Batcher.busy_for  # seconds the step now running has run (0 when idle)

    def _loop(self) -> None:
        engine = self.engine
        eos = engine.model.generation_config.eos_token_id
        stops = set(eos if isinstance(eos, list) else [eos])
        grammars = getattr(engine, "grammars", None)
        batch = RunningBatch(engine.model, engine.tok.pad_token_id, stops, getattr(engine, "jump_forward", False),
                             grammars.tokenizer_info.vocab_size if grammars is not None else 0)
        waiting: list[tuple[Job, asyncio.AbstractEventLoop]] = []
        model = None
        while not self._stopped.is_set():
            if not batch.rows and not waiting:
                try:
                    waiting.append(self.inbox.get(timeout=0.2))
                except queue.Empty:
                    continue
                time.sleep(self.wait_s)  # let requests that arrive together join the first
            while True:
                try:
                    waiting.append(self.inbox.get_nowait())
                except queue.Empty:
                    break
            if not batch.rows:
                model = waiting[0][0].use_adapter if waiting else None
            room = self.max_batch - len(batch.rows)
            joining = [w for w in waiting if str(w[0].use_adapter) == str(model)][:room]
            if not self._joins_now(len(batch.rows), len(joining)):
                joining = []
            waiting = [w for w in waiting if all(w is not j for j in joining)]
            self._advance(batch, model, joining)

    def _joins_now(self, running: int, joining: int) -> bool:
        """Whether `joining` requests join a batch of `running` rows at this step (pure): always into a small batch,
        into a large one by groups of a quarter of `max_batch` — each join prefills its rows and copies the
        batch's KV cache into the merged one, so joining one row at a time into a full batch cost more than it
        saved (`benchmarks/bench_serve.py`)."""
        group = max(1, self.max_batch // 4)
        return joining > 0 and (running + joining <= group or joining >= group or running == 0)

    def _advance(self, batch, model, joining: list) -> None:
        """Admit `joining`, then one step; a failure answers every request it touched, never hangs one."""
        self.busy_since = time.monotonic()
        rows = []
        try:
            with self.engine.adapter_context(model):
                rows = [row for job, loop in joining if (row := self._row(job, loop, batch)) is not None]
                if rows:
                    self.requests += len(rows)
                    batch.admit(rows)
                    self.batches.append(len(batch.rows))
                if batch.rows:
                    batch.step()
        except Exception as exc:  # noqa: BLE001 - every request in the batch learns why
            for row in rows:
                if row not in batch.rows and row.on_fail is not None:
                    row.on_fail(exc)
            batch.fail(exc)
        finally:
            self.busy_since = None

    def _row(self, job: Job, loop: asyncio.AbstractEventLoop, batch):
        """The running batch's row for `job`; None when it cannot decode (its error answers it)."""
        import xgrammar as xgr

        engine = self.engine
        if job.cancelled:
            _resolve(loop, job, error=Cancelled("the client went away before its request decoded"))
            self.cancelled += 1
            return None
        prompt = engine.encode(job.prompt)
        try:
            matcher = None if job.schema is None else xgr.GrammarMatcher(engine.grammars.compiled(job.schema))
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError variants
            _resolve(loop, job, error=ValueError(f"response_format schema: {str(exc).splitlines()[0]}"))
            return None
        sampling = (Sampling.of(engine.model, job.temperature, job.seed if job.schema is not None else None,
                                job.top_p if job.top_p < 1 else None) if job.temperature > 0 else None)
        started = time.perf_counter()

        def text(tokens: list[int]) -> str:
            return engine.tok.decode(tokens, skip_special_tokens=True)

        def streamed(chunk: list[int]) -> None:
            _stream(engine, loop, job, chunk)

        def done(row) -> None:
            if job.cancelled:
                self.cancelled += 1
                _resolve(loop, job, error=Cancelled("the client went away"))
                return
            _resolve(loop, job, Answer(truncate_at_json_end(text(row.tokens)), len(row.tokens), len(prompt),
                                       len(batch.rows), time.perf_counter() - started))

        return Row(prompt, job.max_tokens, matcher, sampling,
                   request_generator(sampling.seed, prompt) if sampling is not None and sampling.seed is not None
                   else None, streamed if job.stream is not None else None, lambda: job.cancelled, done,
                   lambda exc: _resolve(loop, job, error=exc), text_of=text if matcher is None else None,
                   narrowing=None if matcher is None else engine.narrowing(job.schema))


def _stream(engine, loop: asyncio.AbstractEventLoop, job: Job, tokens: list[int]) -> None:
    """On the engine's thread: a job's new tokens, and for a streamed job its text so far handed to the event loop."""
    job.tokens.extend(tokens)
    if job.stream is not None:
        text = engine.tok.decode(job.tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # half a multi-byte character: wait for the rest
            loop.call_soon_threadsafe(job.stream.put_nowait, text)


def _resolve(loop: asyncio.AbstractEventLoop, job: Job, answer: Answer | None = None,
             error: Exception | None = None) -> None:
    def settle() -> None:
        if job.done is not None and not job.done.done():
            job.done.set_exception(error) if error is not None else job.done.set_result(answer)
            if job.cancelled:
                job.done.exception()  # nobody awaits a cancelled job's answer: its error is read here, not logged
        if job.stream is not None:
            job.stream.put_nowait(None)  # the end of the stream

    loop.call_soon_threadsafe(settle)
