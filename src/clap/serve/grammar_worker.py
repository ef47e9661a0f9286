"""A request's `response_format` schema compiled into its grammar in a child process that can be stopped.

xgrammar compiles in C++ and cannot be interrupted from Python: an enum of 10,000 strings takes seconds and one of
49,000 minutes, inside the schema-size bound `openai_api.check_schema` applies, and memory grows with it. So
`clap serve` compiles a schema it has not seen in one child process with a time limit (`--grammar-timeout-s`)
and an address-space limit (`--grammar-memory-mb`, `RLIMIT_AS`): past either, the child is stopped and a new one
started, and the request is a 400 naming the limit. The grammar comes back serialised (xgrammar's own JSON, no
pickle), is adopted into the engine's `GrammarCache`, and the decode loop finds it there. Both sides compile through
`decoding.compile_schema_text`, so a grammar is the one the evaluation decodes under.

    worker = GrammarWorker(engine.grammars.tokenizer_info, timeout_s=10, memory_mb=4096)
    engine.grammars.adopt(schema, worker.compile(schema))  # GrammarLimit when a limit is hit
"""

from __future__ import annotations

import multiprocessing
import threading

from clap.evaluate.decoding import compile_schema_text, schema_text


class GrammarLimit(ValueError):
    """A schema whose grammar did not compile within the server's time or memory limit (the request's 400)."""


def _work(conn, tokenizer_info_json: str, memory_mb: int | None) -> None:
    """The child: compile each schema text it is sent, answer ("ok", serialised grammar) or ("error", one line)."""
    import resource

    import xgrammar as xgr

    if memory_mb is not None:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.deserialize_json(tokenizer_info_json), max_threads=1)
    conn.send(("ready", ""))
    while (text := conn.recv()) is not None:
        try:
            conn.send(("ok", compile_schema_text(compiler, text).serialize_json()))
        except MemoryError:
            conn.send(("memory", ""))
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError variants: the request's 400
            line = (str(exc).splitlines() or [type(exc).__name__])[0]
            conn.send(("memory", "") if "bad_alloc" in line else ("error", line))  # C++'s out of memory


class GrammarWorker:
    """One compile child, started on first use and restarted after a limit stopped it; one compile at a time."""

    START_S = 60.0  # a fresh child imports xgrammar and rebuilds the tokenizer's info before it compiles

    def __init__(self, tokenizer_info, timeout_s: float, memory_mb: int | None):
        self.tokenizer_info, self.timeout_s, self.memory_mb = tokenizer_info, timeout_s, memory_mb
        self._info_json = tokenizer_info.serialize_json()
        self._lock = threading.Lock()
        self._process = self._conn = None
        self.stopped = 0  # children stopped at a limit (GET /v1/stats)

    def compile(self, schema: dict):
        """The compiled grammar of `schema`; GrammarLimit past the time or memory limit, ValueError when xgrammar
        refuses the schema. Blocks: call it from a thread, not the event loop."""
        import xgrammar as xgr

        with self._lock:
            self._start()
            self._conn.send(schema_text(schema))
            if not self._conn.poll(self.timeout_s):
                self._stop()
                raise GrammarLimit(f"response_format schema: its grammar did not compile within {self.timeout_s:g} s "
                                   f"(--grammar-timeout-s); a smaller schema (fewer enum members) compiles faster")
            try:
                status, payload = self._conn.recv()
            except (EOFError, OSError):  # the child died: an allocation past RLIMIT_AS can abort it outright
                status, payload = "memory", ""
            if status == "memory":  # a child that ran out of memory is not trusted with the next schema
                self._stop()
                raise GrammarLimit(f"response_format schema: its grammar needs more than the {self.memory_mb} MB "
                                   f"compile limit (--grammar-memory-mb)")
        if status != "ok":
            raise ValueError(f"response_format schema: {payload}")
        return xgr.CompiledGrammar.deserialize_json(payload, self.tokenizer_info)

    def _start(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        context = multiprocessing.get_context("spawn")  # never fork the server's threads and model
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_work, args=(child, self._info_json, self.memory_mb), daemon=True,
                                        name="clap-grammar")
        self._process.start()
        child.close()
        try:
            ready = self._conn.poll(self.START_S) and self._conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self._stop()
            raise RuntimeError(f"the grammar compile process did not start within {self.START_S:g} s "
                               f"(under --grammar-memory-mb {self.memory_mb})")

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=10)
            self.stopped += 1
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def close(self) -> None:
        """End the child (the server's shutdown)."""
        with self._lock:
            if self._process is not None and self._process.is_alive():
                self._conn.send(None)
                self._process.join(timeout=5)
            if self._process is not None and self._process.is_alive():
                self._process.kill()
            self._process = self._conn = None
