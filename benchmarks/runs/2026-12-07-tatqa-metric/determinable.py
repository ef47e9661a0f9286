"""How many held-out facts a page's text alone decides the unit of, and the candidate's value accuracy on each group:
- an amount in a currency whose chunk declares no scale (`scales_declared` empty): the annotators read the scale
  from the PDF, and the grammar offers every scale;
- the gold unit not among those the grammar offers (the annotators' scale disagrees with the page's);
- the rest: the page writes the unit beside the number, declares the scale, or the number has none.

    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-metric/determinable.py <project>...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_tatqa import by_unit_group  # noqa: E402


def main(projects: list[str]) -> int:
    for project in projects:
        print(project, {g: f"{v['n']} facts, candidate value {v['candidate_value']:.2f}" if v["n"] else "0 facts"
                        for g, v in by_unit_group(Path(project)).items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
