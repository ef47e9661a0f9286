"""The steps of assetize (`clap.data.assets`): units of work sized to the memory budget."""

import pytest

from clap.data import assets


@pytest.mark.parametrize("raw_mb, budget_mb, workers, units", [
    (1, 3000, 2, 1),        # fits one unit: no pool, no cut
    (250, 3000, 1, 1),      # 250 MB × 6 = 1.5 GB ≤ 3 GB on one worker
    (250, 3000, 2, 1),      # two workers at once: 2 × 1.5 GB = 3 GB still fits, one unit
    (300, 3000, 2, 2),      # 2 × 1.8 GB > 3 GB: cut in two, one per worker
    (600, 3000, 2, 4),      # 3 units needed, rounded up to a multiple of the workers (none left to run alone)
    (600, 3000, 1, 2),      # one worker: units follow the budget only
    (5693, 3000, 2, 24),    # 10M demo facts (benchmarks/bench_scale.py)
])
def test_units_are_sized_so_that_the_workers_at_once_fit_the_budget(raw_mb, budget_mb, workers, units):
    assert assets.unit_count(raw_mb << 20, budget_mb, workers) == units
