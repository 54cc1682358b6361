"""Pruning decisions on synthetic intermediate values (Optuna's pruners over a shadow study)."""

import random

import pytest

from autotune.errors import UsageError
from autotune.pruning import ShadowStudy, make_pruner, milestone_steps, prune_decision

DONE = [{256: v, 512: v + 5} for v in (100.0, 110.0, 120.0, 130.0, 140.0)]


def test_median_prunes_a_trial_below_the_median_at_the_same_milestone():
    pruner = make_pruner("median", startup=5)
    assert prune_decision(pruner, "maximize", DONE, {256: 60.0})
    assert not prune_decision(pruner, "maximize", DONE, {256: 125.0})
    assert not prune_decision(pruner, "maximize", DONE[:4], {256: 60.0})  # fewer completed trials than the startup
    assert prune_decision(pruner, "minimize", DONE, {256: 300.0})  # e.g. a loss under time-to-quality


def test_percentile_prunes_only_the_clearly_bad():
    pruner = make_pruner("percentile", startup=5)
    assert prune_decision(pruner, "maximize", DONE, {256: 60.0})
    assert not prune_decision(pruner, "maximize", DONE, {256: 115.0})  # below the median, above the 25th percentile


@pytest.mark.parametrize("name", ["median", "percentile"])
def test_the_incremental_shadow_decides_as_a_fresh_one(name):
    """Grown one completed trial at a time, with decisions in between (each leaves a failed running
    trial behind), the shadow decides exactly as one built afresh from the same curves."""
    rng = random.Random(0)
    pruner = make_pruner(name, startup=5)
    shadow = ShadowStudy(pruner, "maximize")
    curves: list[dict[int, float] | None] = []
    decisions = 0
    for number in range(60):
        curve = None if number % 7 == 3 else {256: rng.uniform(50, 150), 512: rng.uniform(50, 150)}  # infeasible: None
        curves.append(curve)
        shadow.add(number, curve)
        shadow.add(number, {256: 1e9})  # offered again (the watcher reads the study again): ignored
        assert shadow.seen(number)
        for value in (60.0, 95.0, 105.0, 140.0):
            for step in (256, 512):
                current = {step: value}
                fresh = prune_decision(pruner, "maximize", [c for c in curves if c], current)
                assert shadow.decide(current) == fresh, (number, value, step)
                decisions += fresh
    assert decisions > 0  # the comparison saw both outcomes
    assert not shadow.seen(60) and not shadow.decide({})


def test_none_and_bad_names():
    assert make_pruner("none") is None and not prune_decision(None, "maximize", DONE, {256: 1.0})
    with pytest.raises(UsageError, match=r"unknown --pruner 'hyperband'; choose one of \['median', 'percentile', 'none'\]"):
        make_pruner("hyperband")
    with pytest.raises(UsageError, match="--pruner-startup must be >= 1"):
        make_pruner("median", startup=0)
    assert milestone_steps(1000) == [250, 500, 750]


def test_only_objectives_ordered_by_partial_throughput_are_pruned():
    from autotune.pruning import intermediate_metric

    assert intermediate_metric("throughput") == intermediate_metric("pareto") == ("samples_per_sec", "maximize")
    assert intermediate_metric("time-to-quality") is None and intermediate_metric("goodput") is None
