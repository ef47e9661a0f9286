"""Serving and export of what a release shipped: `clap serve` (an OpenAI-compatible server of the version in prod, a
registered version or the base model) and `clap export` (merged safetensors, GGUF). No stage runs from here."""

from __future__ import annotations

from pathlib import Path

import typer

from clap.cli.common import _fail, _params, app, console
from clap.release import export as ex
from clap.serve import engine as served
from clap.serve.app import create_app


@app.command()
def serve(version: str = typer.Option(None, help="a registered version (default: the one in prod)"),
          adapter: Path = typer.Option(None, help="an unreleased adapter folder dvc.lock pins (served as `candidate`)"),
          host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
          max_batch: int = typer.Option(16, min=1, help="requests decoded together at most (1: one at a time)"),
          batching: str = typer.Option("continuous", help="continuous (a request joins the batch already decoding) "
                                                          "| static (a batch decodes to its end before the next)"),
          batch_wait_ms: float = typer.Option(5.0, min=0.0, help="how long a request waits for others to join it"),
          max_tokens: int = typer.Option(256, min=1, help="a request's max_tokens when it sets none"),
          max_tokens_cap: int = typer.Option(2048, min=1, help="the largest max_tokens a request may ask for"),
          engine: str = typer.Option("hf", help="hf (this machine's CPU/GPU) | vllm (CUDA: runs vLLM's OpenAI "
                                                "server with the verified adapter as its LoRA module)"),
          agent: bool = typer.Option(False, help="serve the tool-calling agent adapter the version ships (OpenAI "
                                                 "tools / tool_calls, one turn per request)"),
          base: bool = typer.Option(False, "--base", help="serve the base model alone, as `base` (no release "
                                                          "needed: a first smoke test)"),
          grammar_timeout_s: float = typer.Option(10.0, min=0.1, help="a response_format schema whose grammar does "
                                                                      "not compile within this is a 400"),
          grammar_memory_mb: int = typer.Option(4096, min=256, help="the grammar compile process's memory limit"),
          max_request_mb: float = typer.Option(2048.0, min=1.0, help="a request that would hold more memory while "
                                                                     "it decodes (KV cache, attention, grammar) is a "
                                                                     "400")) -> None:
    """Serve the adapter in prod (or --version, or --adapter, or the base model alone with --base) behind an
    OpenAI-compatible API: /v1/chat/completions, /v1/completions, /v1/models. An adapter is restored and checked
    against its release bundle before it loads; a request joins the batch already decoding at its next step."""
    import os
    import shlex

    if engine not in ("hf", "vllm"):
        _fail(ValueError(f"--engine {engine!r}: use hf or vllm"))
    if agent and (engine != "hf" or adapter is not None):
        _fail(ValueError("--agent serves a released agent adapter on the hf engine (no --adapter, no --engine vllm)"))
    if base and (version or adapter is not None or agent or engine != "hf"):
        _fail(ValueError("--base serves the base model alone on the hf engine (no --version, --adapter, --agent or "
                         "--engine vllm)"))
    cfg = _params()
    if batching not in ("continuous", "static"):
        _fail(ValueError(f"--batching {batching!r}: use continuous or static"))
    bounds = {"max_tokens_cap": max_tokens_cap, "max_batch": max_batch, "wait_ms": batch_wait_ms, "batching": batching,
              "grammar_timeout_s": grammar_timeout_s, "grammar_memory_mb": grammar_memory_mb,
              "max_request_mb": max_request_mb}
    if base:
        import uvicorn

        application = create_app(served.cpu_engine(cfg, None, None), {"base": False}, default_max_tokens=max_tokens,
                                 **bounds)
        console.print(f"serving base ({cfg.model.base}) on http://{host}:{port}/v1 (batches of up to {max_batch})")
        _serve_until_stopped(uvicorn, application, host, port)
        return
    if agent:
        import uvicorn

        name, folder, expected = served.agent_to_serve(Path("."), version)
        agent_engine, serving = served.agent_engine(cfg, name, folder, expected)
        application = create_app(agent_engine, {name: name, "base": False}, default_max_tokens=cfg.agent.turn_tokens,
                                 agent=serving, **bounds)
        console.print(f"serving {name} (verified) and base on http://{host}:{port}/v1 with the agent's tools "
                      f"({', '.join(serving.names)})")
        _serve_until_stopped(uvicorn, application, host, port)
        return
    name, folder, expected = served.adapter_to_serve(Path("."), version, adapter)
    if engine == "vllm":
        command = served.vllm_command(cfg, name, folder, expected, host, port)
        console.print(f"{name}: passed the serving check; exec {shlex.join(command)}")
        os.execvp(command[0], command)
    import uvicorn

    application = create_app(served.cpu_engine(cfg, folder, expected), {name: True, "base": False},
                             default_max_tokens=max_tokens, **bounds)
    console.print(f"serving {name} (verified) and base on http://{host}:{port}/v1 (batches of up to {max_batch})")
    _serve_until_stopped(uvicorn, application, host, port)


def _serve_until_stopped(uvicorn, application, host: str, port: int) -> None:
    """uvicorn until SIGTERM/SIGINT: open requests get 5 s to finish, then the process exits even while the engine's
    thread is still decoding a batch (it would otherwise hold the exit until that batch ends)."""
    import os
    import sys

    uvicorn.run(application, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@app.command()
def export(version: str = typer.Argument(None, help="the registered version (default: the one in prod)"),
           merged: Path = typer.Option(None, help="write the base with the adapter merged here (safetensors)"),
           gguf: Path = typer.Option(None, help="write the merged model as an F32 GGUF file, round-trip checked")) -> None:
    """Export a released adapter, checked against its release bundle first: merged into the base (plain
    transformers loads it) and/or as a GGUF for llama.cpp / Ollama, each with a model card and export.json."""
    if merged is None and gguf is None:
        _fail(ValueError("name an export: --merged DIR and/or --gguf FILE"))
    cfg = _params()
    if gguf is not None:
        scratch = merged or gguf.with_name(gguf.name.removesuffix(".gguf") + "-merged")
        r = ex.export_gguf(Path("."), cfg, version, gguf, scratch)
        check = r["round_trip"]
        console.print(f"{r['tag']} → {gguf} (F32, sha256 {r['gguf_sha256'][:12]}…): round trip "
                      f"{check['answers_equal']}/{check['prompts']} greedy answers equal, max |Δlogit| "
                      f"{check['max_abs_logit_diff']:.1e}; merged folder {scratch}")
    else:
        r = ex.export_merged(Path("."), cfg, version, merged)
        console.print(f"{r['tag']} → {merged}: merged safetensors, model card, export.json")
