"""`clap serve` under load: N concurrent requests on loopback, batched against one request at a time.

    python benchmarks/bench_serve.py [--requests 50] [--max-tokens 48] [--max-batch 16] [--arrival-ms 0]
                                     [--adapter DIR] [--llama-cpp FILE.gguf]

One engine (SmolLM2-135M-Instruct, models/base; with --adapter a LoRA folder whose manifest.json pins it), three
servers over it from `clap.serve.app.create_app`: continuous batching with `--max-batch` rows (the default: a
request joins the running batch as soon as a row leaves it), static batching (requests arriving together decode
as one batch to its end) and `max_batch=1` (the one-request-at-a-time peer). Each gets the same N chat requests at
once — extraction questions over a chunk, each under its JSON-schema grammar (`response_format`), greedy — and the
script prints requests/s, completion tokens/s, p50/p95 latency and whether every answer equals the peer's. Runs
interleave (continuous, static, one at a time, continuous, static) so drift of the VM's speed shows. `--llama-cpp FILE.gguf`: the same prompts through
llama.cpp (llama-cpp-python's engine, one at a time, same threads, each schema as a llama.cpp grammar) over that
GGUF — written first, as `clap export --gguf` writes it (base + adapter merged, F32), when the file does not exist.
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
    from clap.domain import prompts
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


def load(url: str, bodies: list[dict], arrival_ms: float = 0.0) -> dict:
    """Every body sent from its own thread: all at once, or the i-th `i × arrival_ms` after the first (a latency is
    counted from a request's own send)."""
    def one(i_body):
        i, body = i_body
        time.sleep(i * arrival_ms / 1000)
        t0 = time.perf_counter()
        status, reply = post(f"{url}/v1/chat/completions", body, timeout=3600)
        return status, reply, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        done = list(pool.map(one, enumerate(bodies)))
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
    ap.add_argument("--arrival-ms", type=float, default=0.0, help="send request i at i × this (default: all at once)")
    ap.add_argument("--adapter", type=Path, default=None)
    ap.add_argument("--llama-cpp", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="the results as JSON")
    args = ap.parse_args()

    from clap import config, model
    from clap.evaluate.generate import Engine
    from clap.serve.app import create_app

    cfg = config.load(ROOT / "params.yaml")
    base = model.resolve_base(cfg.model.base, ROOT / cfg.model.cache_dir)
    if args.adapter:
        engine = Engine(base, args.adapter, json.loads((args.adapter / "manifest.json").read_text()))
        served = {"served": True}
    else:
        engine = Engine(base)
        served = {"served": False}
    bodies = requests(args.requests, args.max_tokens)
    for body in bodies:  # every server reads the engine's grammars: compiled once here, not in the first run's time
        engine.grammars.compiled(body["response_format"]["json_schema"]["schema"])
    results = {}
    runs = (("batched", args.max_batch, "continuous"), ("static", args.max_batch, "static"),
            ("one_at_a_time", 1, "static"), ("batched_again", args.max_batch, "continuous"),
            ("static_again", args.max_batch, "static"))
    for label, max_batch, batching in runs:
        with running(create_app(engine, served, max_batch=max_batch, wait_ms=20, batching=batching)) as url:
            results[label] = load(url, bodies, args.arrival_ms)
        r = results[label]
        print(f"{label:>14} ({batching}, max_batch {max_batch:>2}): {r['requests_s']:.3f} req/s, "
              f"{r['tokens_s']:.1f} tok/s, p50 {r['p50_s']} s, p95 {r['p95_s']} s, wall {r['wall_s']} s", flush=True)
    same = all(r["answers"] == results["one_at_a_time"]["answers"] for r in results.values())
    speedup = min(results["batched"]["requests_s"], results["batched_again"]["requests_s"]) / \
        results["one_at_a_time"]["requests_s"]
    over_static = min(results["batched"]["requests_s"], results["batched_again"]["requests_s"]) / \
        max(results["static"]["requests_s"], results["static_again"]["requests_s"])
    print(f"continuous / one at a time: {speedup:.2f}x requests/s; continuous / static (the slower continuous run "
          f"against the faster static one): {over_static:.2f}x; every answer equal: {same}")
    peer = None
    if args.llama_cpp:
        gguf = args.llama_cpp if args.llama_cpp.exists() else export_gguf(base, args.adapter, args.llama_cpp)
        peer = llama_cpp_peer(gguf, bodies)
        if peer is not None:
            agree = sum(_same_answer(a, b) for a, b in zip(peer.pop("answers"), results["batched"]["answers"]))
            peer["answers_agree"] = f"{agree}/{len(bodies)}"
            print(f"llama.cpp (one at a time, same cores): {peer['requests_s']:.3f} req/s, {peer['tokens_s']:.1f} tok/s, "
                  f"p50 {peer['p50_s']} s, p95 {peer['p95_s']} s; answers equal to clap serve's (parsed JSON): "
                  f"{peer['answers_agree']}")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "results": {k: {m: v for m, v in r.items() if m != "answers"}
                                                    for k, r in results.items()},
                                        "speedup": round(speedup, 2), "over_static": round(over_static, 2),
                                        "answers_equal": same, "llama_cpp": peer},
                                       indent=1))


def export_gguf(base: Path, adapter: Path | None, out: Path) -> Path:
    """The served model (base + adapter merged) as the F32 GGUF `clap export --gguf` writes, round-trip checked."""
    import torch

    from clap import model
    from clap.integrity import attach
    from clap.release import export

    merged_dir = out.with_name(out.stem + "-merged")
    weights = model.load_model(base, dtype=torch.float32)
    if adapter is not None:
        expected = json.loads((adapter / "manifest.json").read_text())
        weights = attach(weights, "default", adapter, expected, model.identity(base)).merge_and_unload()
    weights.save_pretrained(merged_dir, safe_serialization=True)
    model.load_tokenizer(base).save_pretrained(merged_dir)
    manifest = json.loads((base / "manifest.json").read_text())
    export.write_gguf(merged_dir, model.gguf_path(manifest["requested"], scratch=out.parent), out, "LLAMA")
    check = export.check_gguf(merged_dir, out)
    print(f"GGUF {out}: round trip {check}")
    return out


def llama_cpp_peer(gguf: Path, bodies: list[dict]) -> dict | None:
    """The same prompts through llama.cpp (llama-cpp-python, an optional extra built from source), one at a time on
    the same 2 threads, each under its JSON schema as a llama.cpp grammar."""
    try:
        from llama_cpp import Llama, LlamaGrammar
    except ImportError:
        print("llama.cpp peer: llama-cpp-python is not installed (pip install 'clap-loop[llama]' builds it from source)")
        return None
    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=2, verbose=False)
    lat, tokens, answers = [], 0, []
    t0 = time.perf_counter()
    for body in bodies:
        grammar = LlamaGrammar.from_json_schema(json.dumps(body["response_format"]["json_schema"]["schema"]),
                                                verbose=False)
        t = time.perf_counter()
        out = llm.create_chat_completion(messages=body["messages"], max_tokens=body["max_tokens"], temperature=0.0,
                                         grammar=grammar)
        lat.append(time.perf_counter() - t)
        tokens += out["usage"]["completion_tokens"]
        answers.append(out["choices"][0]["message"]["content"])
    wall = time.perf_counter() - t0
    lat.sort()
    return {"wall_s": round(wall, 2), "requests_s": round(len(bodies) / wall, 3), "tokens_s": round(tokens / wall, 1),
            "p50_s": round(statistics.median(lat), 2), "p95_s": round(lat[max(0, int(0.95 * len(lat)) - 1)], 2),
            "answers": answers}


def _same_answer(a: str, b: str) -> bool:
    """Equal as JSON values (llama.cpp's grammar may space the JSON differently), else as text."""
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return a.strip() == b.strip()


if __name__ == "__main__":
    main()
