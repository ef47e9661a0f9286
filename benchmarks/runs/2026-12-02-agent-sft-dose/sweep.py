"""Agent SFT sweep on the real SmolLM2 (run from a clone's root after `dvc repro agent_tasks`):
train agent SFT at each setting, then evaluate base + every setting on the held-out tasks in one engine
(committed agent.evaluate: 12 tasks, greedy + 2 sampled runs). Usage: python sweep.py OUT NAME=LR:EPOCHS ..."""
import copy
import json
import sys
import time
from pathlib import Path

from clap import model
from clap.agent.chat import CHAT_TEMPLATE
from clap.agent.tools import ReportTools
from clap.config import load
from clap.evaluate.generate import Engine
from clap.evaluate.summary import agent_table
from clap.stages import evaluate_agent, train_agent_sft

if __name__ == "__main__":
    from rich.console import Console

    out = Path(sys.argv[1])
    points = [(a.split("=")[0], *a.split("=")[1].split(":")) for a in sys.argv[2:]]
    cfg = load()
    base = model.resolve_base(cfg["model"]["base"], Path(cfg["model"]["cache_dir"]))
    times, others = {}, []
    for name, lr, epochs in points:
        c = copy.deepcopy(cfg)
        c["agent"]["sft"]["learning_rate"] = float(lr)
        c["agent"]["sft"]["epochs"] = float(epochs)
        t = time.time()
        if not (out / name / "adapter" / "manifest.json").exists():
            m = train_agent_sft.run(c, Path("data/agent"), base, out / name, out / f"ckpt_{name}")
            print(name, json.dumps(m), flush=True)
            (out / f"train_{name}.json").write_text(json.dumps(m, indent=1))
        times[f"sft_{name}"] = round(time.time() - t, 1)
        others.append((name, out / name / "adapter", json.loads((out / name / "adapter" / "manifest.json").read_text())))
    engine = Engine(base, others=others, chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas(),
                    dtype=cfg["generate"]["dtype"])
    t = time.time()
    result = evaluate_agent.run(cfg, Path("data/agent"), Path("data/assets"), engine,
                                [("base", False)] + [(n, n) for n, _, _ in points], out / "eval_agent", out / "agent.json")
    times["evaluate_agent"] = round(time.time() - t, 1)
    (out / "times.json").write_text(json.dumps(times, indent=1))
    print(times)
    Console(width=220).print(agent_table(result))
