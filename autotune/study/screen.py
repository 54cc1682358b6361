"""Stage 1's screening order of ``--search staged``: which configs keep the baseline's math
(:class:`MathContext`), math-preserving configs first (:func:`screen_order`), then the math-changing
ones one effective batch size at a time (:func:`batch_ladder`). See docs/search.md."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.config import TrialConfig
from autotune.knobs import with_knobs
from autotune.space import baseline_params
from autotune.space_params import scaled_lr
from autotune.study.math_class import Failure, failed_class, is_preserving, raised_lr_needed, rule_lr, split_accumulation

#: Most of a stage-1 plan that math-preserving configs take when math-changing ones are left to screen too (0..1).
PRESERVE_SHARE = 2 / 3


@dataclass(frozen=True)
class MathContext:
    """What stage 2 needs to tell math-preserving configs from math-changing ones (:mod:`autotune.study.math_class`).

    Attributes:
        baseline: The baseline config.
        resolved: The study's resolved space.
        rule: The lr rule of math-changing configs (``"linear"`` or ``"sqrt"``, :func:`lr_rule`).
    """

    baseline: TrialConfig
    resolved: Mapping[str, Any]
    rule: str

    def config_of(self, params: Mapping[str, Any]) -> TrialConfig:
        """The config of Optuna params (knobs the params leave out keep the baseline's values)."""
        config = with_knobs(self.baseline, {k: v for k, v in params.items() if k != "lr_multiplier"})
        if "lr_multiplier" in params and self.baseline.lr is not None:  # the space's lr_scaling
            ratio = (config.effective_batch_size, self.baseline.effective_batch_size)
            config = config.replace(lr=scaled_lr(self.baseline.lr, params["lr_multiplier"], *ratio, self.resolved["lr"]["scaling"]))
        return config

    def split(self, system: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, Any] | None:
        """The math-preserving params of a system config (the accumulation that keeps the baseline's
        effective batch, :func:`split_accumulation`; the baseline's lr), or ``None`` when it has none."""
        params = {**system, **fixed}
        acc = split_accumulation(self.config_of(params), self.baseline, self.resolved.get("accumulate_grad_batches"))
        if acc is None:
            return None
        if "accumulate_grad_batches" in params:
            params["accumulate_grad_batches"] = acc
        return params if is_preserving(self.config_of(params), self.baseline) else None

    def first_point(self, system: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict[str, Any]:
        """A math-changing system config's first full-budget params: the baseline's accumulation and
        the lr :attr:`rule` gives its effective batch (on the space's grid: the nearest choice, or
        clipped to the range). Under the space's ``lr_scaling``, multiplier 1 is that lr already."""
        params = {**system, **fixed}
        entry = self.resolved.get("lr")
        if "lr" in params and entry is not None:
            lr = rule_lr(self.config_of(params), self.baseline, self.rule)
            if lr is not None:
                if "choices" in entry:
                    lr = min(entry["choices"], key=lambda c: abs(math.log(c / lr)) if c > 0 else math.inf)
                else:
                    lr = min(max(lr, entry["low"]), entry["high"])
                params["lr"] = lr
        return params

    def raised_point(self, params: Mapping[str, Any], failures: Sequence[Failure]) -> dict[str, Any] | None:
        """``params`` at the next lr up that the still-improving failures of its class leave open
        (:func:`autotune.study.math_class.raised_lr_needed`): the grid's next choice, or in a range x sqrt(10)
        (at most its top). ``None`` when none applies, ``lr`` is not searched itself (``lr_scaling``), no
        larger lr is left, or another failure of the class rules the raised point out."""
        entry = self.resolved.get("lr")
        if "lr" not in params or entry is None:
            return None
        config = self.config_of(params)
        needed = raised_lr_needed(config, failures, self.baseline, self.rule)
        ruled = rule_lr(config, self.baseline, self.rule)
        if needed is None or ruled is None:
            return None
        floor = ruled * needed * (1 + 1e-9)
        if "choices" in entry:
            above = sorted(c for c in entry["choices"] if c > floor)
            if not above:
                return None
            lr = above[0]
        else:
            if floor >= entry["high"]:
                return None
            lr = min(floor * math.sqrt(10), entry["high"])
        raised = {**params, "lr": lr}
        return raised if failed_class(self.config_of(raised), failures, self.baseline, self.rule) is None else None


def screen_order(points: Sequence[Mapping[str, Any]], n: int, fixed: Mapping[str, Any], context: MathContext) -> list[dict[str, Any]]:
    """Stage 1's ``n`` screening params from :func:`screen_points`: math-preserving configs first (each
    at the accumulation that keeps the baseline's effective batch, :meth:`MathContext.split`), at most
    :data:`PRESERVE_SHARE` of ``n`` while math-changing configs are left to screen (at the baseline's
    accumulation and the lr rule's lr, :meth:`MathContext.first_point`), each group in the points' order.

    Args:
        points: Unvisited system points, in their seeded order.
        n: Screening runs (>= 0).
        fixed: The baseline's Optuna params of the convergence knobs.
        context: The study's :class:`MathContext`.
    """
    preserving, changing = [], []
    for point in points:
        params = context.split(point, fixed)
        if params is not None:
            preserving.append(params)
        else:  # at the lr rule's lr: a run as long as the full budget is judged, and should be judged at it
            changing.append(context.first_point(point, fixed))
    take = min(len(preserving), max(math.ceil(PRESERVE_SHARE * n), n - len(changing)))
    return (preserving[:take] + batch_ladder(changing, context))[:n]


def batch_ladder(
    points: Sequence[dict[str, Any]], context: MathContext, reference: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Screening params in ladder order: one per effective batch size, smallest first, each at the
    fewest other system knobs changed from ``reference``'s (its workers, precision, ...), then a
    second per batch size, and so on; ties keep ``points``' seeded order.

    The effective batch is what decides a math-changing config's speed and whether it reaches the
    baseline's loss (McCandlish et al. 2018, *An Empirical Model of Large-Batch Training*: the gain
    of a larger batch ends at the critical batch size), so a short screening budget covers every
    batch size once, nearest the baseline's first, before it tries other knobs at a batch size again
    (one knob at a time first). A random order spent the screening of a tabular MLP (batch 64, 3 of
    11 runs math-changing) on batch 512 twice and batch 128 with 2 workers; batch 256 was never run.

    Args:
        points: Optuna params of system configs (:meth:`MathContext.first_point`, :meth:`MathContext.split`).
        context: The study's :class:`MathContext`.
        reference: Optuna params whose system knobs count as unchanged (default: the baseline's).
    """
    base = dict(reference) if reference is not None else baseline_params(context.resolved, context.baseline)
    ranked: dict[tuple[int, int], list[dict[str, Any]]] = {}  # (knobs changed, effective batch) -> points
    for point in points:
        changed = sum(point.get(k) != base.get(k) for k in point if k not in _LADDER_FREE and k in base)
        ranked.setdefault((changed, context.config_of(point).effective_batch_size), []).append(point)
    order = sorted(((changed, i, batch), p) for (changed, batch), group in ranked.items() for i, p in enumerate(group))
    return [p for _, p in order]


#: Params the ladder does not count as changed knobs: the batch itself and what follows it.
_LADDER_FREE = ("batch_size", "accumulate_grad_batches", "lr", "lr_multiplier")
