"""What one `clap serve` request holds: measured peak memory beside `openai_api.request_memory_mb`'s estimate.

    python benchmarks/bench_serve_memory.py [--base models/base] [--tokens 500 2000 4000 7000] [--max-tokens 8]

Each prompt length runs in a fresh process (peak RSS only grows): the engine loads SmolLM2-135M-Instruct, answers a
short warm-up request (the first call's one-time allocations), then one request of N prompt tokens. The figure is
that request's peak RSS above the warm process, beside the estimate `clap serve --max-request-mb` compares against.
Run it alone: two torch jobs on two cores slow each other ~5×.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(base: str, tokens: int, max_tokens: int) -> dict:
    """In this process: the warm engine's peak RSS, then the request's."""
    from clap.evaluate.generate import Engine
    from clap.serve import openai_api as api
    from clap.serve.app import _memory_shape

    engine = Engine(base, None, None)
    engine.generate(["warm up"], use_adapter=False, max_new_tokens=max_tokens, batch_size=1, progress=False,
                    use_store=False)
    warm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    prompt = " ".join(["revenue"] * tokens)
    engine.generate([prompt], use_adapter=False, max_new_tokens=max_tokens, batch_size=1, progress=False,
                    use_store=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = len(engine.encode(prompt))
    return {"prompt_tokens": n, "warm_mb": round(warm), "measured_mb": round(peak - warm),
            "estimate_mb": round(api.request_memory_mb(n, max_tokens, *_memory_shape(engine)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / "models" / "base"))
    parser.add_argument("--tokens", type=int, nargs="+", default=[500, 2000, 4000, 7000])
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child's run
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.base, args.one, args.max_tokens)))
        return
    print(f"{'prompt tokens':>13} {'measured MB':>12} {'estimate MB':>12}")
    for tokens in args.tokens:
        out = subprocess.run([sys.executable, __file__, "--base", args.base, "--max-tokens", str(args.max_tokens),
                              "--one", str(tokens)], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{row['prompt_tokens']:>13} {row['measured_mb']:>12} {row['estimate_mb']:>12}", flush=True)


if __name__ == "__main__":
    main()
