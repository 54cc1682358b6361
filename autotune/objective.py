"""Scoring: pure functions of measured data, tested without training anything.

Objectives:

- ``throughput``: maximise global training samples/s, subject to the final loss being no worse than
  the baseline's by more than a tolerance (a fraction of the baseline's magnitude). A trial that
  breaks the constraint is infeasible: Optuna's sampler is told (``constraints_func``) and it is
  never recommended.
- ``pareto``: two objectives, samples/s (maximise) and the loss (minimise, or maximise with
  ``mode="max"``); the recommendation is the fastest Pareto-optimal trial within the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autotune.errors import UsageError

__all__ = [
    "OBJECTIVES",
    "TrialRecord",
    "final_loss",
    "constraint_value",
    "is_feasible",
    "objective_values",
    "directions",
    "pareto_front",
    "recommend",
]

OBJECTIVES = ("throughput", "pareto")


@dataclass(frozen=True)
class TrialRecord:
    """A finished trial reduced to what scoring needs.

    Attributes:
        number: Optuna trial number.
        complete: The trial finished (COMPLETE); failed and pruned trials are never recommended.
        samples_per_sec: Global training samples/s (steady state), or NaN.
        loss: Final loss (the monitored metric), or NaN.
        baseline: This is the baseline trial.
    """

    number: int
    complete: bool
    samples_per_sec: float
    loss: float
    baseline: bool = False


def final_loss(
    metrics: Mapping[str, float],
    train_loss: float,
    monitor: str,
    monitor_explicit: bool,
) -> tuple[float, str]:
    """The loss a trial is judged by, and where it came from.

    The monitored validation metric when the module logged it; else, unless the user named the
    metric explicitly (``--monitor``), the mean training loss over the last tenth of the run.

    Returns:
        ``(value, source)`` with ``source`` the metric name or ``"train_loss"``.

    Raises:
        UsageError: ``monitor_explicit`` and the metric was not logged; the message lists what was.
    """
    if monitor in metrics:
        return float(metrics[monitor]), monitor
    if monitor_explicit:
        raise UsageError(f"metric {monitor!r} (--monitor) was not logged by the module; logged: {sorted(metrics) or 'none'}")
    return float(train_loss), "train_loss"


def constraint_value(loss: float, baseline_loss: float, tolerance: float, mode: str = "min") -> float:
    """Optuna constraint value: ``<= 0`` when ``loss`` is within ``tolerance`` of ``baseline_loss``.

    The threshold is ``baseline + tolerance * |baseline|`` for ``mode="min"`` and
    ``baseline - tolerance * |baseline|`` for ``mode="max"``; a NaN loss is infeasible (``+inf``).

    Args:
        loss: The trial's final loss (or metric).
        baseline_loss: The baseline trial's.
        tolerance: Allowed relative worsening, ``0 <= tolerance < 1``.
        mode: ``"min"`` (lower is better) or ``"max"``.
    """
    if not math.isfinite(loss):
        return math.inf
    slack = tolerance * abs(baseline_loss)
    if mode == "min":
        return loss - (baseline_loss + slack)
    return (baseline_loss - slack) - loss


def is_feasible(constraint: float) -> bool:
    """Whether a constraint value (from :func:`constraint_value`) is satisfied."""
    return constraint <= 0.0


def directions(objective: str, mode: str = "min") -> list[str]:
    """Optuna study directions of an objective.

    Raises:
        UsageError: Unknown objective.
    """
    if objective == "throughput":
        return ["maximize"]
    if objective == "pareto":
        return ["maximize", "minimize" if mode == "min" else "maximize"]
    raise UsageError(f"unknown objective {objective!r}; choose one of {list(OBJECTIVES)}")


def objective_values(objective: str, samples_per_sec: float, loss: float) -> list[float]:
    """Values told to Optuna for a finished trial, in the order of :func:`directions`."""
    if objective == "throughput":
        return [samples_per_sec]
    return [samples_per_sec, loss]


def _dominates(a: TrialRecord, b: TrialRecord, mode: str) -> bool:
    better_loss = a.loss <= b.loss if mode == "min" else a.loss >= b.loss
    strictly = a.samples_per_sec > b.samples_per_sec or (a.loss < b.loss if mode == "min" else a.loss > b.loss)
    return a.samples_per_sec >= b.samples_per_sec and better_loss and strictly


def pareto_front(records: Sequence[TrialRecord], mode: str = "min") -> list[TrialRecord]:
    """Complete trials that no other complete trial beats on both samples/s and loss."""
    done = [r for r in records if r.complete and math.isfinite(r.samples_per_sec) and math.isfinite(r.loss)]
    return [r for r in done if not any(_dominates(o, r, mode) for o in done if o is not r)]


def recommend(
    records: Sequence[TrialRecord],
    baseline_loss: float,
    tolerance: float,
    objective: str = "throughput",
    mode: str = "min",
) -> TrialRecord | None:
    """The recommended trial: the fastest complete trial whose loss is within tolerance.

    Under ``pareto`` the candidates are first restricted to the Pareto front (the fastest feasible
    trial is always on it, so both objectives agree; the front is what the Pareto study shows).
    Ties on samples/s go to the baseline, then to the lower trial number.

    Returns:
        The trial, or ``None`` when no complete trial is feasible.
    """
    candidates = pareto_front(records, mode) if objective == "pareto" else [r for r in records if r.complete]
    feasible = [
        r
        for r in candidates
        if math.isfinite(r.samples_per_sec) and is_feasible(constraint_value(r.loss, baseline_loss, tolerance, mode))
    ]
    if not feasible:
        return None
    return max(feasible, key=lambda r: (r.samples_per_sec, r.baseline, -r.number))


def validate_tolerance(value: Any) -> float:
    """``--loss-tolerance`` as a float in ``[0, 1)``.

    Raises:
        UsageError: Not a number in range.
    """
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--loss-tolerance must be a number (a fraction such as 0.05), got {value!r}") from None
    if not 0.0 <= value < 1.0:
        raise UsageError(f"--loss-tolerance must be in [0, 1) (a fraction: 0.05 means 5%), got {value!r}")
    return value
