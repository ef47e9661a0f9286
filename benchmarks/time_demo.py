"""Time the demo where users meet it: `clap demo` (all rounds, the drill, the timeline), split per round and stage.

    python benchmarks/time_demo.py                   # runs `clap demo` here, on an idle machine, from a fresh clone
    make demo 2>&1 | python benchmarks/time_demo.py --stamp > demo.log   # time `make demo` itself, set-up included
    python benchmarks/time_demo.py --log demo.log    # the split of a log stamped as above

Every output line is stamped with the seconds since the start; a stage runs from its "Running stage" line to
the next stage, round or summary line. Writes benchmarks/last_demo_timing.json: per round its stages'
seconds and total, the set-up before the first round, and the whole wall time.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

STAMP = re.compile(r"^\[\s*(\d+)s \d\d:\d\d:\d\d\] (.*)$")
ROUND = re.compile(r"─ round (\d+): ")
STAGE = re.compile(r"Running stage '([^']+)'")
AFTER_STAGE = ("Updating lock file", "Use `dvc push`", "evaluate: candidate vs", "gate decision:")


def stamp(lines, out) -> None:
    """Copy `lines` to `out`, each prefixed with the seconds since the first and the clock time."""
    t0 = time.time()
    for line in lines:
        out.write(f"[{time.time() - t0:7.0f}s {time.strftime('%H:%M:%S')}] {line}")
        out.flush()


def split(log: list[str]) -> dict:
    """{"setup_s", "rounds": {k: {"stages": {stage: s}, "total_s"}}, "wall_s"} from a stamped log (the last round's
    total runs to the end of the log: the drill and the timeline)."""
    events: list[tuple[int, str, str]] = []  # (t, kind, name)
    wall = 0
    for line in log:
        m = STAMP.match(line)
        if not m:
            continue
        t, text = int(m.group(1)), m.group(2)
        wall = t
        if r := ROUND.search(text):
            events.append((t, "round", r.group(1)))
        elif s := STAGE.search(text):
            events.append((t, "stage", s.group(1)))
        elif any(a in text for a in AFTER_STAGE):
            events.append((t, "end", ""))
    rounds: dict[str, dict] = {}
    current = None
    for (t, kind, name), (t_next, _, _) in zip(events, events[1:] + [(wall, "end", "")], strict=True):
        if kind == "round":
            current = rounds.setdefault(name, {"start_s": t, "stages": {}})
        elif kind == "stage" and current is not None:
            current["stages"][name] = current["stages"].get(name, 0) + t_next - t
    starts = [r["start_s"] for r in rounds.values()] + [wall]
    for r, end in zip(rounds.values(), starts[1:], strict=True):
        r["total_s"] = end - r.pop("start_s")
    first = starts[0] if rounds else wall
    return {"setup_s": first, "rounds": rounds, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, help="a stamped log to split instead of running the demo")
    ap.add_argument("--stamp", action="store_true", help="only stamp stdin to stdout")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "last_demo_timing.json")
    args = ap.parse_args()
    if args.stamp:
        return stamp(sys.stdin, sys.stdout)
    if args.log is None:
        args.log = Path(__file__).parent / "last_demo.log"
        proc = subprocess.Popen(["clap", "demo"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with args.log.open("w", encoding="utf-8") as fh:
            stamp(proc.stdout, fh)
        if proc.wait() != 0:
            sys.exit(f"clap demo failed (exit {proc.returncode}); its output: {args.log}")
    result = split(args.log.read_text(encoding="utf-8", errors="replace").splitlines())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"set-up before round 1: {result['setup_s']} s")
    for k, r in result["rounds"].items():
        top = sorted(r["stages"].items(), key=lambda kv: -kv[1])[:6]
        print(f"round {k}: {r['total_s']} s — " + ", ".join(f"{s} {v}" for s, v in top))
    print(f"wall: {result['wall_s']} s ({result['wall_s'] / 60:.1f} min) → {args.out}")


if __name__ == "__main__":
    main()
