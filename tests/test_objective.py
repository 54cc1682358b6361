import math

import pytest

from autotune.errors import UsageError
from autotune.objective import (
    TrialRecord,
    constraint_value,
    directions,
    final_loss,
    pareto_front,
    recommend,
    validate_tolerance,
)


def test_constraint_relative_to_baseline_both_modes():
    assert constraint_value(1.04, 1.0, 0.05) < 0
    assert constraint_value(1.06, 1.0, 0.05) > 0
    assert constraint_value(0.5, 1.0, 0.05) < 0
    # mode max: accuracy may drop by at most 5% of the baseline's
    assert constraint_value(0.86, 0.9, 0.05, "max") < 0
    assert constraint_value(0.85, 0.9, 0.05, "max") > 0
    # a negative baseline (e.g. a log-likelihood) uses its magnitude
    assert constraint_value(-1.96, -2.0, 0.05) < 0
    assert constraint_value(-1.89, -2.0, 0.05) > 0
    assert constraint_value(math.nan, 1.0, 0.05) == math.inf


def test_final_loss_prefers_the_monitor_and_falls_back_to_train_loss():
    assert final_loss({"val_loss": 0.3}, 0.5, "val_loss", False) == (0.3, "val_loss")
    assert final_loss({}, 0.5, "val_loss", False) == (0.5, "train_loss")
    with pytest.raises(UsageError, match=r"metric 'val_acc' \(--monitor\) was not logged.*\['val_loss'\]"):
        final_loss({"val_loss": 0.3}, 0.5, "val_acc", True)


def R(n, sps, loss, complete=True, baseline=False):
    return TrialRecord(n, complete, sps, loss, baseline)


def test_recommend_fastest_feasible_never_infeasible_or_failed():
    records = [R(0, 100, 1.0, baseline=True), R(1, 300, 1.2), R(2, 200, 1.04), R(3, 900, math.nan, complete=False), R(4, 150, 0.9)]
    best = recommend(records, baseline_loss=1.0, tolerance=0.05)
    assert best.number == 2
    assert recommend(records, 1.0, 0.5).number == 1  # a looser tolerance admits trial 1
    assert recommend([R(1, 300, 2.0)], 1.0, 0.05) is None


def test_recommend_tie_goes_to_the_baseline():
    assert recommend([R(1, 100, 1.0), R(0, 100, 1.0, baseline=True)], 1.0, 0.05).number == 0


def test_pareto_front_and_pareto_recommendation():
    records = [R(0, 100, 1.0, baseline=True), R(1, 200, 1.5), R(2, 150, 0.8), R(3, 120, 0.9), R(4, 90, 2.0)]
    assert {r.number for r in pareto_front(records)} == {1, 2}
    assert recommend(records, 1.0, 0.05, "pareto").number == 2
    assert directions("pareto", "max") == ["maximize", "maximize"]
    assert directions("throughput") == ["maximize"]
    with pytest.raises(UsageError, match="unknown objective 'speed'"):
        directions("speed")


@pytest.mark.parametrize("value", [-0.1, 1.0, "abc"])
def test_tolerance_out_of_range(value):
    with pytest.raises(UsageError, match="--loss-tolerance"):
        validate_tolerance(value)
