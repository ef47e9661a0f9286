"""The canary behind `clap serve`'s application: two adapters on one engine, a request that names no model routed by
its request id (`canary.share`), every answer logged and every outcome taken at `POST /v1/feedback`.

    clap canary serve        # this app on 127.0.0.1:<canary.port>
    clap canary demo         # this app in a thread, SIMULATED traffic, the sequential analysis

Routing, the logs and the feedback rules are `clap.feedback.canary.CanaryService`'s; batching, streaming, schemas and
request validation are the server's (`clap.serve.app`). Requests that name `prod` or `canary` pin an arm, as a LoRA
module name does in vLLM.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from clap import paths
from clap.config import Params
from clap.data.repair import replace_in_inbox
from clap.feedback import canary_analysis, traffic
from clap.feedback.canary import CanaryService, from_registry
from clap.io import write_json
from clap.serve.app import create_app


def canary_app(service: CanaryService, max_batch: int = 16, wait_ms: float = 5.0):
    """The canary's server: both arms on one engine. Static batching, which groups each batch by arm; a continuous
    batch serves one adapter at a time, so interleaved arms would take turns draining it."""
    return create_app(service.engine, {name: arm.use_adapter for name, arm in service.arms.items()},
                      default_max_tokens=service.max_new_tokens, max_tokens_cap=max(service.max_new_tokens, 2048),
                      max_batch=max_batch, wait_ms=wait_ms, route=service.pick, on_answer=service.record,
                      feedback=service.feedback, health={"arms": {name: arm.version for name, arm in service.arms.items()},
                                                         "share": service.share}, agent=service.agent,
                      batching="static")


class Server:
    """uvicorn on a socket bound at construction (so `server_address` is known at once), run by `serve_forever` in
    the caller's thread and stopped by `shutdown` from another: the interface of `http.server`'s servers."""

    def __init__(self, app, port: int, host: str = "127.0.0.1"):
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.socket.listen(128)
        self.server_address = self.socket.getsockname()
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._stopped.wait(timeout=60)

    def server_close(self) -> None:
        self.socket.close()


def server(service: CanaryService, port: int, host: str = "127.0.0.1") -> Server:
    """The canary's HTTP server (not started): `server(...).serve_forever()`, or in a thread for the demo and tests."""
    return Server(canary_app(service), port, host)


def simulated_canary(root: Path, cfg: Params, logs: Path, limit: int, candidate: Path | None = None,
                     fail_when_exhausted: bool = False, agent: bool = False) -> tuple[dict, dict]:
    """One canary end to end on SIMULATED traffic: serve prod and the canary in this process, replay the held-out
    replay questions as paired requests (scored against gold, outcomes posted back) until the sequential analysis
    is conclusive or `limit` questions are spent, then analyse: metrics/canary.json and the flywheel inbox.
    `agent`: the agent canary instead — the versions' agent adapters, the held-out agent tasks as paired episodes,
    task success as the outcome (metrics/canary_agent.json).
    `fail_when_exhausted`: a canary still inconclusive when the traffic runs out fails (`clap demo` ends every
    canary before its next round, and never promotes on evidence it did not get). Returns (traffic counts,
    analysis)."""
    service = from_registry(root, cfg, logs, candidate, agent=agent)
    srv = server(service, 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    send = traffic.send_agent if agent else traffic.send
    try:
        counts = send(cfg, root, f"http://127.0.0.1:{srv.server_address[1]}", True, limit,
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
    write_json(root / (paths.CANARY_AGENT_METRICS if agent else paths.CANARY_METRICS), analysis)
    replace_in_inbox(root / paths.INBOX, canary_analysis.failed_cases(requests, feedback),
                     f"canary{'-agent' if agent else ''}:{analysis['versions']['canary']}")
    return counts, analysis
