"""The bounded-history TPE: Optuna's TPE below the bound, the same good group above it."""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe.sampler import _split_trials, default_gamma
from optuna.trial import TrialState, create_trial

from autotune.samplers import make_sampler
from autotune.tpe_history import BoundedHistoryTPESampler, _StudyView

optuna.logging.set_verbosity(optuna.logging.WARNING)

DISTS = {"x": FloatDistribution(-5, 5), "b": IntDistribution(8, 512, log=True), "p": CategoricalDistribution(["32-true", "bf16-mixed"])}


def _study(n: int, seed: int = 0, directions=("maximize",)) -> optuna.Study:
    """A study of ``n`` finished trials: completed ones (some infeasible under a loss constraint) and pruned ones."""
    rng = random.Random(seed)
    study = optuna.create_study(directions=list(directions))
    trials = []
    for i in range(n):
        params = {"x": rng.uniform(-5, 5), "b": rng.choice([8, 16, 64, 256, 512]), "p": rng.choice(["32-true", "bf16-mixed"])}
        constraint = rng.uniform(-1, 1)
        if i % 7 == 3 and len(directions) == 1:  # Optuna prunes single-objective trials only
            trials.append(
                create_trial(
                    params=params, distributions=DISTS, state=TrialState.PRUNED, intermediate_values={rng.randint(1, 4): rng.random()}
                )
            )
            continue
        values = [-((params["x"] - 1) ** 2) + rng.gauss(0, 0.1) for _ in directions]
        if len(directions) == 2:
            values[1] = rng.random()
        trials.append(create_trial(params=params, distributions=DISTS, values=values, system_attrs={"constraints": [constraint]}))
    study.add_trials(trials)
    return study


def _good_group(study) -> list[int]:
    trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=True)
    below, _ = _split_trials(study, trials, default_gamma(len(trials)))
    return [t.number for t in below]


@pytest.mark.parametrize("n", [400, 1500])
def test_the_history_keeps_tpes_good_group_and_the_most_recent_trials(n):
    study = _study(n)
    sampler = BoundedHistoryTPESampler(seed=0, multivariate=True, history=260, elites=25)
    history = sampler.history(study)
    assert len(history) == 260
    assert [t.number for t in history] == sorted(t.number for t in history)
    view = _StudyView(study, history)
    assert _good_group(view) == _good_group(study)  # the same trials shape l(x)
    numbers = {t.number for t in history}
    assert set(range(n - 100, n)) <= numbers  # the most recent fill the rest
    # the elites: the best feasible completed trials, whatever their age
    feasible = [t for t in study.trials if t.state == TrialState.COMPLETE and t.constraints["0"] <= 0]
    assert {t.number for t in sorted(feasible, key=lambda t: -t.value)[:25]} <= numbers


def test_new_trials_update_the_elites_without_rereading_the_study():
    study = _study(400)
    sampler = BoundedHistoryTPESampler(seed=0, multivariate=True, history=260, elites=25)
    sampler.history(study)
    best = create_trial(params={"x": 1.0, "b": 8, "p": "32-true"}, distributions=DISTS, values=[10.0], system_attrs={"constraints": [-1.0]})
    study.add_trial(best)
    study._thread_local.cached_all_trials = None  # as Optuna's ask() does before sampling
    history = sampler.history(study)
    assert history[-1].number == 400 and history[-1].value == 10.0
    assert _good_group(_StudyView(study, history)) == _good_group(study)


def test_below_the_bound_it_samples_what_optunas_tpe_samples():
    study_a, study_b = _study(60, seed=1), _study(60, seed=1)
    ours = BoundedHistoryTPESampler(seed=3, multivariate=True, n_startup_trials=5)
    theirs = optuna.samplers.TPESampler(seed=3, multivariate=True, n_startup_trials=5)
    for study, sampler in ((study_a, ours), (study_b, theirs)):
        study.sampler = sampler
    for _ in range(3):
        a, b = study_a.ask(DISTS), study_b.ask(DISTS)
        assert a.params == b.params
        study_a.tell(a, 0.0)
        study_b.tell(b, 0.0)


def test_above_the_bound_it_samples_in_the_space_and_near_the_good_region():
    study = _study(1500, seed=2)
    study.sampler = make_sampler("tpe", {}, 0)
    assert isinstance(study.sampler, BoundedHistoryTPESampler)
    xs = []
    for _ in range(20):
        trial = study.ask(DISTS)
        assert DISTS["b"].low <= trial.params["b"] <= DISTS["b"].high
        xs.append(trial.params["x"])
        study.tell(trial, state=TrialState.FAIL)
    assert sorted(xs)[10] == pytest.approx(1.0, abs=1.5)  # the optimum is x = 1: TPE's median draw near it


def test_multi_objective_keeps_the_pareto_front():
    study = _study(600, seed=4, directions=("maximize", "minimize"))
    sampler = BoundedHistoryTPESampler(seed=0, multivariate=True, history=260, elites=25)
    numbers = {t.number for t in sampler.history(study)}
    feasible = [t for t in study.trials if t.state == TrialState.COMPLETE and t.constraints["0"] <= 0]
    front = {
        t.number
        for t in feasible
        if not any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1] and o.values != t.values for o in feasible)
    }
    assert front and front <= numbers
    study.sampler = sampler
    assert math.isfinite(study.ask(DISTS).params["x"])


def test_a_history_not_larger_than_its_elites_is_refused():
    with pytest.raises(ValueError, match="history=200 must be at least 10 x elites=25"):
        BoundedHistoryTPESampler(history=200)
