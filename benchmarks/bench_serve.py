"""`clap serve` under load: N concurrent requests on loopback, batched against one request at a time.

    python benchmarks/bench_serve.py [--requests 50] [--max-tokens 48] [--max-batch 16] [--adapter DIR]
                                     [--llama-cpp FILE.gguf]

One engine (SmolLM2-135M-Instruct, models/base; with --adapter a LoRA folder whose manifest.json pins it), two
servers over it from `clap.serve.app.create_app`: `--max-batch` (requests arriving together decode in one batch)
and `max_batch=1` (the one-request-at-a-time peer). Each gets the same N chat requests at once — extraction
questions over a chunk, each under its JSON-schema grammar (`response_format`), greedy — and the script prints
requests/s, completion tokens/s, p50/p95 latency and whether every answer equals the peer's. Runs interleave
(batched, one at a time, batched) so drift of the VM's speed shows. `--llama-cpp`: the same prompts through
llama-cpp-python's server over a GGUF export (`clap export --gguf`), when that optional package is installed.
Run it alone: two torch jobs on two cores slow each other ~5×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.http_server import post, running  # noqa: E402

COMPANIES = ["Acme Corp", "Borealis Ltd", "Cobalt plc", "Dunmore AG", "Evergreen Inc"]
METRICS = [("revenue", "1,200.5 million USD"), ("net profit", "87.2 million USD"), ("gross margin", "31.4%"),
           ("operating cash flow", "402 million USD"), ("headcount", "5,120 employees")]


def requests(n: int, max_tokens: int) -> list[dict]:
    from clap import prompts
    from clap.evaluate.decoding import answer_schema

    out = []
    for i in range(n):
        company, (metric, value) = COMPANIES[i % len(COMPANIES)], METRICS[(i // len(COMPANIES)) % len(METRICS)]
        chunk = {"chunk_id": f"d{i}-p1", "doc_id": f"d{i}", "page": 1,
                 "text": f"{company} reported {metric} of {value} for fiscal {2019 + i % 6}. The board approved it."}
        question = f"What was {company}'s {metric} in {2019 + i % 6}?"
        out.append({"model": "served", "max_tokens": max_tokens,
                    "messages": prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(question, [chunk])),
                    "response_format": {"type": "json_schema", "json_schema": {
                        "name": "answer", "schema": answer_schema([chunk], with_location=True)}}})
    return out


def load(url: str, bodies: list[dict]) -> dict:
    def one(body):
        t0 = time.perf_counter()
        status, reply = post(f"{url}/v1/chat/completions", body, timeout=3600)
        return status, reply, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        done = list(pool.map(one, bodies))
    wall = time.perf_counter() - t0
    assert all(s == 200 for s, _, _ in done), [r for s, r, _ in done if s != 200][:1]
    lat = sorted(d for _, _, d in done)
    tokens = sum(r["usage"]["completion_tokens"] for _, r, _ in done)
    return {"wall_s": round(wall, 2), "requests_s": round(len(bodies) / wall, 3), "tokens_s": round(tokens / wall, 1),
            "p50_s": round(statistics.median(lat), 2), "p95_s": round(lat[max(0, int(0.95 * len(lat)) - 1)], 2),
            "answers": [r["choices"][0]["message"]["content"] for _, r, _ in done]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--adapter", type=Path, default=None)
    ap.add_argument("--llama-cpp", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="the results as JSON")
    args = ap.parse_args()

    from clap import config, model
    from clap.evaluate.generate import Engine
    from clap.serve.app import create_app

    cfg = config.load(ROOT / "params.yaml")
    base = model.resolve_base(cfg["model"]["base"], ROOT / cfg["model"]["cache_dir"])
    if args.adapter:
        engine = Engine(base, args.adapter, json.loads((args.adapter / "manifest.json").read_text()))
        served = {"served": True}
    else:
        engine = Engine(base)
        served = {"served": False}
    bodies = requests(args.requests, args.max_tokens)
    results = {}
    for label, max_batch in (("batched", args.max_batch), ("one_at_a_time", 1), ("batched_again", args.max_batch)):
        with running(create_app(engine, served, max_batch=max_batch, wait_ms=20)) as url:
            results[label] = load(url, bodies)
        r = results[label]
        print(f"{label:>14} (max_batch {max_batch:>2}): {r['requests_s']:.3f} req/s, {r['tokens_s']:.1f} tok/s, "
              f"p50 {r['p50_s']} s, p95 {r['p95_s']} s, wall {r['wall_s']} s", flush=True)
    same = results["batched"]["answers"] == results["one_at_a_time"]["answers"] == results["batched_again"]["answers"]
    speedup = min(results["batched"]["requests_s"], results["batched_again"]["requests_s"]) / \
        results["one_at_a_time"]["requests_s"]
    print(f"batched / one at a time: {speedup:.2f}x requests/s (the slower batched run); answers equal: {same}")
    if args.llama_cpp:
        print(llama_cpp_peer(args.llama_cpp, bodies))
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "results": {k: {m: v for m, v in r.items() if m != "answers"}
                                                    for k, r in results.items()},
                                        "speedup": round(speedup, 2), "answers_equal": same}, indent=1))


def llama_cpp_peer(gguf: Path, bodies: list[dict]) -> str:
    """The same prompts through llama-cpp-python (optional, built from source), one at a time, each under its
    JSON-schema grammar; tokens/s and p95 for the table beside clap serve's."""
    try:
        from llama_cpp import Llama, LlamaGrammar
    except ImportError:
        return "llama.cpp peer: llama-cpp-python is not installed (pip install llama-cpp-python builds it from source)"
    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=2, verbose=False)
    lat, tokens = [], 0
    t0 = time.perf_counter()
    for body in bodies:
        grammar = LlamaGrammar.from_json_schema(json.dumps(body["response_format"]["json_schema"]["schema"]))
        t = time.perf_counter()
        out = llm.create_chat_completion(messages=body["messages"], max_tokens=body["max_tokens"], temperature=0.0,
                                         grammar=grammar)
        lat.append(time.perf_counter() - t)
        tokens += out["usage"]["completion_tokens"]
    wall = time.perf_counter() - t0
    lat.sort()
    return (f"llama.cpp (one at a time): {len(bodies) / wall:.3f} req/s, {tokens / wall:.1f} tok/s, "
            f"p95 {lat[max(0, int(0.95 * len(lat)) - 1)]:.2f} s")


if __name__ == "__main__":
    main()
