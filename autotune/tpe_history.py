"""Optuna's TPE over a bounded history: its cost per trial stops growing with the study.

Optuna's TPE fits two Parzen estimators over *every* finished trial on each sample (Optuna's sampler
table gives it ``O(d n log n)`` per trial and a recommended budget of 100 to 1,000 trials). At 10,000
trials that is ~0.15 s of Python per sampled config, 5x its cost at 10 trials, paid by every worker
on every trial. :class:`BoundedHistoryTPESampler` is Optuna's ``TPESampler`` unchanged up to
:data:`HISTORY` finished trials; beyond that its sample step sees at most :data:`HISTORY` of them:

- the **elites**, which decide TPE's "good" density ``l(x)``: single objective, the
  :data:`ELITES` best feasible completed trials, the :data:`ELITES` best pruned ones (Optuna's order:
  furthest step, then value) and the :data:`ELITES` least infeasible ones. TPE's good group is the
  best ``min(ceil(0.1 n), 25)`` trials (Optuna's ``default_gamma``; 25 for ``n >= 250``), taken from
  these in that order, so it is *the same trials* as over the whole study. Multi-objective: the
  Pareto front of the feasible completed trials (Optuna's good group there is the best 10% by
  non-domination rank, so beyond the front it is drawn from the recent trials);
- the **most recent** finished trials (by number) up to :data:`HISTORY` in all: they shape the
  "bad" density ``g(x)``, on which Optuna's default weights already favour recent trials (a linear
  ramp from ``1/n`` for the oldest).

Finished trials never change, so the elites are kept up to date from the trials not yet seen
(``O(new)`` per sample after one pass over the study). The relative search space, pruning and
``after_trial`` see the whole study, as in Optuna.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = ["ELITES", "HISTORY", "BoundedHistoryTPESampler"]

#: Finished trials the sample step of TPE reads at most (the top of Optuna's recommended TPE budget).
HISTORY = 1000

#: Best trials of each kind (feasible completed, pruned, infeasible) always in the history: Optuna's
#: single-objective good group is at most 25 trials (``default_gamma``).
ELITES = 25

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _infeasibility(trial: FrozenTrial) -> float:
    """Optuna's infeasible-trial score: the sum of the positive constraint values (0 when feasible)."""
    return sum(v for v in trial.constraints.values() if v > 0)


def _dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    """Whether values ``a`` Pareto-dominate ``b`` (``signs``: +1 minimise, -1 maximise per objective)."""
    return all(s * x <= s * y for s, x, y in zip(signs, a, b)) and any(s * x < s * y for s, x, y in zip(signs, a, b))


class _Elites:
    """The elites of one study, updated from trials not yet seen (finished trials do not change)."""

    def __init__(self, signs: Sequence[float], limit: int) -> None:
        self.signs = tuple(signs)
        self.limit = limit
        self.seen: set[int] = set()
        self.complete: list[tuple[float, int, FrozenTrial]] = []  # (signed value, number, trial), best first
        self.pruned: list[tuple[tuple[float, float], int, FrozenTrial]] = []
        self.infeasible: list[tuple[float, int, FrozenTrial]] = []
        self.front: list[FrozenTrial] = []  # multi-objective: non-dominated feasible completed trials

    def _keep(self, ranked: list, entry: tuple) -> None:
        bisect.insort(ranked, entry, key=lambda e: (e[0], e[1]))
        del ranked[self.limit :]

    def add(self, trial: FrozenTrial) -> None:
        self.seen.add(trial.number)
        infeasible = _infeasibility(trial) if trial.constraints else 0.0
        if infeasible > 0:
            self._keep(self.infeasible, (infeasible, trial.number, trial))
        elif trial.state == TrialState.PRUNED:
            if len(self.signs) == 1:
                self._keep(self.pruned, (self._pruned_score(trial), trial.number, trial))
        elif trial.values is not None:
            if len(self.signs) == 1:
                self._keep(self.complete, (self.signs[0] * trial.values[0], trial.number, trial))
            elif not any(_dominates(f.values, trial.values, self.signs) for f in self.front):
                self.front = [f for f in self.front if not _dominates(trial.values, f.values, self.signs)] + [trial]

    def _pruned_score(self, trial: FrozenTrial) -> tuple[float, float]:
        """Optuna's ``_get_pruned_trial_score``: the furthest step first, then its value (best first)."""
        if not trial.intermediate_values:
            return (1.0, 0.0)
        step, value = max(trial.intermediate_values.items())
        return (-step, math.inf if math.isnan(value) else self.signs[0] * value)

    def trials(self) -> list[FrozenTrial]:
        kept = [e[2] for e in self.complete] + [e[2] for e in self.pruned] + [e[2] for e in self.infeasible]
        return kept + self.front


class _StudyView:
    """A study whose finished trials are a bounded history; everything else is the study's own."""

    def __init__(self, study: optuna.Study, history: list[FrozenTrial]) -> None:
        self._study = study
        self._history = history

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[FrozenTrial]:
        finished = [t for t in self._history if states is None or t.state in states]
        unfinished = [s for s in (TrialState if states is None else states) if s not in _FINISHED]
        if unfinished:  # running trials (TPE's constant liar, Optuna 5's default) or others: the study's own
            finished += self._study._get_trials(deepcopy=False, states=unfinished, use_cache=use_cache)
            finished.sort(key=lambda t: t.number)
        return finished


class BoundedHistoryTPESampler(optuna.samplers.TPESampler):
    """Optuna's ``TPESampler`` whose sample step reads at most ``history`` finished trials (see the
    module docstring). Takes ``TPESampler``'s arguments, plus:

    Args:
        history: Finished trials read at most (``>= 10 * elites``, so that Optuna's good group of the
            history, ``min(ceil(0.1 n), 25)``, is as large as over the study); :data:`HISTORY` by default.
        elites: Best trials of each kind always read; :data:`ELITES` by default (the good group is
            the study's own when ``elites >= 25`` and Optuna's default gamma).
    """

    def __init__(self, *args: Any, history: int = HISTORY, elites: int = ELITES, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if history < 10 * elites:
            raise ValueError(f"history={history} must be at least 10 x elites={elites}")
        self._history_limit = history
        self._elite_limit = elites
        self._elites: dict[int, _Elites] = {}

    def history(self, study: optuna.Study) -> list[FrozenTrial]:
        """The finished trials (``COMPLETE`` and ``PRUNED``) the sample step reads, by number: all of
        them up to ``history``, else the elites and the most recent ones (``history`` in all)."""
        finished = study._get_trials(deepcopy=False, states=_FINISHED, use_cache=True)
        if len(finished) <= self._history_limit:
            return finished
        signs = [1.0 if d == optuna.study.StudyDirection.MINIMIZE else -1.0 for d in study.directions]
        elites = self._elites.get(study._study_id)
        if elites is None:
            elites = self._elites[study._study_id] = _Elites(signs, self._elite_limit)
        for trial in finished:
            if trial.number not in elites.seen:
                elites.add(trial)
        kept = {t.number: t for t in elites.trials()}
        for trial in reversed(finished):
            if len(kept) >= self._history_limit:
                break
            kept.setdefault(trial.number, trial)
        return sorted(kept.values(), key=lambda t: t.number)

    def _sample(self, study: optuna.Study, trial: FrozenTrial, search_space: dict) -> dict[str, Any]:
        history = self.history(study)
        return super()._sample(_StudyView(study, history), trial, search_space)  # type: ignore[arg-type]
