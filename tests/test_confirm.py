"""The confirmation rule: medians, spreads, the loss check, and the tie-break toward the baseline."""

import math

from autotune.confirm import ConfirmGroup, pick


def _g(number, values, losses=(1.0, 1.0, 1.0), distance=2, baseline=False, failed=0):
    return ConfirmGroup(number, tuple(values), tuple(losses), failed, distance, baseline, tuple(range(100 * number, 100 * number + len(values))))


BASE = _g(0, [100, 104, 98], distance=0, baseline=True)


def test_the_best_median_wins_when_the_gap_exceeds_the_spreads():
    far = _g(3, [200, 205, 195], distance=3)
    near = _g(5, [150, 152, 149], distance=1)
    got = pick([BASE, far, near], maximize=True, tolerance=0.05)
    assert got.chosen is far and got.best is far and got.within_noise == ()
    assert far.median == 200 and far.spread == 10 and far.median_run() == 300


def test_within_noise_the_config_closer_to_the_baseline_is_recommended():
    lucky = _g(3, [200, 240, 170], distance=3)  # median 200, spread 70
    plain = _g(5, [190, 192, 188], distance=1)  # median 190: 10 below, within 70
    got = pick([BASE, lucky, plain], maximize=True, tolerance=0.05)
    assert got.best is lucky and got.within_noise == (plain,) and got.chosen is plain


def test_minimised_objective_and_ties_with_the_baseline():
    base = _g(0, [10.0, 10.5, 9.5], distance=0, baseline=True)  # seconds to target
    barely = _g(2, [9.6, 9.9, 9.8], distance=2)
    got = pick([base, barely], maximize=False, tolerance=0.05)
    assert got.best is barely and got.chosen is base  # 0.2 s better, spread 1 s: keep the baseline


def test_failed_runs_and_losses_above_tolerance_are_ineligible():
    crashed = _g(3, [300, 310], failed=1)
    worse = _g(4, [400, 401, 399], losses=(1.2, 1.2, 1.1))
    ok = _g(5, [120, 121, 119])
    got = pick([BASE, crashed, worse, ok], maximize=True, tolerance=0.05)
    assert got.chosen is ok
    reasons = dict((g.number, r) for g, r in got.ineligible)
    assert reasons[3] == "1 confirmation run(s) failed" and reasons[4].startswith("median loss 1.2 above the baseline's 1")


def test_nothing_without_a_confirmed_baseline():
    got = pick([_g(3, [200, 201, 199])], maximize=True, tolerance=0.05)
    assert got.chosen is None and got.ineligible[0][1] == "the baseline has no completed confirmation run"
    assert math.isnan(_g(1, []).median)
