"""--sampler: every sampler asks valid configs of a resolved space; grid enumerates it exactly."""

import itertools

import optuna
import pytest

from autotune.config import TrialConfig
from autotune.errors import UsageError
from autotune.samplers import SAMPLERS, grid_space, make_sampler
from autotune.space import suggest_config

DISCRETE = {
    "batch_size": {"choices": [16, 32, 64]},
    "precision": {"choices": ["32-true", "bf16-mixed"]},
    "accumulate_grad_batches": {"low": 1, "high": 2, "log": False},
}
MIXED = {**DISCRETE, "lr": {"low": 1e-4, "high": 1e-2, "log": True}}
BASE = TrialConfig(batch_size=32, lr=1e-3)


@pytest.mark.parametrize("name", [s for s in SAMPLERS if s != "grid"])
def test_each_sampler_suggests_configs_inside_the_space(name):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler(name, MIXED, seed=0))
    for i in range(8):
        trial = study.ask()
        config = suggest_config(trial, MIXED, BASE)
        assert config.batch_size in (16, 32, 64) and config.precision in ("32-true", "bf16-mixed")
        assert 1e-4 <= config.lr <= 1e-2 and config.accumulate_grad_batches in (1, 2)
        study.tell(trial, float(config.batch_size * config.accumulate_grad_batches + i))


def test_grid_runs_every_combination_once():
    study = optuna.create_study(sampler=make_sampler("grid", DISCRETE, seed=0))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        c = suggest_config(trial, DISCRETE, BASE)
        seen.add((c.batch_size, c.precision, c.accumulate_grad_batches))
        study.tell(trial, 1.0)
    assert seen == set(itertools.product([16, 32, 64], ["32-true", "bf16-mixed"], [1, 2]))
    assert grid_space({"lr": {"choices": [1.0, 2.0], "scaling": "sqrt"}}) == {"lr_multiplier": [1.0, 2.0]}


def test_grid_refuses_a_continuous_knob_and_unknown_names_are_errors():
    with pytest.raises(UsageError, match=r"--sampler grid: knob 'lr' is a continuous range \(0.0001..0.01\); give it as choices"):
        make_sampler("grid", MIXED, seed=0)
    with pytest.raises(UsageError, match=r"unknown --sampler 'bayes'; choose one of \['tpe', 'gp', 'cmaes', 'random', 'grid'\]"):
        make_sampler("bayes", MIXED, seed=0)


def test_grid_counts_the_enqueued_baseline_as_its_point():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=make_sampler("grid", DISCRETE, seed=3))
    study.enqueue_trial({"batch_size": 32, "precision": "32-true", "accumulate_grad_batches": 1})  # the baseline
    for _ in range(11):
        study.enqueue_trial({})  # autotune's queued budget: no fixed values
    seen = []
    for _ in range(12):
        trial = study.ask()
        c = suggest_config(trial, DISCRETE, BASE)
        seen.append((c.batch_size, c.precision, c.accumulate_grad_batches))
        study.tell(trial, 1.0)
    assert len(set(seen)) == 12 and seen[0] == (32, "32-true", 1)
