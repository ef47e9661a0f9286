"""First-turn draws of the same 12 eval prompts (× N) through generate(do_sample) + xgrammar's processor and through the
engine's loop, base model, bf16, T 0.7: the share of well-formed actions and the tools chosen should agree within noise.

    cd <a checkout with data/agent and models/base> && python <this file> 10
"""
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from bench_agent import generate_sampled_policy  # noqa: E402
from clap.agent import chat  # noqa: E402
from clap.agent.episode import engine_policy  # noqa: E402
from clap.agent.tools import ReportTools  # noqa: E402
from clap.evaluate.generate import Engine  # noqa: E402
from clap.model import resolve_base  # noqa: E402
from clap.stages.agent_tasks import load  # noqa: E402

tools = ReportTools(pd.read_parquet("data/assets/chunks.parquet"))
tasks = load(Path("data/agent"), "eval")[:12]
engine = Engine(resolve_base("smollm2", Path("models/base")), None, None, chat_template=chat.CHAT_TEMPLATE,
                tools=tools.schemas, dtype="auto")
schema = chat.action_schema(tools.schemas)
convs = [chat.start(t["question"]) for t in tasks] * int(sys.argv[1])
for name, policy in (("generate", generate_sampled_policy(engine, False, 80, 16, schema, 0.7)),
                     ("loop", engine_policy(engine, False, 80, 16, schema, 0.7))):
    torch.manual_seed(5)
    t = time.perf_counter()
    gens = policy(convs)
    valid, tools_used = 0, {}
    for g in gens:
        a = chat.parse_action(g.text)
        ok = a is not None and tools.argument_problem(a.tool, a.arguments) is None
        valid += ok
        if a is not None:
            tools_used[a.tool] = tools_used.get(a.tool, 0) + 1
    print(name, f"{time.perf_counter() - t:.1f}s", "n", len(gens), "valid", valid, "parsed", sum(tools_used.values()),
          "mean tokens", round(sum(g.new_tokens for g in gens) / len(gens), 1), dict(sorted(tools_used.items())), flush=True)
