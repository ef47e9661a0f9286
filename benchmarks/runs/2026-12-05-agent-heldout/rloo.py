"""Agent RLOO on the real SmolLM2, from the joint agent SFT adapter of this folder's first run, then the held-out
evaluation of base, agent SFT and agent RLOO (greedy; the answer store reuses base's and SFT's turns).

    python benchmarks/runs/2026-12-05-agent-heldout/rloo.py FROM OUT [-S key=value ...]

FROM is the first run's clone (its data/assets, data/agent, models/base, models/agent_sft, data/answer_store);
OUT a new folder (an RLOO adapter already in OUT/agent_rloo is evaluated, not trained again). Run from a checkout
of the commit to measure, with that checkout's src on PYTHONPATH. The reward model is left out (none was trained in
FROM), so the rewards are the rules' process credit and format. Adapters are checked against their own manifests (no
dvc.lock pins them here).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from omegaconf import OmegaConf

from clap import model
from clap.agent.chat import engine_rendering
from clap.agent.tools import ReportTools
from clap.config import load, typed
from clap.evaluate.engines import decoding
from clap.evaluate.generate import Engine
from clap.stages import evaluate_agent, train_agent_rloo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("-S", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    cfg = load()
    cfg = typed(OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(cfg.as_yaml_dict()),
                                                       OmegaConf.from_dotlist(args.overrides))), "params.yaml with -S")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "answer_store"
    if not store.exists():
        shutil.copytree(args.source / "data/answer_store", store)
    base = args.source / "models/base"
    sft = args.source / "models/agent_sft/adapter"
    manifest = json.loads((sft / "manifest.json").read_text())
    times = {}
    rloo = out / "agent_rloo/adapter"
    if not (rloo / "manifest.json").exists():
        t = time.time()
        m = train_agent_rloo.run(cfg.agent, args.source / "data/agent", args.source / "data/assets", base,
                                 out / "agent_rloo", out / "ckpt", sft, manifest, train=cfg.train,
                                 batches=cfg.data.batches)
        times["train_agent_rloo_s"] = round(time.time() - t, 1)
        print(json.dumps({k: m[k] for k in ("status", "steps", "states", "train_loss", "reward_model")}))
    others = [("agent_sft", sft, manifest), ("agent_rloo", rloo, json.loads((rloo / "manifest.json").read_text()))]
    rendering = engine_rendering(model.load_tokenizer(base), ReportTools.tool_schemas())
    engine = Engine(base, others=others, answer_store=store if cfg.generate.reuse_answers else None,
                    reuse_prefixes=cfg.generate.prefix_cache_tokens, **rendering, **decoding(cfg.generate))
    t = time.time()
    result = evaluate_agent.run(cfg.agent, args.source / "data/agent", args.source / "data/assets", engine,
                                [("base", False), ("agent_sft", "agent_sft"), ("agent_rloo", "agent_rloo")],
                                out / "eval_agent", out / "agent.json", evaluate=cfg.evaluate,
                                batches=cfg.data.batches, constrained=cfg.generate.constrained)
    times["evaluate_agent_s"] = round(time.time() - t, 1)
    (out / "times.json").write_text(json.dumps(times))
    d = result["deltas_chain"]["agent_rloo-agent_sft"]["success"]
    print(f"RLOO − SFT task success {d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] on {d['n']} tasks; {times}")


if __name__ == "__main__":
    main()
