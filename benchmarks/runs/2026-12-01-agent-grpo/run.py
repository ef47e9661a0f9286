"""Real SmolLM2: agent tasks → agent SFT → agent GRPO (6 steps, rule rewards only), timed."""
import copy
import json
import time
from pathlib import Path

from clap import model
from clap.config import load
from clap.stages import agent_tasks, train_agent_grpo, train_agent_sft

if __name__ == "__main__":
    out = Path("/tmp/agent_real")
    cfg = load()
    base = model.resolve_base(cfg["model"]["base"], Path(cfg["model"]["cache_dir"]))
    times = {}
    t = time.time()
    rep = agent_tasks.run(cfg, Path("data/assets"), cfg["data"]["batches"], out / "agent")
    times["agent_tasks"] = round(time.time() - t, 1)
    print("tasks", rep, flush=True)
    t = time.time()
    m = train_agent_sft.run(cfg, out / "agent", base, out / "agent_sft", out / "ckpt_sft")
    times["train_agent_sft"] = round(time.time() - t, 1)
    print("sft", json.dumps(m), flush=True)
    manifest = json.loads((out / "agent_sft" / "adapter" / "manifest.json").read_text())
    g_cfg = copy.deepcopy(cfg)
    t = time.time()
    m = train_agent_grpo.run(g_cfg, out / "agent", Path("data/assets"), base, out / "agent_grpo", out / "ckpt_grpo",
                             out / "agent_sft" / "adapter", manifest, rm_dir=None)
    times["train_agent_grpo"] = round(time.time() - t, 1)
    print("grpo", json.dumps(m), flush=True)
    (out / "times.json").write_text(json.dumps(times, indent=1))
    print(times)
