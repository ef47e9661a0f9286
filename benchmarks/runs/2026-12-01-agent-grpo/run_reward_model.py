"""Real SmolLM2: agent pairs (greedy draws of the agent SFT adapter) → reward model, checked against the rule rewards."""
import copy
import json
import time
from pathlib import Path

from clap import model
from clap.agent.chat import CHAT_TEMPLATE
from clap.agent.tools import ReportTools
from clap.config import load
from clap.evaluate.generate import Engine
from clap.stages import agent_pairs, train_agent_rm

if __name__ == "__main__":
    out = Path("/tmp/agent_real")
    cfg = load()
    cfg = copy.deepcopy(cfg)
    cfg["agent"]["dpo"]["mine_samples"] = 0  # greedy draws only: half the mining time of the committed 1
    base = model.resolve_base(cfg["model"]["base"], Path(cfg["model"]["cache_dir"]))
    adapter = out / "agent_sft" / "adapter"
    engine = Engine(base, others=[("agent_sft", adapter, json.loads((adapter / "manifest.json").read_text()))],
                    chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas())
    tools = ReportTools.over_batches(Path("data/assets"), cfg["data"]["batches"])
    times = {}
    t = time.time()
    rep = agent_pairs.run(cfg, out / "agent", engine, tools, out / "agent_pairs")
    times["agent_pairs"] = round(time.time() - t, 1)
    print("pairs", json.dumps(rep), flush=True)
    del engine
    t = time.time()
    m = train_agent_rm.run(cfg, out / "agent_pairs", base, out / "agent_rm", out / "ckpt_rm")
    times["train_agent_rm"] = round(time.time() - t, 1)
    print("rm", json.dumps(m), flush=True)
    (out / "times_rm.json").write_text(json.dumps(times, indent=1))
    print(times)
