"""Parameter importances of a study: one computation for ``autotune report``'s figure and for
``autotune dashboard``'s importance panel, so that the two agree.

Both use Optuna's PED-ANOVA (:class:`optuna.importance.PedAnovaImportanceEvaluator`, Watanabe et
al. 2023, with its defaults: how differently each parameter is distributed in the top 10% of the
trials than in all of them), as optuna-dashboard does, but over the full-budget trials only
(:func:`autotune.study.full_budget_trials`): a short stage-1 screening run trains fewer samples at
the baseline's ``lr``, a confirmation run repeats a config at another budget, and a duplicate copies
another trial's figures, so with them a fixed ``lr`` would look important because the fast screening
runs share it. Parameters that take one value in every such trial are left out (PED-ANOVA gives a
constant parameter a spurious importance when its top group is one trial).

Above :data:`MAX_TRIALS` full-budget trials, PED-ANOVA is given a random sample of them (seed
:data:`autotune.figure_sample.SAMPLE_SEED`, the same for the report and the dashboard): its top 10%
is then still 200 trials, and Optuna's importance figure, which deep-copies every trial of the study it
is given several times, stays quick. The in-memory study holds light copies: params and the target.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_TRIALS", "ImportanceInputs", "importance_figure", "importance_inputs", "param_importances"]

#: Most full-budget trials PED-ANOVA is given (a random sample of a larger study).
MAX_TRIALS = 2000


@dataclass(frozen=True)
class ImportanceInputs:
    """What PED-ANOVA is given, for :func:`optuna.importance.get_param_importances` or
    :func:`optuna.visualization.plot_param_importances`.

    Attributes:
        study: An in-memory single-objective study of light copies of :attr:`trials` (their numbers
            renumbered from 0): their params, and as their value the figure to rank by.
        trials: The full-budget trials with a finite target, as stored in the original study (a
            random sample of :data:`MAX_TRIALS` of them when there are more).
        params: The parameters that differ among :attr:`trials`.
        target: The figure to rank by of a copy in :attr:`study`, negated when higher is better
            (PED-ANOVA ranks parameters by how they reach *low* target values).
        total: How many full-budget trials with a finite target there are (:attr:`trials` is a sample when fewer).
        seed: Seed of the sample.
    """

    study: Any
    trials: list
    params: list[str]
    target: Callable[[Any], float]
    total: int = 0
    seed: int = 0


def importance_inputs(trials: Sequence[Any], target: Callable[[Any], float], maximize: bool) -> ImportanceInputs:
    """The inputs of PED-ANOVA over the full-budget trials among ``trials`` (a sample of
    :data:`MAX_TRIALS` of them when there are more).

    Args:
        trials: Frozen trials of one study, in any state.
        target: The figure of a trial to rank by (e.g. its samples/s user attribute or ``values[0]``).
        maximize: Higher ``target`` is better.
    """
    import random

    import optuna

    from autotune.figure_sample import SAMPLE_SEED
    from autotune.study.records import full_budget_trials

    chosen = [t for t in full_budget_trials(trials) if math.isfinite(target(t))]
    total = len(chosen)
    if total > MAX_TRIALS:
        chosen = sorted(random.Random(SAMPLE_SEED).sample(chosen, MAX_TRIALS), key=lambda t: t.number)
    names = [name for name in (chosen[0].params if chosen else {}) if all(name in t.params for t in chosen)]
    varied = [name for name in names if len({repr(t.params[name]) for t in chosen}) > 1]
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line on the CLI's output
    try:
        study = optuna.create_study(direction="minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    sign = -1.0 if maximize else 1.0
    # light copies (Optuna's importance figure deep-copies every trial of its study several times): the
    # params, and the target, negated when higher is better, as the one value
    study.add_trials(
        [
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, values=[sign * target(t)], state=t.state)
            for t in chosen
        ]
    )
    return ImportanceInputs(study=study, trials=chosen, params=varied, target=lambda t: t.values[0], total=total, seed=SAMPLE_SEED)


def param_importances(trials: Sequence[Any], target: Callable[[Any], float], maximize: bool) -> dict[str, float]:
    """PED-ANOVA importances (each >= 0, largest first) of the parameters that vary among the
    full-budget trials of ``trials``; ``{}`` with fewer than 2 such trials or none varied.

    Args:
        trials, target, maximize: As for :func:`importance_inputs`.
    """
    inputs = importance_inputs(trials, target, maximize)
    if len(inputs.trials) < 2 or not inputs.params:
        return {}
    return _ped_anova(inputs)


def _ped_anova(inputs: ImportanceInputs) -> dict[str, float]:
    """PED-ANOVA importances over ``inputs`` (largest first, summing to 1)."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA warns whenever it is given a target
        return optuna.importance.get_param_importances(
            inputs.study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), params=inputs.params, target=inputs.target
        )


def importance_figure(inputs: ImportanceInputs, target_name: str) -> Any:
    """Optuna's importance figure (:func:`optuna.visualization.plot_param_importances`) of PED-ANOVA over ``inputs``.

    Optuna's figure names each parameter's distribution in its hover text by deep-copying every trial
    of the study it is given, once per parameter (~1 s per parameter for 10,000 trials). So it is
    given the importances computed beforehand (:func:`param_importances`'s computation, through an
    ``optuna.importance.BaseImportanceEvaluator`` that returns them) and a study of one trial that
    holds the parameters' distributions.

    Args:
        inputs: What :func:`importance_inputs` returned (at least one trial, one parameter).
        target_name: The figure's name of the target ("samples/s").

    Raises:
        ValueError, RuntimeError, ZeroDivisionError: PED-ANOVA could not rank the parameters (as Optuna raises them).
    """
    import optuna

    importances = _ped_anova(inputs)

    class _Computed(optuna.importance.BaseImportanceEvaluator):
        def evaluate(self, study, params=None, *, target=None) -> dict[str, float]:
            return dict(importances)

    params: dict[str, Any] = {}
    distributions: dict[str, Any] = {}
    for t in inputs.trials:
        for name in inputs.params:
            if name in t.distributions and name not in distributions:
                params[name], distributions[name] = t.params[name], t.distributions[name]
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        one = optuna.create_study(direction="minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    one.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=0.0))
    return optuna.visualization.plot_param_importances(one, evaluator=_Computed(), params=inputs.params, target_name=target_name)
