"""Run tiny SFT under `accelerate launch`; each rank writes the hash of its trained LoRA weights."""

import hashlib
import json
import os
import sys
from pathlib import Path

from transformers import TrainerCallback

from clap.config import compose, typed
from clap.stages import train_sft


class RankHash(TrainerCallback):
    def __init__(self, out):
        self.out = Path(out)

    def on_train_end(self, args, state, control, model=None, **kw):
        h = hashlib.sha256()
        for name, p in sorted(model.named_parameters()):
            if "lora_" in name:
                h.update(name.encode())
                h.update(p.detach().float().cpu().numpy().tobytes())
        rank = int(os.environ.get("RANK", "0"))
        (self.out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world": int(os.environ.get("WORLD_SIZE", 1)),
                                                               "lora_sha256": h.hexdigest(), "step": state.global_step}))


if __name__ == "__main__":
    loop, tiny, out = map(Path, sys.argv[1:4])
    out.mkdir(parents=True, exist_ok=True)
    cfg = typed(compose())
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=3, logging_steps=1, save_steps=100, per_device_batch_size=2,
                               gradient_accumulation=1))
    train_sft.run(cfg.train, loop / "materialized", loop / "admission", ["b1"], tiny, out / "sft", out / "ckpt",
                  callbacks=[RankHash(out)])
