import pytest


@pytest.mark.parametrize("rows, batch, accumulation, epochs, max_steps, want", [
    (143, 4, 2, 2, -1, (36, 18)),   # steps from epochs: ceil(143 / 8) = 18 a pass
    (143, 4, 2, 1.5, -1, (27, 18)),
    (143, 4, 2, 2, 20, (20, 18)),   # max_steps caps it
    (3, 4, 2, 1, -1, (1, 1)),       # fewer rows than a step still trains one step
])
def test_planned_steps(rows, batch, accumulation, epochs, max_steps, want):
    from clap.train.common import planned_steps

    assert planned_steps(rows, batch, accumulation, epochs, max_steps) == want
