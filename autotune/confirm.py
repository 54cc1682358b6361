"""Confirmation before recommending: the best configs re-run longer, repeated, compared with their noise.

After the search, the ``K`` best distinct feasible configs and the baseline are each run ``R`` more
times with a longer sample budget (``autotune search --confirm K --confirm-repeats R
--confirm-samples N``). Each config is then judged by the *median* of its confirmation runs, and its
*spread* (max - min of the runs) says how much the figure moves between identical runs. The rule
(:func:`pick`):

1. A config is eligible when all of its confirmation runs completed and its median final loss is
   within the loss tolerance of the baseline's median (both at the longer budget).
2. The best eligible median wins, unless another eligible config's median differs from it by no
   more than the larger of the two spreads: the difference is then *within noise*, and of those
   configs the one closest to the baseline (fewest knobs changed) is recommended.

Nothing is recommended from a single run: with confirmation on, only confirmed configs are.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.objective import constraint_value

__all__ = ["ConfirmGroup", "Pick", "pick"]


@dataclass(frozen=True)
class ConfirmGroup:
    """The confirmation runs of one config.

    Attributes:
        number: The search trial whose config was confirmed.
        values: Objective values of its completed confirmation runs (samples/s, goodput, or seconds).
        losses: Their final losses.
        failed: Confirmation runs that failed.
        distance: Knobs whose value differs from the baseline's (0 for the baseline).
        baseline: This is the baseline's config.
        runs: Trial numbers of the completed runs, in the order of ``values``.
    """

    number: int
    values: tuple[float, ...]
    losses: tuple[float, ...]
    failed: int = 0
    distance: int = 0
    baseline: bool = False
    runs: tuple[int, ...] = field(default=())

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def spread(self) -> float:
        """``max - min`` of the values (0 for one run; NaN for none or a non-finite value)."""
        if not self.values or not all(math.isfinite(v) for v in self.values):
            return math.nan
        return max(self.values) - min(self.values)

    @property
    def median_loss(self) -> float:
        return statistics.median(self.losses) if self.losses else math.nan

    def median_run(self) -> int | None:
        """The run whose value is closest to the median (the one reported and exported)."""
        if not self.runs:
            return None
        return min(zip(self.runs, self.values), key=lambda rv: abs(rv[1] - self.median) if math.isfinite(rv[1]) else math.inf)[0]


@dataclass(frozen=True)
class Pick:
    """What :func:`pick` decided.

    Attributes:
        chosen: The recommended group, or ``None`` when no group is eligible.
        best: The group with the best median (``chosen`` unless within noise of another).
        within_noise: Eligible groups whose median is within the spread of ``best``'s (``best`` excluded).
        eligible: Every eligible group, best first.
        ineligible: ``(group, reason)`` of the others.
    """

    chosen: ConfirmGroup | None
    best: ConfirmGroup | None
    within_noise: tuple[ConfirmGroup, ...]
    eligible: tuple[ConfirmGroup, ...]
    ineligible: tuple[tuple[ConfirmGroup, str], ...]


def pick(groups: Sequence[ConfirmGroup], maximize: bool, tolerance: float, mode: str = "min") -> Pick:
    """Choose the recommendation among confirmed configs (the rule is in the module docstring).

    Args:
        groups: One per confirmed config; the baseline's group (``baseline=True``) sets the loss reference.
        maximize: Whether a larger objective value is better.
        tolerance: The study's loss tolerance (a fraction).
        mode: ``"min"`` or ``"max"``, as for the loss tolerance.

    Returns:
        A :class:`Pick`; ``chosen`` is ``None`` when the baseline's group has no completed run or no
        group is eligible.
    """
    base = next((g for g in groups if g.baseline), None)
    reference = base.median_loss if base is not None else math.nan
    eligible, ineligible = [], []
    for g in groups:
        if g.failed:
            ineligible.append((g, f"{g.failed} confirmation run(s) failed"))
        elif not g.values or not math.isfinite(g.median):
            ineligible.append((g, "no finite confirmation value"))
        elif not math.isfinite(reference):
            ineligible.append((g, "the baseline has no completed confirmation run"))
        elif constraint_value(g.median_loss, reference, tolerance, mode) > 0:
            ineligible.append((g, f"median loss {g.median_loss:.4g} above the baseline's {reference:.4g} + {tolerance:.0%}"))
        else:
            eligible.append(g)
    sign = 1.0 if maximize else -1.0
    eligible.sort(key=lambda g: (-sign * g.median, g.distance, g.number))
    if not eligible:
        return Pick(None, None, (), (), tuple(ineligible))
    best = eligible[0]
    ties = tuple(g for g in eligible[1:] if abs(g.median - best.median) <= max(_finite(g.spread), _finite(best.spread)))
    chosen = min((best, *ties), key=lambda g: (g.distance, -sign * g.median, g.number))
    return Pick(chosen, best, ties, tuple(eligible), tuple(ineligible))


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
