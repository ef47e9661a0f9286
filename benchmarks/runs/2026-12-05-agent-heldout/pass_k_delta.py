"""pass^k of two models on the same held-out tasks, and its paired-bootstrap difference, from an evaluation's
episodes (τ-bench's unbiased pass^k per task: C(c, k) / C(n, k) over the task's n sampled runs, c of them solved).

    python benchmarks/runs/2026-12-05-agent-heldout/pass_k_delta.py EPISODES.jsonl MODEL_A MODEL_B
"""

import json
import sys
from collections import defaultdict

from clap.agent.report import pass_hat_k_values
from clap.evaluate.stats import paired_bootstrap

path, a, b = sys.argv[1:4]
wins: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
runs: dict[str, set] = defaultdict(set)
for line in open(path, encoding="utf-8"):
    ep = json.loads(line)
    if ep["model"] in (a, b) and ep["run"].startswith("sample"):
        wins[ep["model"]][ep["task_id"]] += int(ep["success"])
        runs[ep["model"]].add(ep["run"])
n = len(runs[a])
assert n == len(runs[b]) > 0, "both models need the same number of sampled runs"
tasks = sorted(set(wins[a]) | set(wins[b]))
for k in range(1, n + 1):
    va = pass_hat_k_values({t: wins[a][t] for t in tasks}, n, k)
    vb = pass_hat_k_values({t: wins[b][t] for t in tasks}, n, k)
    d = paired_bootstrap([va[t] for t in tasks], [vb[t] for t in tasks], n=2000, ci=0.95, seed=17)
    print(f"pass^{k}: {a} {sum(va.values()) / len(tasks):.3f}  {b} {sum(vb.values()) / len(tasks):.3f}  "
          f"{b} − {a} {d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] on {len(tasks)} tasks")
