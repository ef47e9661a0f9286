"""The canary: prod and the canary adapter served side by side, every request and outcome logged.

    clap canary serve                     # 127.0.0.1:<canary.port>, OpenAI-compatible chat completions
    clap canary traffic                   # the demo's traffic: held-out replay questions, scored against gold

Two engines behind one router and one log; the HTTP server is `clap serve`'s application (`clap.serve.canary`),
so the canary batches, streams and validates requests as prod's server does. On CPU (the demo, the tests) the server holds one base
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

`clap canary serve --agent` serves the tool-calling agent adapters the two versions ship instead (`from_registry`
with `agent=True`): an episode is many requests, one per turn, sharing an `episode_id` (every turn goes to the arm of
its episode), each logged with the episode id, its turn and the hash of the episode's opening (system prompt and
question); the outcome — task success — is posted once, on the episode's last turn, and the analysis reads one
outcome per episode (`canary_analysis.episodes`). Its logs go to feedback/canary/agent/.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from clap import model, paths
from clap.agent.engine import served_agent
from clap.config import Params
from clap.errors import UserError
from clap.evaluate.engines import decoding
from clap.evaluate.generate import Engine
from clap.evaluate.metrics import parse_answer
from clap.feedback.traffic import UpstreamGeneration, post
from clap.integrity import pinned_expectation, verify_adapter
from clap.io import read_json, read_jsonl
from clap.release.bundle import agent_source
from clap.release.prod import ProdUnavailable, restore_version_adapter
from clap.release.registry import current

REQUESTS, FEEDBACK = "requests.jsonl", "feedback.jsonl"


@dataclass(frozen=True)
class Arm:
    name: str                 # prod | canary
    use_adapter: bool | str   # the Engine's switch: False (base), "prod" or "candidate"
    version: str | None       # the registered version it serves (None: the base model)
    adapter_sha256: str | None


def request_hash(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def opening(messages: list[dict]) -> list[dict]:
    """An episode's opening: its turns up to the first user turn (the system prompt and the question), the same in
    every turn of the episode and in both arms — what paired agent traffic pairs on."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages) - 1)
    return messages[:first_user + 1]


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
    """Routing, logging and feedback; no HTTP in here (`clap.serve.canary` puts it behind `clap serve`'s app)."""

    def __init__(self, engine, arms: dict[str, Arm], share: float, log_dir: Path, max_new_tokens: int,
                 agent=None):
        """`agent`: a `clap.agent.engine.AgentServing` when the arms are tool-calling agent adapters (the engine renders
        with the agent's tools), else None."""
        self.engine, self.arms, self.share, self.max_new_tokens = engine, arms, share, max_new_tokens
        self.agent = agent
        self.log, self._gen_lock = _Log(log_dir), threading.Lock()
        served = Path(log_dir) / REQUESTS  # a restarted server still takes feedback on what it served before
        self.known = {r["request_id"] for r in read_jsonl(served)} if served.exists() else set()

    def pick(self, request_id: str) -> str:
        """The arm of a request that names none: canary for a stable `share` of request ids."""
        return route(request_id, self.share)

    def record(self, answer: dict) -> None:
        """Log one answer ({request_id, model: the arm, prompt, text, new_tokens, latency_ms}) to requests.jsonl."""
        a = self.arms[answer["model"]]
        self.known.add(answer["request_id"])
        episode = {}
        if answer.get("episode_id"):  # one turn of an agent episode
            episode = {"episode_id": answer["episode_id"], "opening_hash": request_hash(opening(answer["prompt"])),
                       "turn": sum(m.get("role") == "assistant" for m in answer["prompt"])}
        self.log.append(REQUESTS, {"ts": time.time(), "request_id": answer["request_id"],
                                   "request_hash": request_hash(answer["prompt"]), "arm": answer["model"],
                                   "version": a.version, "adapter_sha256": a.adapter_sha256,
                                   "latency_ms": answer["latency_ms"], "new_tokens": answer["new_tokens"],
                                   "output": answer["text"], "answer": parse_answer(answer["text"]), **episode})

    def complete(self, messages: list[dict], arm: str | None = None, schema: dict | None = None,
                 request_id: str | None = None) -> dict:
        """One request without HTTP (what the server's app does per request, one at a time): route, answer, log."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
            raise ValueError("`messages` must be a list of {role, content}")
        request_id = request_id or uuid.uuid4().hex
        name = arm or self.pick(request_id)
        if name not in self.arms:
            raise ValueError(f"unknown model {name!r} (serving: {', '.join(self.arms)})")
        t0 = time.perf_counter()
        with self._gen_lock:
            gen = self.engine.generate([messages], use_adapter=self.arms[name].use_adapter,
                                       max_new_tokens=self.max_new_tokens, batch_size=1, progress=False,
                                       schemas=[schema] if schema else None)[0]
        self.record({"request_id": request_id, "model": name, "prompt": messages, "text": gen.text,
                     "new_tokens": gen.new_tokens, "latency_ms": round((time.perf_counter() - t0) * 1000, 2)})
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


class NoCanary(UserError, RuntimeError):
    pass


class OpenAIUpstream:
    """The Engine's `generate`, answered by an OpenAI-compatible server (vLLM's) whose LoRA modules are
    the arms: `modules` maps the Engine's switch (False, "prod", True) to the module name to request."""

    def __init__(self, url: str, modules: dict, command: list[str] | None = None, timeout: float = 600.0):
        self.url, self.modules, self.command, self.timeout = url.rstrip("/"), modules, command, timeout

    def generate(self, conversations: list[list[dict]], use_adapter, max_new_tokens: int, schemas=None, **_) -> list:
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
    ranks = [read_json(Path(p) / paths.ADAPTER_CONFIG).get("r", 8)
             for p in adapters.values() if (Path(p) / paths.ADAPTER_CONFIG).exists()]
    slot = next(r for r in VLLM_LORA_RANKS if r >= max(ranks, default=8))
    modules = [json.dumps({"name": name, "path": str(Path(path).resolve())}) for name, path in adapters.items()]
    return ["vllm", "serve", str(Path(base).resolve()), "--served-model-name", "base", "--port", str(port),
            "--enable-lora", "--max-lora-rank", str(slot), "--lora-modules", *modules]


def from_registry(root: Path, cfg: Params, log_dir: Path, candidate: Path | None = None,
                  upstream: str | None = None, agent: bool = False) -> CanaryService:
    """The service for the registry's canary beside its prod (the base model when nothing is in prod):
    both adapters restored from the DVC cache into models/serving/<version>/ and checked against the
    bundle committed at their release tags before anything serves them. `candidate` (an adapter folder
    dvc.lock pins, e.g. models/sft/adapter) serves an unreleased candidate as the canary instead: a dark
    launch whose analysis can be read but not concluded, as no version stands behind it. `upstream`: the
    URL of a vLLM server started with `vllm_command` over those folders; else the CPU engine here. `agent`: serve
    the tool-calling agent adapters the two versions ship instead (`agent_from_registry`)."""
    if agent:
        if candidate is not None or upstream is not None:
            raise NoCanary("the agent canary serves released versions on the CPU engine: --candidate and --upstream "
                           "are the extraction canary's")
        return agent_from_registry(root, cfg, log_dir)

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
    base = model.resolve(cfg.model)
    c_dir, c_expected = folders[canary["version"]]
    p_dir, p_expected = folders[prod["version"]] if prod else (None, None)
    if upstream is None:
        engine = Engine(base, c_dir, c_expected, p_dir, p_expected, **decoding(cfg.generate))
    else:
        identity = model.identity(base)
        for folder, expected in folders.values():
            verify_adapter(folder, expected, identity)
        engine = OpenAIUpstream(upstream, {True: canary["version"], "prod": prod["version"] if prod else "base",
                                           False: "base"},
                                vllm_command(base, {v: folder for v, (folder, _) in folders.items()}))
    arms = {"prod": Arm("prod", "prod" if prod else False, prod["version"] if prod else None,
                        p_expected["files"][paths.ADAPTER_WEIGHTS] if prod else None),
            "canary": Arm("canary", True, canary["version"], c_expected["files"][paths.ADAPTER_WEIGHTS])}
    return CanaryService(engine, arms, cfg.canary.share, log_dir, cfg.canary.max_new_tokens)


def agent_from_registry(root: Path, cfg: Params, log_dir: Path) -> CanaryService:
    """The agent canary: the tool-calling agent adapter the canary version ships beside the one prod serves (the base
    model when prod serves none), each restored from the DVC cache and checked against the bundle at the tag of the
    release that pinned it. Refused when the canary version ships no agent adapter of its own — its gate held the agent,
    so it carries prod's (or none) and there is nothing to test."""
    root = Path(root)
    canary, prod = current(root, "canary"), current(root, "prod")
    if canary is None:
        raise NoCanary("nothing is in canary: a gate decision of canary (or policy release_via_canary) and "
                       "`clap release` put a version there")
    source = agent_source(root, canary["version"])
    if source is None or source[0] != canary["version"]:
        raise NoCanary(f"{canary['version']} ships no agent adapter of its own (its gate did not pass the agent, so "
                       f"it carries {'the one of ' + source[0] if source else 'none'}): no agent canary to serve")
    others, arms = [], {}
    for name, holder in (("canary", canary), ("prod", prod)):
        folder = expected = None
        if holder is not None:
            try:
                folder, expected = restore_version_adapter(root, holder["version"], root / paths.MODELS / "serving" /
                                                           holder["version"] / "agent_adapter", role="agent_adapter")
            except ProdUnavailable:  # prod ships no agent adapter: its arm is the base model
                folder = None
        if folder is not None:
            others.append((name, folder, expected))
        arms[name] = Arm(name, name if folder is not None else False,
                         holder["version"] if folder is not None else None,
                         expected["files"][paths.ADAPTER_WEIGHTS] if folder is not None else None)
    engine, serving = served_agent(cfg.generate, cfg.model, others)
    return CanaryService(engine, arms, cfg.canary.share, log_dir, cfg.agent.turn_tokens, agent=serving)
