"""The agent round's time split from run.sh's stamped log: each stage from its "Running stage" line to the next
(the last to "== done").   python benchmarks/runs/2026-12-05-agent-round/split.py WORK/round.log"""

import re
import sys
from datetime import datetime, timedelta

rows, stamps = [], []
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"(\d\d:\d\d:\d\d) (?:Running stage '([^']+)'|== done)", line)
    if m:
        stamps.append((datetime.strptime(m.group(1), "%H:%M:%S"), m.group(2)))
for (t, name), (t_next, _) in zip(stamps, stamps[1:]):
    if name:
        rows.append((name, (t_next - t) % timedelta(days=1)))
total = sum((d for _, d in rows), timedelta())
for name, d in rows:
    print(f"| `{name}` | {int(d.total_seconds()) // 60} min {int(d.total_seconds()) % 60:02d} s |")
print(f"| **total** | **{int(total.total_seconds()) // 60} min {int(total.total_seconds()) % 60:02d} s** |")
