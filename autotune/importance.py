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
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ImportanceInputs", "importance_inputs", "param_importances"]


@dataclass(frozen=True)
class ImportanceInputs:
    """What PED-ANOVA is given, for :func:`optuna.importance.get_param_importances` or
    :func:`optuna.visualization.plot_param_importances`.

    Attributes:
        study: An in-memory study holding :attr:`trials` only (their numbers renumbered from 0).
        trials: The full-budget trials with a finite target, as stored in the original study.
        params: The parameters that differ among :attr:`trials`.
        target: The figure to rank by, negated when higher is better (PED-ANOVA ranks parameters by
            how they reach *low* target values).
    """

    study: Any
    trials: list
    params: list[str]
    target: Callable[[Any], float]


def importance_inputs(trials: Sequence[Any], target: Callable[[Any], float], maximize: bool, directions: Sequence[Any]) -> ImportanceInputs:
    """The inputs of PED-ANOVA over the full-budget trials among ``trials``.

    Args:
        trials: Frozen trials of one study, in any state.
        target: The figure of a trial to rank by (e.g. its samples/s user attribute or ``values[0]``).
        maximize: Higher ``target`` is better.
        directions: The study's directions (the in-memory copy takes them).
    """
    import optuna

    from autotune.study.records import full_budget_trials

    chosen = [t for t in full_budget_trials(trials) if math.isfinite(target(t))]
    names = [name for name in (chosen[0].params if chosen else {}) if all(name in t.params for t in chosen)]
    varied = [name for name in names if len({repr(t.params[name]) for t in chosen}) > 1]
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line on the CLI's output
    try:
        study = optuna.create_study(directions=list(directions))
    finally:
        optuna.logging.set_verbosity(verbosity)
    study.add_trials(chosen)
    sign = -1.0 if maximize else 1.0
    # the copy's trials keep their user attributes and values: the target reads them as from the original
    return ImportanceInputs(study=study, trials=chosen, params=varied, target=lambda t: sign * target(t))


def param_importances(trials: Sequence[Any], target: Callable[[Any], float], maximize: bool, directions: Sequence[Any]) -> dict[str, float]:
    """PED-ANOVA importances (each >= 0, largest first) of the parameters that vary among the
    full-budget trials of ``trials``; ``{}`` with fewer than 2 such trials or none varied.

    Args:
        trials, target, maximize, directions: As for :func:`importance_inputs`.
    """
    import optuna

    inputs = importance_inputs(trials, target, maximize, directions)
    if len(inputs.trials) < 2 or not inputs.params:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA warns whenever it is given a target
        return optuna.importance.get_param_importances(
            inputs.study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), params=inputs.params, target=inputs.target
        )
