"""Real SmolLM2: evaluate_agent on the held-out agent tasks — base, agent SFT, agent SFT→GRPO (committed config)."""
import json
import time
from pathlib import Path

from clap import model
from clap.agent.chat import CHAT_TEMPLATE
from clap.agent.tools import ReportTools
from clap.config import load
from clap.evaluate.generate import Engine
from clap.evaluate.summary import agent_table
from clap.stages import evaluate_agent

if __name__ == "__main__":
    from rich.console import Console

    out = Path("/tmp/agent_real")
    cfg = load()
    base = model.resolve_base(cfg["model"]["base"], Path(cfg["model"]["cache_dir"]))
    others = [(name, out / name / "adapter", json.loads((out / name / "adapter" / "manifest.json").read_text()))
              for name in ("agent_sft", "agent_grpo")]
    engine = Engine(base, others=others, chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas())
    t = time.time()
    result = evaluate_agent.run(cfg, out / "agent", Path("data/assets"), engine,
                                [("base", False), ("agent_sft", "agent_sft"), ("agent_grpo", "agent_grpo")],
                                out / "eval_agent", out / "agent.json")
    print("evaluate_agent s", round(time.time() - t, 1))
    Console(width=200).print(agent_table(result))
