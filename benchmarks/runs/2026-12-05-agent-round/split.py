"""The agent round's time split from run.sh's stamped log: each stage from its "Running stage" line to the next
(the last to "== done"), less any time the run was paused (SIGSTOP) inside it.

    python benchmarks/runs/2026-12-05-agent-round/split.py WORK/round.log [PAUSES]

PAUSES: a file of stamps, one per line, alternately when the run was stopped and when it was continued (HH:MM:SS).
"""

import re
import sys
from datetime import datetime, timedelta


def clock(text: str) -> datetime:
    return datetime.strptime(text, "%H:%M:%S")


stamps = []
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"(\d\d:\d\d:\d\d) (?:Running stage '([^']+)'|== done)", line)
    if m:
        stamps.append((clock(m.group(1)), m.group(2)))
marks = [clock(x.strip()) for x in open(sys.argv[2], encoding="utf-8") if x.strip()] if len(sys.argv) > 2 else []
pauses = list(zip(marks[::2], marks[1::2]))


def minutes(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 60} min {s % 60:02d} s"


rows = []
for (t, name), (t_next, _) in zip(stamps, stamps[1:]):
    if name:
        paused = sum((max(timedelta(), min(t_next, b) - max(t, a)) for a, b in pauses), timedelta())
        rows.append((name, t_next - t - paused, paused))
total = sum((d for _, d, _ in rows), timedelta())
for name, d, paused in rows:
    print(f"| `{name}` | {minutes(d)} |" + (f" (paused {minutes(paused)} for tests, left out)" if paused else ""))
print(f"| **total** | **{minutes(total)}** |")
