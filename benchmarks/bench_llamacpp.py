"""CLAP's grammar-constrained decoding beside llama.cpp's, on the replay's requests and the same weights.

    npm install --prefix /tmp/llamacpp node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
    cd <a project after one round> && python benchmarks/bench_llamacpp.py --node-dir /tmp/llamacpp --out /tmp/llama

The requests are the replay's arm A (base + RAG), or with `--adapter` arm B (the trained adapter + RAG), built as
the replay stage builds them (`clap.stages.replay`:
each case's question over its retrieved chunks, with the answer schema made from what the model is shown), and
rendered by the base's chat template. CLAP decodes them with its own engine (`clap.evaluate.generate.Engine`,
xgrammar), greedy, on the base model; llama.cpp decodes the same prompt token ids, greedy, under
node-llama-cpp's grammar for the same JSON schema (`benchmarks/llamacpp_decode.mjs`), on an F32 GGUF CLAP writes
from that base (`clap.release.export.write_gguf`, the exporter `clap export --gguf` uses), so both hold the same
weights (with `--adapter`: the adapter, checked against the hashes dvc.lock pins, merged into the base first, as
`clap export --merged` does). Both run one request at a time on `--threads` threads; CLAP also runs the stage's batch. The table gives
requests/s, generated tokens/s, p95 latency and how many answers are equal (as JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

from clap import paths
from clap.config import load
from clap.io import read_json, read_jsonl
from clap.model import PACKAGED, gguf_path
from clap.release.export import GGUF_ARCHS, write_gguf
from clap.retrieval import BM25Index, retrieve

HERE = Path(__file__).resolve().parent


def replay_requests(cfg, limit: int | None) -> tuple[list, list]:
    """The RAG arms' conversations and answer schemas, as the replay stage builds them."""
    import pandas as pd

    from clap.stages.replay import requests

    chunks = pd.read_parquet(paths.ASSETS / "chunks.parquet")
    by_id = {c["chunk_id"]: c for c in chunks.to_dict("records")}
    cases = [c for b in cfg.data.batches for c in read_jsonl(paths.MATERIALIZED / b / "replay_cases.jsonl")][:limit]
    hits = retrieve(cfg.retrieval, BM25Index.load(paths.INDEX / "bm25"), chunks, [c["question"] for c in cases])
    return requests(cases, [[by_id[h] for h in hit] for hit in hits], constrained=True)


def merged(base: Path, adapter: Path, out: Path) -> Path:
    """The base with `adapter` (checked against its pins) merged in, as a folder."""
    import torch

    from clap import model as base_model
    from clap.integrity import attach, pinned_expectation

    folder = out / "merged"
    if not (folder / "config.json").exists():
        model = attach(base_model.load_model(base, dtype=torch.float32), "default", adapter,
                       pinned_expectation(Path("."), adapter), base_model.identity(base))
        model.merge_and_unload().save_pretrained(folder, safe_serialization=True)
    return folder


def the_gguf(base: Path, weights: Path, out: Path) -> Path:
    """`weights` (the base or a merged folder) as an F32 GGUF, written once by CLAP's exporter with the tokenizer
    metadata of the packaged GGUF the base came from."""
    target = out / f"{weights.name}-f32.gguf"
    if not target.exists():
        manifest = read_json(base / paths.MANIFEST)
        assert manifest["requested"] in PACKAGED, "the base must come from a packaged GGUF (its tokenizer metadata)"
        arch = read_json(base / "config.json")["architectures"][0]
        write_gguf(weights, gguf_path(manifest["requested"], scratch=out), target, GGUF_ARCHS[arch])
    return target


def clap_side(cfg, base: Path, adapter: Path | None, convs: list, schemas: list, max_tokens: int, batch_size: int
              ) -> dict:
    """CLAP's engine (the base, or the base with `adapter`), greedy under each schema: one request at a time, then
    the stage's batch."""
    from clap.evaluate.generate import Engine
    from clap.integrity import pinned_expectation

    engine = Engine(base, adapter, pinned_expectation(Path("."), adapter) if adapter else None,
                    dtype=cfg.generate.dtype, jump_forward=cfg.generate.jump_forward)
    on = adapter is not None
    engine.generate(convs[:1], use_adapter=on, max_new_tokens=max_tokens, schemas=schemas[:1], use_store=False,
                    progress=False)  # warm-up: grammar compiler, first allocations
    out = {}
    for name, size in (("one at a time", 1), (f"batch of {batch_size}", batch_size)):
        start = time.perf_counter()
        gens = engine.generate(convs, use_adapter=on, max_new_tokens=max_tokens, batch_size=size, schemas=schemas,
                               use_store=False, progress=False)
        wall = time.perf_counter() - start
        out[name] = {"wall_s": wall, "texts": [g.text for g in gens], "new_tokens": [g.new_tokens for g in gens],
                     "ms": [g.latency_ms for g in gens]}
    out["encode"] = engine.encode  # the prompt ids CLAP decoded from, handed to llama.cpp as they are
    return out


def llama_side(node_dir: Path, gguf: Path, encode, convs: list, schemas: list, max_tokens: int, threads: int,
               out: Path) -> dict:
    """llama.cpp through node-llama-cpp on the same prompt ids, one request at a time."""
    ids = [encode(c) for c in convs]
    (out / "requests.json").write_text(json.dumps([{"tokens": list(map(int, t)), "schema": s, "max_tokens": max_tokens}
                                                   for t, s in zip(ids, schemas)]))
    start = time.perf_counter()
    subprocess.run(["node", str(HERE / "llamacpp_decode.mjs"), str(node_dir), str(gguf), str(out / "requests.json"),
                    str(out / "llamacpp.json"), str(threads)], check=True)
    wall = time.perf_counter() - start
    done = json.loads((out / "llamacpp.json").read_text())
    rs = done["results"]
    return {"wall_s": sum(r["ms"] for r in rs) / 1000, "process_s": wall, "load_ms": done["load_ms"],
            "texts": [r["text"] for r in rs], "new_tokens": [r["new_tokens"] for r in rs], "ms": [r["ms"] for r in rs],
            "grammar_ms": [r["grammar_ms"] for r in rs]}


def as_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def row(name: str, run: dict, reference: list[str]) -> str:
    n = len(run["texts"])
    equal = sum(a == b or (as_json(a) is not None and as_json(a) == as_json(b))  # the same text, or the same JSON
                for a, b in zip(run["texts"], reference))
    ms = sorted(run["ms"])
    p95 = ms[min(n - 1, int(round(0.95 * (n - 1))))]
    return (f"| {name} | {n / run['wall_s']:.2f} | {sum(run['new_tokens']) / run['wall_s']:.1f} | {p95:.0f} | "
            f"{statistics.median(ms):.0f} | {equal}/{n} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node-dir", type=Path, required=True, help="where node-llama-cpp is installed")
    ap.add_argument("--out", type=Path, required=True, help="the GGUF, the requests and the results go here")
    ap.add_argument("--limit", type=int, help="the first N replay cases")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--adapter", type=Path, help="decode with this adapter (e.g. models/sft/adapter): arm B")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = load()
    base = Path(paths.MODELS / "base")
    convs, schemas = replay_requests(cfg, args.limit)
    gguf = the_gguf(base, merged(base, args.adapter, args.out) if args.adapter else base, args.out)
    clap = clap_side(cfg, base, args.adapter, convs, schemas, cfg.replay.max_new_tokens, cfg.replay.batch_size)
    llama = llama_side(args.node_dir, gguf, clap.pop("encode"), convs, schemas, cfg.replay.max_new_tokens,
                       args.threads, args.out)
    reference = clap["one at a time"]["texts"]
    arm = f"arm B: {args.adapter} + RAG" if args.adapter else "arm A: base + RAG"
    print(f"{len(convs)} replay requests ({arm}), greedy under each answer schema, "
          f"max {cfg.replay.max_new_tokens} new tokens; llama.cpp model load {llama['load_ms'] / 1000:.1f} s "
          f"(not counted), its grammars built in {sum(llama['grammar_ms']) / 1000:.2f} s (not counted)")
    print("| decoder | requests/s | generated tokens/s | p95 ms | median ms | answers equal to CLAP one at a time |")
    print("|---|---|---|---|---|---|")
    for name, run in clap.items():
        print(row(f"CLAP, {name}", run, reference))
    print(row("llama.cpp (node-llama-cpp), one at a time", llama, reference))
    (args.out / "answers.json").write_text(json.dumps({"clap": clap, "llama.cpp": llama}, indent=1))


if __name__ == "__main__":
    main()
