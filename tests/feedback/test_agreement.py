"""Agreement and calibration against published and constructed values."""

import numpy as np
import pytest

from clap.feedback.agreement import agreement, calibration, cohen_kappa, fleiss_kappa, krippendorff_alpha

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 coders × 12 units, missing values.
_K = {"A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
      "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
      "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
      "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None]}
UNITS = [list(u) for u in zip(*_K.values())]


@pytest.mark.parametrize("level, published", [("nominal", 0.743), ("interval", 0.849)])
def test_krippendorff_alpha_matches_the_published_example(level, published):
    assert krippendorff_alpha(UNITS, level) == pytest.approx(published, abs=5e-4)


def test_alpha_is_one_for_perfect_agreement_and_undefined_without_variation():
    assert krippendorff_alpha([[1, 1], [5, 5], [3, 3, None]], "interval") == 1.0
    assert krippendorff_alpha([[2, 2], [2, 2]], "interval") is None
    assert krippendorff_alpha([[1, None], [2]], "nominal") is None  # nothing pairable


def test_cohen_kappa_on_a_table_with_known_value():
    # 50 items: both yes 20, A yes B no 5, A no B yes 10, both no 15 → p_o 0.7, p_e 0.5, κ 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)


def test_fleiss_kappa_needs_a_fixed_number_of_raters():
    assert fleiss_kappa([[1, 1, 1], [2, 2, 2], [1, 1, 1]]) == pytest.approx(1.0)
    assert fleiss_kappa([[1, 1], [2, 2, 2]]) is None


def test_agreement_picks_the_statistic_the_design_allows():
    two = agreement([[1, 1], [2, 3], [4, 4]], "interval")
    assert "cohen_kappa" in two and "fleiss_kappa" not in two
    three = agreement([["a", "a", "b"], ["b", "b", "b"]], "nominal")
    assert "fleiss_kappa" in three
    missing = agreement([[1, None], [2, 2]], "interval")
    assert set(missing) == {"units", "raters_per_unit", "krippendorff_alpha"}


def test_simulated_annotators_recover_their_agreement():
    """Rater B copies rater A with probability q, else answers at random: κ ≈ q (for uniform labels)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 4000)
    copy = rng.random(4000) < 0.6
    b = np.where(copy, a, rng.integers(0, 2, 4000))
    assert cohen_kappa(list(a), list(b)) == pytest.approx(0.6, abs=0.04)
    assert krippendorff_alpha([[x, y] for x, y in zip(a, b)], "nominal") == pytest.approx(0.6, abs=0.04)


def test_calibration_reports_rank_correlation_and_agreement_rate():
    out = calibration([0.1, 0.4, 0.6, 0.9], [0.0, 0.25, 0.75, 1.0])
    assert out == {"n": 4, "spearman": pytest.approx(1.0), "agreement_rate": 1.0}
    flipped = calibration([0.9, 0.6, 0.4, 0.1], [0.0, 0.25, 0.75, 1.0])
    assert flipped["spearman"] == pytest.approx(-1.0) and flipped["agreement_rate"] == 0.0
    assert calibration([1.0, 1.0, 1.0], [0.0, 1.0, 0.5])["spearman"] is None  # a constant metric ranks nothing
