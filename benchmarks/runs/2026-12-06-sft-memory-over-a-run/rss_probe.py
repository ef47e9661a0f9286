"""RSS after each micro-step of `clap train sft` in the current project, under allocator and padding variants:

    cd <a TAT-QA project at admit> && python rss_probe.py VARIANT STEPS

VARIANT is made of words: whole (train.sft.memory_budget_mb: null), trim (glibc malloc_trim after each micro-step),
mmap (a fixed 4 MB M_MMAP_THRESHOLD), pad (batches padded to a multiple of 64 tokens, on code before
`train.sft.pad_to_multiple_of`), gc (the bytes of the tensors Python can see, after each micro-step). Prints
RESULT {..., "rss": [MB after each micro-step and step]}. The checkpoints are not saved (save_steps 10,000).
"""
import ctypes
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

from clap.config import load
from clap.stages import train_sft

variant, steps = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL("libc.so.6")


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


def python_tensors() -> str:
    import gc

    import torch

    tensors = [o for o in gc.get_objects() if torch.is_tensor(o)]
    storages = {}
    for t in tensors:
        try:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        except RuntimeError:
            pass
    return f"tensors {len(tensors)} {sum(storages.values()) // 2**20} MB"


class Trace(TrainerCallback):
    def __init__(self):
        self.rows, self.started = [], time.time()

    def on_substep_end(self, args, state, control, **kw):
        if "trim" in variant:
            libc.malloc_trim(0)
        self.rows.append(rss())
        if "gc" in variant:
            print(python_tensors(), flush=True)

    def on_step_end(self, args, state, control, **kw):
        if "trim" in variant:
            libc.malloc_trim(0)
        self.rows.append(rss())
        print(state.global_step, rss(), round(time.time() - self.started, 1), flush=True)


if "mmap" in variant:
    libc.mallopt(-3, 4 * 1024 * 1024)  # M_MMAP_THRESHOLD: fixed, no dynamic growth
if "pad" in variant:
    original = train_sft.sft_config

    def padded(*a, **k):
        config = original(*a, **k)
        config.pad_to_multiple_of = 64
        return config

    train_sft.sft_config = padded
cfg = load(Path("params.yaml"))
s = cfg.train.sft.model_copy(update=dict(max_steps=steps, save_steps=10_000, logging_steps=1))
if "whole" in variant:
    s.memory_budget_mb = None
cfg.train.sft = s
trace = Trace()
started = time.time()
with tempfile.TemporaryDirectory() as tmp:
    m = train_sft.run(cfg.train, Path("data/materialized"), Path("data/admission"), cfg.data.batches,
                      Path("models/base"), Path(tmp) / "out", Path(tmp) / "ckpt", callbacks=[trace])
print("RESULT", json.dumps({"variant": variant, "s": round(time.time() - started, 1), "loss": m["train_loss"],
                            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                            "rss": trace.rows}))
