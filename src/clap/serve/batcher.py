"""Requests that arrive together decode together: one batch of the engine's own loop, not one request at a time.

The event loop queues each request as a `Job`; one worker thread owns the engine (its model and tokenizer are
used from that thread only) and takes what is waiting — up to `max_batch` jobs, after waiting at most `wait_ms`
for more to join the first — groups them by what a batch must share (model, temperature, token limit, whether a
grammar constrains them), and runs each group through `Engine.generate` as one batch. While a batch decodes, new
requests queue and form the next one. A streamed job gets its text so far after every step it took. A job whose
client went away (`Job.cancelled`, set by the application) is not decoded, or leaves its batch at the next step.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field


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
            job = ready[i]
            job.tokens.extend(tokens)
            if job.stream is not None:
                text = engine.tok.decode(job.tokens, skip_special_tokens=True)
                if not text.endswith("\ufffd"):  # half a multi-byte character: wait for the rest
                    loop.call_soon_threadsafe(job.stream.put_nowait, text)

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
            self.cancelled += sum(j.cancelled for j in ready)
            encode = getattr(engine, "encode", None)
            for job, gen in zip(ready, gens):
                _resolve(loop, job, Answer(gen.text, gen.new_tokens, len(encode(job.prompt)) if encode else 0,
                                           len(ready), time.perf_counter() - started))
        except Exception as exc:  # noqa: BLE001 - every waiting request learns why, none hangs
            for job in ready:
                _resolve(loop, job, error=exc)


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
