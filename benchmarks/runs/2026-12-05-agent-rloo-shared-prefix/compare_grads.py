"""On the real model and a real RLOO batch: the shared-prefix log-probabilities and LoRA gradients beside TRL's own,
under the stage's bf16 autocast, with dropout off (eval) and on (train).

    cd <a round's workspace> && PYTHONPATH=<repo>/src python <repo>/benchmarks/runs/2026-12-05-agent-rloo-shared-prefix/compare_grads.py

Runs the `train_agent_rloo` stage (through `benchmarks/bench_rloo_step.py`) until its first update's forward, computes
that forward both ways on the same batch (summed completion log-probability as the objective), prints one DIAG line
per mode and exits: the largest and mean per-token difference, each row's sequence log-probability both ways, the
gradients' cosine and norms.
"""
import sys
import traceback
from pathlib import Path

import torch
from trl import RLOOTrainer

from clap.train.shared_prefix import SharedPrefixRLOOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
ours_fn = SharedPrefixRLOOTrainer._get_per_token_logps_and_entropies


def both(self, model, ids, mask, keep, *a, **k):
    if not torch.is_grad_enabled():
        return ours_fn(self, model, ids, mask, keep, *a, **k)
    params = [p for p in model.parameters() if p.requires_grad]
    completion = mask[:, -keep:]
    for mode in ("eval", "train"):
        try:
            getattr(model, mode)()
            res = {}
            for name, f in (("ours", ours_fn), ("trl", RLOOTrainer._get_per_token_logps_and_entropies)):
                torch.manual_seed(0)
                model.zero_grad()
                logps = f(self, model, ids, mask, keep, compute_entropy=True)[0]
                (logps * completion).sum().backward()
                res[name] = (logps.detach().float(), torch.cat([p.grad.flatten().float() for p in params]))
            d = (res["ours"][0] - res["trl"][0]).abs()[completion.bool()]
            g1, g2 = res["ours"][1], res["trl"][1]
            cos = torch.nn.functional.cosine_similarity(g1, g2, dim=0).item()
            print(f"DIAG {mode}: logp max|d| {d.max():.4f} mean|d| {d.mean():.5f}; "
                  f"seq logp ours {(res['ours'][0] * completion).sum(1).tolist()} "
                  f"trl {(res['trl'][0] * completion).sum(1).tolist()}; "
                  f"grad cos {cos:.4f} norm ours {g1.norm():.4f} trl {g2.norm():.4f}", flush=True)
        except Exception:
            traceback.print_exc()
    sys.exit(0)


SharedPrefixRLOOTrainer._get_per_token_logps_and_entropies = both
import bench_rloo_step  # noqa: E402

bench_rloo_step.one("clap", 1)
