"""The Optuna sampler of a search (``autotune search --sampler``).

- ``tpe`` (default): Optuna's multivariate TPE (Bergstra et al. 2011; Falkner et al. 2018 for the
  multivariate form), 5 random start-up trials. It reads each trial's loss-tolerance constraint
  (:func:`autotune.optuna_compat.set_constraint`) and avoids infeasible regions (the constrained TPE of Optuna).
  Beyond 1,000 finished trials it reads the best trials and the most recent ones, 1,000 in all
  (:mod:`autotune.tpe_history`), so that its cost per trial stops growing with the study.
- ``gp``: Optuna's Gaussian-process sampler (log expected improvement, constraints handled the same
  way); best for small budgets of mostly numeric knobs.
- ``cmaes``: Optuna's CMA-ES (Hansen 2016) on the numeric knobs; categorical knobs (``precision``,
  a ``batch_size`` given as choices) are sampled independently (at random) by Optuna.
- ``random``: uniform random search (the usual baseline of hyperparameter search).
- ``grid``: every combination of the space once, in random order; every knob must be discrete
  (``choices``, or an integer range).

The sampler is a per-run choice: a resumed study may continue with another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import UsageError

__all__ = ["SAMPLERS", "grid_size", "grid_space", "make_sampler"]

SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid")


def grid_space(resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, list]:
    """Optuna ``GridSampler`` search space of a resolved space (parameter name to values).

    Raises:
        UsageError: A knob is a continuous (float) range.
    """
    from autotune.space import knob_type, param_name

    grid: dict[str, list] = {}
    for name, entry in resolved.items():
        key = param_name(name, entry)
        if "choices" in entry:
            grid[key] = list(entry["choices"])
        elif knob_type(name, entry) is int and "scaling" not in entry:
            grid[key] = list(range(int(entry["low"]), int(entry["high"]) + 1, int(entry.get("step") or 1)))
        else:
            raise UsageError(
                f"--sampler grid: knob {name!r} is a continuous range ({entry['low']}..{entry['high']}); "
                f"give it as choices: [...] in the space, or use another --sampler"
            )
    return grid


def grid_size(resolved: Mapping[str, Mapping[str, Any]]) -> int:
    """Combinations of a discrete space (see :func:`grid_space`)."""
    import math

    return math.prod(len(values) for values in grid_space(resolved).values())


def _grid_class():
    import optuna

    class Grid(optuna.samplers.GridSampler):
        """Optuna's grid sampler without its ``study.stop()`` once the grid is covered: autotune drives
        trials with ask/tell, not ``optimize``, and caps a grid run's trials at what is left of the grid."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

        def before_trial(self, study, trial) -> None:
            # An enqueued trial (the baseline, a confirmation run) takes the grid point of its values,
            # so the grid does not run that point again; every other trial takes an unvisited point
            # (Optuna's own shortcut numbers the first trials' points by trial number, which would
            # repeat the baseline's point and skip another).
            from autotune.optuna_compat import set_trial_system_attr

            fixed = trial.system_attrs.get("fixed_params")
            if "grid_id" in trial.system_attrs:
                return
            if fixed:  # (autotune queues its sampled budget as enqueue_trial({}): no fixed values, a grid point to pick)
                point = tuple(fixed.get(name) for name in self._param_names)
                matches = [i for i, grid in enumerate(self._all_grids) if tuple(grid) == point]
                if matches:
                    set_trial_system_attr(study, trial, "search_space", self._search_space)
                    set_trial_system_attr(study, trial, "grid_id", matches[0])
                    return
                if all(name in fixed for name in self._param_names):
                    return  # a point outside the grid: Optuna takes its fixed values
            targets = self._get_unvisited_grid_ids(study) or list(range(len(self._all_grids)))
            set_trial_system_attr(study, trial, "search_space", self._search_space)
            set_trial_system_attr(study, trial, "grid_id", int(self._rng.rng.choice(targets)))

    return Grid


def make_sampler(name: str, resolved: Mapping[str, Mapping[str, Any]], seed: int):
    """An Optuna sampler by name (see the module docstring).

    Args:
        name: One of :data:`SAMPLERS`.
        resolved: The study's resolved space (for ``grid``).
        seed: Sampler seed.

    Raises:
        UsageError: Unknown name, or ``grid`` over a space with a continuous knob.
    """
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            from autotune.tpe_history import BoundedHistoryTPESampler

            return BoundedHistoryTPESampler(seed=seed, multivariate=True, n_startup_trials=5)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(
                seed=seed, n_startup_trials=5, warn_independent_sampling=False, independent_sampler=optuna.samplers.RandomSampler(seed=seed)
            )
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "grid":
            return _grid_class()(grid_space(resolved), seed=seed)
    raise UsageError(f"unknown --sampler {name!r}; choose one of {list(SAMPLERS)}")
