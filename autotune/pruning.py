"""Multi-fidelity pruning in autotune's own layer, with Optuna's pruners deciding.

While a trial trains, its rank 0 writes a progress preview (samples seen, samples/s after the
warm-up, the recent training loss); the search process reads it and, at sample *milestones*
(:data:`MILESTONES` of the budget), records an intermediate value on the trial
(``intermediate``: samples/s so far, after the warm-up) and asks the pruner whether the trial is
clearly slower than the completed *feasible* ones at the same milestone (an infeasible trial is
never recommended, so being slower than it proves nothing). ``throughput`` and ``pareto`` studies
are pruned (in both, only the fastest feasible trial is recommended); ``time-to-quality`` and
``goodput`` are not (see :func:`intermediate_metric`). A pruned trial's
process group is stopped and the trial is stored as PRUNED (never recommended).

Optuna's ``Trial.report`` does not work for multi-objective studies (``--objective pareto``), and a
multi-device trial reports from its ranks, not from the study's process. So the decision is made
here, in the search process, on a *shadow* in-memory single-objective Optuna study holding the
completed trials' intermediate values and this trial's (:class:`ShadowStudy`, grown by one trial
per completed trial, so that a decision on a study of 10,000 trials neither copies nor re-reads
them all; :func:`prune_decision` for a one-off list); the pruner is one of Optuna's (``--pruner``):

- ``median`` (default): Optuna's ``MedianPruner``: pruned when worse than the median of the
  completed trials at the same milestone (Golovin et al. 2017, Google Vizier's median stopping rule);
- ``percentile``: Optuna's ``PercentilePruner`` keeping the best 75% (prunes only the clearly bad quarter);
- ``none``: no pruning.

Both wait for ``--pruner-startup`` completed trials (default 5) before pruning anything.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.errors import UsageError, did_you_mean

__all__ = ["MILESTONES", "PRUNERS", "ShadowStudy", "intermediate_metric", "make_pruner", "milestone_steps", "prune_decision"]

PRUNERS = ("median", "percentile", "none")
#: Fractions of the sample budget at which a running trial is judged.
MILESTONES = (0.25, 0.5, 0.75)


def make_pruner(name: str, startup: int = 5):
    """An Optuna pruner by name, or ``None`` for ``"none"``.

    Raises:
        UsageError: Unknown name, or ``startup < 1``.
    """
    import optuna

    if startup < 1:
        raise UsageError(f"--pruner-startup must be >= 1 (completed trials before any pruning), got {startup}")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0)
    if name == "percentile":
        return optuna.pruners.PercentilePruner(75.0, n_startup_trials=startup, n_warmup_steps=0)  # keeps the top 75%
    if name == "none":
        return None
    raise UsageError(f"unknown --pruner {name!r}; choose one of {list(PRUNERS)}{did_you_mean(name, PRUNERS)}")


def milestone_steps(budget: int) -> list[int]:
    """Milestones of a budget, in training samples."""
    return [round(f * budget) for f in MILESTONES]


def intermediate_metric(objective: str) -> tuple[str, str] | None:
    """``(preview key, direction)`` of the value judged at milestones, or ``None`` when the objective
    is not pruned: ``time-to-quality`` and ``goodput`` are known only at a trial's end (the time to
    the target needs the whole curve; the efficiency needs the noise scale), and neither the partial
    samples/s nor the partial loss orders trials the way they do."""
    pruned_by_throughput = ("samples_per_sec", "maximize")
    return pruned_by_throughput if objective in ("throughput", "pareto") else None


class ShadowStudy:
    """A single-objective in-memory Optuna study of completed trials' intermediate values, on which
    an Optuna pruner decides a running trial's fate; grown incrementally and safe across threads.

    Each completed trial is added once (:meth:`add`, keyed by its number), so a decision costs the
    pruner's own pass over the completed trials (Optuna's ``MedianPruner`` and ``PercentilePruner``
    read only COMPLETE trials), not a copy of the study: on a study of 10,000 trials, rebuilding the
    shadow at each milestone took longer than the trial's own end, and the watcher thread holding
    the GIL slowed the search thread's storage calls beside it.

    Args:
        pruner: An Optuna pruner, or ``None`` (never prune).
        direction: ``"maximize"`` or ``"minimize"`` (of the intermediate values).
    """

    def __init__(self, pruner: Any, direction: str):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.pruner = pruner
        # direction is "minimize" or "maximize", typed str here; Optuna's stub wants the Literal
        self._study = optuna.create_study(direction=direction, pruner=pruner)  # type: ignore[arg-type]
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def seen(self, key: int) -> bool:
        """Whether the completed trial ``key`` was offered to :meth:`add` already."""
        return key in self._seen

    def add(self, key: int, values: Mapping[int, float] | None) -> None:
        """Add completed trial ``key``'s values (step -> value); ``None`` or empty: noted, not added
        (a trial the pruner must not compare with). A key seen before is ignored."""
        from optuna.trial import TrialState, create_trial

        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            if values:
                last = values[max(values)]
                self._study.add_trial(create_trial(state=TrialState.COMPLETE, value=last, intermediate_values=dict(values)))

    def decide(self, current: Mapping[int, float]) -> bool:
        """Whether the pruner stops a running trial with values ``current`` (its last step is judged).
        The running trial is added for the decision and then stored as FAIL (no pruner reads it)."""
        from optuna.trial import TrialState, create_trial

        if self.pruner is None or not current:
            return False
        with self._lock:
            self._study.add_trial(create_trial(state=TrialState.RUNNING, intermediate_values=dict(current)))
            running = self._study.get_trials(deepcopy=False)[-1]
            try:
                return bool(self.pruner.prune(self._study, running))
            finally:
                self._study.tell(running.number, state=TrialState.FAIL)


def prune_decision(pruner: Any, direction: str, completed: Sequence[Mapping[int, float]], current: Mapping[int, float]) -> bool:
    """Whether ``pruner`` stops a running trial with intermediate values ``current``.

    Args:
        pruner: An Optuna pruner (``None``: never prune).
        direction: ``"maximize"`` or ``"minimize"`` (of the intermediate values).
        completed: Intermediate values (step -> value) of each completed trial.
        current: The running trial's values so far (its last step is judged).

    Returns:
        The pruner's decision on a shadow in-memory study holding these values (:class:`ShadowStudy`).
    """
    if pruner is None or not current:
        return False
    shadow = ShadowStudy(pruner, direction)
    for key, values in enumerate(completed):
        shadow.add(key, values)
    return shadow.decide(current)
