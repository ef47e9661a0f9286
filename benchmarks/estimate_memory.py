"""The memory each base-model profile in conf/model/ needs to train, estimated from the architecture, and the
estimate checked against a tiny model's measured footprint in the same run.

    python benchmarks/estimate_memory.py [--seq-len 1024]

Prints, per profile: the base, LoRA or QLoRA, batch × sequence, and the estimate by part (clap.train.memory).
Then the check: a tiny Llama-style model (vocabulary 512, hidden 64, 2 layers) measured on the CPU in fp32 —
weights and adapter exactly, activations as the bytes autograd saves — beside the estimate for the same shape.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clap.config import compose
from clap.model import PACKAGED
from clap.train.memory import GIB, PUBLISHED, Shape, estimate, measure_tiny

ROOT = Path(__file__).resolve().parents[1]


def profile_rows(seq_len: int | None) -> list[str]:
    rows = ["| profile | base | method | batch × tokens | weights | adapter | activations | overhead | total |",
            "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        cfg = compose([f"model={path.stem}"], conf=ROOT / "conf")
        base, sft = cfg["model"]["base"], cfg["train"]["sft"]
        hub = PACKAGED[base].derived_from if base in PACKAGED else base
        shape = PUBLISHED[hub]
        qlora = sft["qlora"] in (True, "on")
        bf16 = sft["bf16"] in (True, "on", "auto") or qlora  # on a GPU, auto is bf16
        tokens = seq_len or sft["max_length"]
        parts = estimate(shape, lora_r=sft["lora_r"], batch=sft["per_device_batch_size"], seq_len=tokens,
                         qlora=qlora, bf16=bf16, checkpointing=sft["gradient_checkpointing"])
        gib = {k: f"{v / GIB:.1f} GiB" for k, v in parts.items()}
        method = ("QLoRA 4-bit" if qlora else "LoRA bf16") + (", checkpointing" if qlora or sft["gradient_checkpointing"]
                                                               else "")
        rows.append(f"| `{path.stem}` | {hub} | {method} r={sft['lora_r']} | "
                    f"{sft['per_device_batch_size']} × {tokens} | {gib['weights']} | {gib['adapter']} | "
                    f"{gib['activations']} | {gib['overhead']} | **{gib['total']}** |")
    return rows


def tiny_check() -> list[str]:
    shape, r, batch, seq = Shape(512, 64, 2, 4, 2, 16, 128, True), 8, 2, 48
    measured = measure_tiny(shape, lora_r=r, batch=batch, seq_len=seq)
    estimated = estimate(shape, lora_r=r, batch=batch, seq_len=seq, qlora=False, bf16=False, overhead=0)
    rows = ["| part | estimated (bytes) | measured (bytes) | estimated / measured |", "|---|---|---|---|"]
    for part in ("weights", "adapter", "activations"):
        rows.append(f"| {part} | {estimated[part]:,.0f} | {measured[part]:,.0f} | "
                    f"{estimated[part] / measured[part]:.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: train.sft.max_length)")
    args = ap.parse_args()
    print("\n".join(profile_rows(args.seq_len)))
    print()
    print("tiny model (vocab 512, hidden 64, 2 layers, LoRA r=8, batch 2 × 48 tokens, fp32 on the CPU):")
    print("\n".join(tiny_check()))


if __name__ == "__main__":
    main()
