"""The canary: prod and the canary adapter served side by side, every request and outcome logged.

    clap canary serve                     # 127.0.0.1:<canary.port>, OpenAI-compatible chat completions
    clap canary traffic                   # the demo's traffic: held-out replay questions, scored against gold

Two engines behind one router and one log. On CPU (the demo, the tests) the server holds one base
model with both adapters, each attached only through the serving check against the bundle committed
at its release tag (a tampered adapter is refused before the server listens). Where CUDA is present,
`--upstream URL` routes to vLLM's OpenAI-compatible server instead, with prod and the canary as its LoRA
modules: the adapters are restored and checked the same way, and `clap canary serve --upstream` prints
the `vllm serve … --enable-lora --lora-modules …` line that loads exactly those checked folders; each
request then names its arm's module (`model`) and the router logs it as it logs its own. `POST /v1/chat/completions` routes a request to the canary when the hash of its
request id falls below `canary.share` (`"model": "prod"` or `"canary"` pins an arm, as a LoRA module
name does in vLLM); `POST /v1/feedback` records the outcome of a request. Both logs are append-only
JSONL under feedback/canary/ (`dvc add feedback/canary` versions them):

- requests.jsonl: request id, request hash (of the messages), arm, version, adapter sha256, latency, answer;
- feedback.jsonl: request id, outcome (1 success, 0 failure), reason, optional record id for the flywheel
  and the scores behind the outcome.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from clap import paths
from clap.errors import UserError
from clap.evaluate.metrics import parse_answer
from clap.io import read_jsonl

REQUESTS, FEEDBACK = "requests.jsonl", "feedback.jsonl"


@dataclass(frozen=True)
class Arm:
    name: str                 # prod | canary
    use_adapter: bool | str   # the Engine's switch: False (base), "prod" or "candidate"
    version: str | None       # the registered version it serves (None: the base model)
    adapter_sha256: str | None


def request_hash(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def route(request_id: str, share: float) -> str:
    """canary for a stable `share` of request ids, prod for the rest."""
    return "canary" if int(hashlib.sha256(request_id.encode()).hexdigest()[:8], 16) / 2 ** 32 < share else "prod"


class _Log:
    def __init__(self, folder: Path):
        self.folder, self.lock = Path(folder), threading.Lock()
        self.folder.mkdir(parents=True, exist_ok=True)

    def append(self, name: str, row: dict) -> None:
        line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
        with self.lock, open(self.folder / name, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


class CanaryService:
    """Routing, generation (one request at a time on the shared model) and logging; no HTTP in here."""

    def __init__(self, engine, arms: dict[str, Arm], share: float, log_dir: Path, max_new_tokens: int):
        self.engine, self.arms, self.share, self.max_new_tokens = engine, arms, share, max_new_tokens
        self.log, self._gen_lock = _Log(log_dir), threading.Lock()
        served = Path(log_dir) / REQUESTS  # a restarted server still takes feedback on what it served before
        self.known = {r["request_id"] for r in read_jsonl(served)} if served.exists() else set()

    def complete(self, messages: list[dict], arm: str | None = None, schema: dict | None = None,
                 request_id: str | None = None) -> dict:
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
            raise ValueError("`messages` must be a list of {role, content}")
        request_id = request_id or uuid.uuid4().hex
        name = arm or route(request_id, self.share)
        if name not in self.arms:
            raise ValueError(f"unknown model {name!r} (serving: {', '.join(self.arms)})")
        a = self.arms[name]
        t0 = time.perf_counter()
        with self._gen_lock:
            gen = self.engine.generate([messages], use_adapter=a.use_adapter, max_new_tokens=self.max_new_tokens,
                                       batch_size=1, progress=False, schemas=[schema] if schema else None)[0]
        ms = (time.perf_counter() - t0) * 1000
        self.known.add(request_id)
        self.log.append(REQUESTS, {"ts": time.time(), "request_id": request_id, "request_hash": request_hash(messages),
                                   "arm": name, "version": a.version, "adapter_sha256": a.adapter_sha256,
                                   "latency_ms": round(ms, 2), "new_tokens": gen.new_tokens, "output": gen.text,
                                   "answer": parse_answer(gen.text)})
        return {"id": request_id, "object": "chat.completion", "model": name, "created": int(time.time()),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": gen.text},
                             "finish_reason": "stop"}],
                "usage": {"completion_tokens": gen.new_tokens}}

    def feedback(self, request_id: str, outcome, reason: str | None = None, record_id: str | None = None,
                 scores: dict | None = None) -> dict:
        if request_id not in self.known:
            raise ValueError(f"request {request_id!r} was not served here")
        if outcome not in (0, 1, True, False):
            raise ValueError(f"outcome must be 0 or 1 (got {outcome!r})")
        row = {"ts": time.time(), "request_id": request_id, "outcome": int(outcome), "reason": reason,
               "record_id": record_id} | ({"scores": scores} if scores else {})
        self.log.append(FEEDBACK, row)
        return {"ok": True}


def _handler(service: CanaryService):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # the JSONL logs are the record; no stderr line per request
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if "model" in body:
                self.send_header("X-CLAP-Arm", body["model"])
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200, {"arms": {n: a.version for n, a in service.arms.items()}, "share": service.share})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in ["clap", *service.arms]]})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/v1/chat/completions":
                    fmt = body.get("response_format") or {}
                    schema = (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
                    arm = body.get("model") if body.get("model") in service.arms else None
                    self._send(200, service.complete(body.get("messages"), arm, schema, body.get("request_id")))
                elif self.path == "/v1/feedback":
                    self._send(200, service.feedback(body.get("request_id"), body.get("outcome"), body.get("reason"),
                                                     body.get("record_id"), body.get("scores")))
                else:
                    self._send(404, {"error": f"no route {self.path}"})
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                self._send(400, {"error": str(exc)})

    return Handler


def server(service: CanaryService, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """The HTTP server (not started): `server(...).serve_forever()`, or in a thread for the demo and tests."""
    return ThreadingHTTPServer((host, port), _handler(service))


class NoCanary(UserError, RuntimeError):
    pass


@dataclass
class UpstreamGeneration:
    text: str
    new_tokens: int


class OpenAIUpstream:
    """The Engine's `generate`, answered by an OpenAI-compatible server (vLLM's) whose LoRA modules are
    the arms: `modules` maps the Engine's switch (False, "prod", True) to the module name to request."""

    def __init__(self, url: str, modules: dict, command: list[str] | None = None, timeout: float = 600.0):
        self.url, self.modules, self.command, self.timeout = url.rstrip("/"), modules, command, timeout

    def generate(self, conversations: list[list[dict]], use_adapter, max_new_tokens: int, schemas=None, **_) -> list:
        from clap.feedback.traffic import post

        out = []
        for i, messages in enumerate(conversations):
            body = {"model": self.modules[use_adapter], "messages": messages, "max_tokens": max_new_tokens,
                    "temperature": 0.0}
            if schemas and schemas[i] is not None:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schemas[i]}}
            resp = post(f"{self.url}/v1/chat/completions", body, self.timeout)
            out.append(UpstreamGeneration(resp["choices"][0]["message"]["content"],
                                          int((resp.get("usage") or {}).get("completion_tokens") or 0)))
        return out


VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM's --max-lora-rank accepts


def vllm_command(base: Path, adapters: dict[str, Path], port: int = 8000) -> list[str]:
    """vLLM's OpenAI-compatible server over the base model with the checked adapter folders as LoRA
    modules named by version (`base` names the bare model), as vLLM's docs give it; the LoRA rank
    slot is the smallest vLLM accepts that holds every adapter's rank."""
    ranks = [json.loads((Path(p) / "adapter_config.json").read_text()).get("r", 8)
             for p in adapters.values() if (Path(p) / "adapter_config.json").exists()]
    slot = next(r for r in VLLM_LORA_RANKS if r >= max(ranks, default=8))
    modules = [json.dumps({"name": name, "path": str(Path(path).resolve())}) for name, path in adapters.items()]
    return ["vllm", "serve", str(Path(base).resolve()), "--served-model-name", "base", "--port", str(port),
            "--enable-lora", "--max-lora-rank", str(slot), "--lora-modules", *modules]


def from_registry(root: Path, cfg: dict, log_dir: Path, candidate: Path | None = None,
                  upstream: str | None = None) -> CanaryService:
    """The service for the registry's canary beside its prod (the base model when nothing is in prod):
    both adapters restored from the DVC cache into models/serving/<version>/ and checked against the
    bundle committed at their release tags before anything serves them. `candidate` (an adapter folder
    dvc.lock pins, e.g. models/sft/adapter) serves an unreleased candidate as the canary instead: a dark
    launch whose analysis can be read but not concluded, as no version stands behind it. `upstream`: the
    URL of a vLLM server started with `vllm_command` over those folders; else the CPU engine here."""
    from clap import model
    from clap.evaluate.generate import Engine
    from clap.release.prod import restore_version_adapter
    from clap.release.registry import current
    from clap.release.serving import pinned_expectation, verify_adapter

    root = Path(root)
    canary, prod = current(root, "canary"), current(root, "prod")
    if canary is None and candidate is None:
        raise NoCanary("nothing is in canary: a gate decision of canary (or policy release_via_canary) and "
                       "`clap release` put a version there (or serve an unreleased one with --candidate)")
    folders = {}
    if candidate is not None:
        expected = pinned_expectation(root, Path(candidate))
        canary = {"version": f"unreleased:{expected['files']['adapter_model.safetensors'][:12]}"}
        folders[canary["version"]] = (Path(candidate), expected)
    for holder in (canary, prod):
        if holder is not None and holder["version"] not in folders:
            folders[holder["version"]] = restore_version_adapter(
                root, holder["version"], root / paths.MODELS / "serving" / holder["version"] / "adapter")
    base = model.resolve(cfg["model"])
    c_dir, c_expected = folders[canary["version"]]
    p_dir, p_expected = folders[prod["version"]] if prod else (None, None)
    if upstream is None:
        engine = Engine(base, c_dir, c_expected, p_dir, p_expected, dtype=cfg["generate"]["dtype"],
                        jump_forward=cfg["generate"]["jump_forward"], merge_adapters=cfg["generate"]["merge_adapters"])
    else:
        identity = model.identity(base)
        for folder, expected in folders.values():
            verify_adapter(folder, expected, identity)
        engine = OpenAIUpstream(upstream, {True: canary["version"], "prod": prod["version"] if prod else "base",
                                           False: "base"},
                                vllm_command(base, {v: folder for v, (folder, _) in folders.items()}))
    arms = {"prod": Arm("prod", "prod" if prod else False, prod["version"] if prod else None,
                        p_expected["files"]["adapter_model.safetensors"] if prod else None),
            "canary": Arm("canary", True, canary["version"], c_expected["files"]["adapter_model.safetensors"])}
    return CanaryService(engine, arms, cfg["canary"]["share"], log_dir, cfg["canary"]["max_new_tokens"])


def simulated_canary(root: Path, cfg: dict, logs: Path, limit: int, candidate: Path | None = None,
                     fail_when_exhausted: bool = False) -> tuple[dict, dict]:
    """One canary end to end on SIMULATED traffic: serve prod and the canary in this process, replay the held-out
    replay questions as paired requests (scored against gold, outcomes posted back) until the sequential analysis
    is conclusive or `limit` questions are spent, then analyse: metrics/canary.json and the flywheel inbox.
    `fail_when_exhausted`: a canary still inconclusive when the traffic runs out fails (`clap demo` ends every
    canary before its next round, and never promotes on evidence it did not get). Returns (traffic counts,
    analysis)."""
    from clap.data.repair import replace_in_inbox
    from clap.feedback import canary_analysis, traffic
    from clap.io import write_json

    service = from_registry(root, cfg, logs, candidate)
    srv = server(service, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        counts = traffic.send(cfg, root, f"http://127.0.0.1:{srv.server_address[1]}", True, limit,
                              lambda: canary_analysis.decided(logs, cfg))
    finally:
        srv.shutdown()
        srv.server_close()
    requests, feedback = canary_analysis.load_logs(logs)
    analysis = canary_analysis.analyze(requests, feedback, cfg) | {"outcome": "logged", "traffic": "SIMULATED"}
    if fail_when_exhausted and analysis["verdict"] == "inconclusive":
        analysis["reasons"].append({"rule": "traffic_exhausted", "observed": f"inconclusive after {analysis['pairs']} "
                                    f"pairs ({limit} questions)", "threshold": "a conclusive analysis",
                                    "outcome": "failed"})
        analysis["verdict"] = "failed"
    write_json(root / paths.CANARY_METRICS, analysis)
    replace_in_inbox(root / paths.INBOX, canary_analysis.failed_cases(requests, feedback),
                     f"canary:{analysis['versions']['canary']}")
    return counts, analysis
