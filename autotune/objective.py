"""Scoring: pure functions of measured data, tested without training anything.

Objectives:

- ``throughput``: maximise global training samples/s, subject to the final loss being no worse than
  the baseline's by more than a tolerance (a fraction of the baseline's magnitude). A trial that
  breaks the constraint is infeasible: Optuna's sampler is told (``constraints_func``) and it is
  never recommended.
- ``time-to-quality``: minimise the seconds a trial needs to reach the baseline's training loss
  (MLPerf Training's time-to-train, applied to short trials; :func:`time_to_target`), under the same
  tolerance constraint. A trial that reached the target is always ranked above one whose time was
  extrapolated from its curve.
- ``goodput``: maximise throughput x statistical efficiency (Pollux), from the gradient noise scale
  measured in the trial (:mod:`autotune.noise`), under the same tolerance constraint.
- ``pareto``: two objectives, samples/s (maximise) and the loss (minimise, or maximise with
  ``mode="max"``); the recommendation is the fastest Pareto-optimal trial within the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError

__all__ = [
    "INPUT_BOUND_FRACTION",
    "OBJECTIVES",
    "RETURNED_LOSS",
    "TimeToTarget",
    "TrialRecord",
    "constraint_value",
    "directions",
    "final_loss",
    "input_bound_advice",
    "is_feasible",
    "loss_target",
    "monitor_note",
    "objective_values",
    "pareto_front",
    "recommend",
    "smooth_curve",
    "time_to_target",
]

OBJECTIVES = ("throughput", "time-to-quality", "goodput", "pareto")

#: An extrapolation past this many budgets is reported as never reaching the target.
NEVER_FACTOR = 1000.0

#: Width of the smoothing window of a loss curve, as a fraction of the trial's sample budget
#: (the same tenth that ``train_loss_final`` averages).
SMOOTHING_FRACTION = 0.1


@dataclass(frozen=True)
class TrialRecord:
    """A finished trial reduced to what scoring needs.

    Attributes:
        number: Optuna trial number.
        complete: The trial finished (COMPLETE); failed and pruned trials are never recommended.
        samples_per_sec: Global training samples/s (steady state), or NaN.
        loss: Final loss (the monitored metric), or NaN.
        baseline: This is the baseline trial.
        time_to_target: Seconds to the baseline's loss (``time-to-quality``), or NaN.
        target_reached: The trial's curve reached the target (``False``: extrapolated).
        goodput: Samples/s x statistical efficiency (``goodput``), or NaN.
        feasible: Whether the trial was judged within the loss tolerance when it was told (its stored
            ``feasible``: a config of the baseline's math is held to the sanity check's wider
            tolerance), or ``None`` (not stored): :func:`recommend` then judges ``loss`` itself.
    """

    number: int
    complete: bool
    samples_per_sec: float
    loss: float
    baseline: bool = False
    time_to_target: float = math.nan
    target_reached: bool = True
    goodput: float = math.nan
    feasible: bool | None = None


#: ``loss_source`` of a trial judged by the loss its ``training_step`` returned (the mean over the last
#: tenth of the run), when the ``--monitor`` metric was never logged. Namespaced so that it never
#: reads as a metric the module logs itself (such as ``train_loss``). Older studies stored
#: ``"train_loss"`` here for the same fallback; they are read and shown as they are.
RETURNED_LOSS = "autotune/train_loss"


def final_loss(
    metrics: Mapping[str, float],
    train_loss: float | None,
    monitor: str,
    monitor_explicit: bool,
) -> tuple[float, str]:
    """The loss a trial is judged by, and where it came from.

    The monitored metric when the module logged it; else, unless the user named the metric
    explicitly (``--monitor``), the mean of the loss ``training_step`` returned over the last tenth
    of the run (:data:`RETURNED_LOSS`).

    Args:
        metrics: The scalar metrics the module logged (``trainer.callback_metrics`` at the end of ``fit``).
        train_loss: The mean returned training loss, or ``None`` when ``training_step`` returned no
            loss (manual optimization that returns nothing, a dict without ``"loss"``).
        monitor: The judged metric (``--monitor``, default ``val_loss``).
        monitor_explicit: Whether the user named ``monitor`` with ``--monitor``.

    Returns:
        ``(value, source)`` with ``source`` the metric name or :data:`RETURNED_LOSS`.

    Raises:
        UsageError: The metric was not logged and either ``monitor_explicit`` or there is no
            returned loss to fall back on; the message lists the metrics that were logged.
    """
    if monitor in metrics:
        return float(metrics[monitor]), monitor
    logged = sorted(metrics) or "none"
    if monitor_explicit:
        import difflib

        near = difflib.get_close_matches(monitor, list(metrics), n=1)
        hint = f"; did you mean --monitor {near[0]}?" if near else ""
        raise UsageError(f"metric {monitor!r} (--monitor) was not logged by the module; logged: {logged}{hint}")
    if train_loss is None:
        raise UsageError(
            f"the judged metric {monitor!r} was never logged, and training_step returns no loss; logged: {logged}; give --monitor NAME"
        )
    return float(train_loss), RETURNED_LOSS


def monitor_note(monitor: str, source: str, metrics: Mapping[str, float]) -> str | None:
    """The line said once after the baseline when the judged metric was never logged (or ``None``).

    Args:
        monitor: The judged metric (``--monitor``).
        source: The baseline's ``loss_source`` (:func:`final_loss`).
        metrics: The scalar metrics the baseline logged.
    """
    if source == monitor:
        return None
    return (
        f"the judged metric {monitor!r} (--monitor) was never logged, so convergence is judged by the loss training_step "
        f"returns ({source}); logged: {sorted(metrics) or 'none'}; give --monitor NAME to judge one of them"
    )


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
    if objective in ("throughput", "goodput"):
        return ["maximize"]
    if objective == "time-to-quality":
        return ["minimize"]
    if objective == "pareto":
        return ["maximize", "minimize" if mode == "min" else "maximize"]
    raise UsageError(f"unknown objective {objective!r}; choose one of {list(OBJECTIVES)}")


def objective_values(
    objective: str, samples_per_sec: float, loss: float, time_to_target: float = math.nan, goodput: float = math.nan
) -> list[float]:
    """Values told to Optuna for a finished trial, in the order of :func:`directions`."""
    if objective == "throughput":
        return [samples_per_sec]
    if objective == "goodput":
        return [goodput]
    if objective == "time-to-quality":
        return [time_to_target]
    return [samples_per_sec, loss]


def pareto_front(records: Sequence[TrialRecord], mode: str = "min") -> list[TrialRecord]:
    """Complete trials that no other complete trial beats on both samples/s and loss, in the order of ``records``.

    A trial is beaten (dominated) by one at least as fast with a loss at least as good, and better in
    one of the two; equal trials do not beat each other. One sweep from the fastest down, keeping the
    best loss of the faster trials: O(n log n), for studies of 10,000 trials.

    Args:
        records: The trials.
        mode: ``"min"`` when a lower loss is better, ``"max"`` when higher.
    """
    done = [r for r in records if r.complete and math.isfinite(r.samples_per_sec) and math.isfinite(r.loss)]
    sign = 1.0 if mode == "min" else -1.0  # losses as "lower is better"
    front: set[int] = set()
    best_faster = math.inf  # best loss among trials strictly faster than the group being swept
    by_speed = sorted(range(len(done)), key=lambda i: -done[i].samples_per_sec)
    start = 0
    while start < len(by_speed):
        end = start
        while end < len(by_speed) and done[by_speed[end]].samples_per_sec == done[by_speed[start]].samples_per_sec:
            end += 1
        group = by_speed[start:end]  # trials of equal samples/s: the lowest loss among them beats the others
        best_here = min(sign * done[i].loss for i in group)
        front.update(i for i in group if sign * done[i].loss == best_here and best_here < best_faster)
        best_faster = min(best_faster, best_here)
        start = end
    return [r for i, r in enumerate(done) if i in front]


def recommend(
    records: Sequence[TrialRecord],
    baseline_loss: float,
    tolerance: float,
    objective: str = "throughput",
    mode: str = "min",
) -> TrialRecord | None:
    """The recommended trial: the fastest complete trial whose loss is within tolerance (as the trial
    was judged when told, :attr:`TrialRecord.feasible`, when stored).

    Under ``pareto`` the candidates are first restricted to the Pareto front (the fastest feasible
    trial is always on it, so both objectives agree; the front is what the Pareto study shows).
    Under ``time-to-quality`` the shortest time to the target wins, and trials that reached the
    target come before those whose time was extrapolated. Ties go to the baseline, then to the
    lower trial number.

    Returns:
        The trial, or ``None`` when no complete trial is feasible.
    """
    candidates = pareto_front(records, mode) if objective == "pareto" else [r for r in records if r.complete]

    def within(r: TrialRecord) -> bool:  # as the trial was told, else by its loss at ``tolerance``
        return r.feasible if r.feasible is not None else is_feasible(constraint_value(r.loss, baseline_loss, tolerance, mode))

    feasible = [r for r in candidates if math.isfinite(r.samples_per_sec) and within(r)]
    if not feasible:
        return None
    if objective == "time-to-quality":
        timed = [r for r in feasible if not math.isnan(r.time_to_target)]
        return min(timed, key=lambda r: (not r.target_reached, r.time_to_target, not r.baseline, r.number)) if timed else None
    if objective == "goodput":
        scored = [r for r in feasible if not math.isnan(r.goodput)]
        return max(scored, key=lambda r: (r.goodput, r.baseline, -r.number)) if scored else None
    return max(feasible, key=lambda r: (r.samples_per_sec, r.baseline, -r.number))


def smooth_curve(curve: Sequence[Sequence[float]], window: float) -> list[tuple[float, float]]:
    """Trailing moving average of a loss curve over a window of samples.

    Args:
        curve: ``[(samples_seen, loss), ...]`` with ``samples_seen`` increasing (global samples).
        window: Width in samples (``> 0``): the point at ``s`` is the mean of the losses at
            ``(s - window, s]``. Points before the first full window are dropped.

    Returns:
        ``[(samples_seen, smoothed_loss), ...]``, non-finite losses skipped.
    """
    points = [(float(x), float(y)) for x, y in curve if math.isfinite(float(y))]
    out: list[tuple[float, float]] = []
    lo, total = 0, 0.0
    for hi, (x, y) in enumerate(points):
        total += y
        while points[lo][0] <= x - window:
            total -= points[lo][1]
            lo += 1
        if x >= window or x >= points[-1][0]:
            out.append((x, total / (hi - lo + 1)))
    return out


def loss_target(curve: Sequence[Sequence[float]], budget_samples: float, tolerance: float = 0.0) -> float:
    """The time-to-quality target: the baseline's smoothed training loss at the end of its budget,
    relaxed by the loss tolerance.

    That is the mean loss over the last :data:`SMOOTHING_FRACTION` of the baseline's samples, plus
    ``tolerance`` times its magnitude: a config has reached the baseline's quality when its training
    loss is within the tolerance the study already grants its final loss. Without it, a curve on its
    plateau reaches or misses the baseline's exact value by the data order's noise. Measured (the
    zoo's demo ``BoringModel``, quiet 2-core CPU): the baseline at batch 1 ended at 0.0091 in a
    smoothed curve that moved between 0.0061 and 0.0106 over its second half; batch 32 at 10x the lr
    sat at 0.0095 to 0.0101, with the better validation loss (0.01029 against 0.01031) at 12x the
    samples/s, and its time to 0.0091 was extrapolated to 236 s against the baseline's 6.35 s.

    Args:
        curve: The baseline's ``[(samples_seen, loss), ...]``.
        budget_samples: The trial sample budget (``--samples``).
        tolerance: ``--loss-tolerance``, a fraction in ``[0, 1)``; 0 gives the baseline's loss itself.

    Returns:
        The target loss, or NaN for an empty curve.
    """
    smoothed = smooth_curve(curve, SMOOTHING_FRACTION * budget_samples)
    if not smoothed:
        return math.nan
    end = smoothed[-1][1]
    return end + tolerance * abs(end)


@dataclass(frozen=True)
class TimeToTarget:
    """When a trial reaches the target loss.

    Attributes:
        samples: Global training samples to the target (``inf`` if the curve never gets there).
        seconds: ``samples / samples_per_sec`` (steady-state rate), ``inf`` likewise.
        reached: The smoothed curve crossed the target inside the budget (``False``: extrapolated).
    """

    samples: float
    seconds: float
    reached: bool


def time_to_target(curve: Sequence[Sequence[float]], target: float, samples_per_sec: float, budget_samples: float) -> TimeToTarget:
    """Seconds a trial needs to reach ``target``: MLPerf Training's time-to-train on a short trial.

    The curve is smoothed as in :func:`loss_target`. When the smoothed curve crosses the target,
    the crossing is interpolated linearly between the two points around it. When it does not, the
    time is extrapolated: ``loss = a + b * ln(samples)`` is fitted by least squares to the second
    half of the smoothed curve (loss curves of short runs are close to straight against log samples)
    and solved for the target; a curve that is not falling (``b >= 0``), or one that would need more
    than :data:`NEVER_FACTOR` budgets, never gets there (``inf``). An extrapolated count is at least
    the samples already seen.

    Args:
        curve: ``[(samples_seen, loss), ...]`` (global samples, training loss).
        target: The target loss (:func:`loss_target` of the baseline).
        samples_per_sec: The trial's steady-state global throughput (``> 0``).
        budget_samples: The trial sample budget (``--samples``), for the smoothing window.

    Returns:
        A :class:`TimeToTarget`; NaN fields when the curve or the rate is unusable.
    """
    smoothed = smooth_curve(curve, SMOOTHING_FRACTION * budget_samples)
    if not smoothed or not math.isfinite(target) or not samples_per_sec > 0:
        return TimeToTarget(math.nan, math.nan, False)
    previous = None
    for x, y in smoothed:
        if y <= target:
            if previous is None or previous[1] == y:
                samples = x
            else:
                (x0, y0) = previous
                samples = x0 + (x - x0) * (y0 - target) / (y0 - y)
            return TimeToTarget(samples, samples / samples_per_sec, True)
        previous = (x, y)
    tail = smoothed[len(smoothed) // 2 :]
    if len(tail) < 2:
        return TimeToTarget(math.inf, math.inf, False)
    logs = [math.log(x) for x, _ in tail]
    mean_x, mean_y = sum(logs) / len(logs), sum(y for _, y in tail) / len(tail)
    var = sum((v - mean_x) ** 2 for v in logs)
    slope = sum((v - mean_x) * (y - mean_y) for v, (_, y) in zip(logs, tail)) / var if var > 0 else 0.0
    if not slope < 0:
        return TimeToTarget(math.inf, math.inf, False)
    intercept = mean_y - slope * mean_x
    exponent = (target - intercept) / slope
    samples = math.exp(exponent) if exponent < 700 else math.inf
    if samples > NEVER_FACTOR * budget_samples:
        return TimeToTarget(math.inf, math.inf, False)
    samples = max(samples, smoothed[-1][0])
    return TimeToTarget(samples, samples / samples_per_sec, False)


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


#: Data-wait fraction above which a config is called input-bound.
INPUT_BOUND_FRACTION = 0.10


def input_bound_advice(
    data_wait_fraction: float,
    config: Mapping[str, Any],
    space: Mapping[str, Mapping[str, Any]],
    accelerator: str,
    loader: Mapping[str, Any] | None = None,
    other_workers: Mapping[int, float] | None = None,
    samples_per_sec: float | None = None,
    raced: Mapping[int, str] | None = None,
    elsewhere: str | None = None,
) -> str | None:
    """Whether a config is input-bound, and which DataLoader knobs to widen.

    A config is input-bound when more than :data:`INPUT_BOUND_FRACTION` of its steady-state step
    time is spent waiting for data (``data_wait_fraction``: the time between the end of one batch
    and the start of the next, over the step interval). Only settings the config does not have yet
    are suggested: ``num_workers`` below the top of its searched range (or not searched),
    ``pin_memory=True`` on a GPU when the loader does not pin, and, with workers,
    ``prefetch_factor`` below the top of its range and ``persistent_workers=True`` when not set.

    What the study measured comes first: when a count below the config's measured faster than the
    config and than every count above it, fewer workers are suggested (naming it: a cheap per-sample
    pipeline loses more to the workers' start-up and hand-off than they save); else, when it ran more
    ``num_workers`` than the config has, more workers are suggested only if one of those counts
    measured faster than the config (naming it); otherwise the line says they measured no faster, and
    suggests none. A count whose paired race against the config (:mod:`autotune.paired`) did not
    show it faster (``raced``) is never suggested on the strength of its unpaired search run: the
    line gives the race instead (a new user read "num_workers 2 measured 3,003 samples/s vs 711"
    under a race of it at 1.00x).

    Args:
        data_wait_fraction: The config's measured fraction, ``0..1``.
        config: The config (``num_workers``, ``pin_memory``, ``prefetch_factor``), as stored on the trial.
        space: The resolved space (to tell whether a knob sits at the top of its range).
        accelerator: ``"gpu"`` or ``"cpu"`` (``pin_memory`` only helps host-to-GPU copies).
        loader: The user's train DataLoader settings found by inspection (``pin_memory``,
            ``prefetch_factor``, ``persistent_workers``, and ``tensor_dataset_per_sample``: it
            batches an in-memory ``TensorDataset`` one sample at a time, whose cure is a batch
            sampler, not pre-processed tensors), or ``None`` when unknown; the config's own
            values take precedence.
        other_workers: Each ``num_workers`` other than the config's that the study measured, to the
            best samples/s (global, > 0) measured with it; ``None`` or empty when none was measured.
        samples_per_sec: The config's own samples/s (global, > 0) at the same budget, to compare
            with ``other_workers``; ``None`` when unknown (``other_workers`` is then not used).
        raced: Each ``num_workers`` raced against the config in paired runs and not shown faster, to
            the race's figure (``"1.00x as fast [0.91x, 1.10x] over 2 pair(s) of runs vs ..."``);
            ``None`` or empty when none was.
        elsewhere: What the study measured of more ``num_workers`` with other knobs, when it was
            slower in every such comparison (a phrase), or ``None``; used only when neither
            ``other_workers`` nor ``raced`` says anything: more workers are then not suggested.

    Returns:
        One line of advice, or ``None`` when the config is not input-bound.
    """
    if not (data_wait_fraction > INPUT_BOUND_FRACTION):
        return None
    loader = loader or {}
    workers = int(config.get("num_workers") or 0)
    knobs = []
    has = ""
    top = _space_top(space.get("num_workers"))
    raced = {w: text for w, text in (raced or {}).items() if w != workers}
    every = {w: v for w, v in (other_workers or {}).items() if w not in raced} if samples_per_sec else {}
    measured = {w: v for w, v in every.items() if w > workers}
    fewer = max((w for w in every if w < workers and every[w] > (samples_per_sec or 0)), key=lambda w: every[w], default=None)
    verb = "widen"
    if fewer is not None and every[fewer] >= max(measured.values(), default=0.0):
        verb = "try"
        knobs.append(
            f"fewer num_workers ({fewer} measured {every[fewer]:,.0f} samples/s vs this config's {samples_per_sec:,.0f} with {workers}: "
            "the workers' start-up and hand-off cost more than they save here)"
        )
    elif measured and samples_per_sec:
        fastest = max(measured, key=lambda w: measured[w])
        counts = ", ".join(str(w) for w in sorted(measured))
        if measured[fastest] > samples_per_sec:
            knobs.append(
                f"num_workers (this config uses {workers}; {fastest} measured {measured[fastest]:,.0f} samples/s "
                f"vs this config's {samples_per_sec:,.0f})"
            )
        else:
            has = (
                f"; more num_workers measured no faster in this study ({counts}: at best {measured[fastest]:,.0f} samples/s "
                f"vs this config's {samples_per_sec:,.0f} with {workers})"
            )
    elif raced:
        races = "; ".join(f"{w}: {text}" for w, text in sorted(raced.items()))
        has = f"; other num_workers were raced against this config in paired runs and not shown faster ({races})"
    elif elsewhere:
        has = f"; {elsewhere}"
    elif top is None:
        knobs.append(f"more num_workers (this config uses {workers})")
    elif workers < top:
        knobs.append(f"num_workers (this config uses {workers}, the space allows up to {top})")
    else:
        has = f"; num_workers is already {workers}, the top of its searched range"
    pinned = config.get("pin_memory") if config.get("pin_memory") is not None else loader.get("pin_memory")
    if accelerator == "gpu" and not pinned:
        knobs.append("pin_memory=True")
    if workers > 0:
        prefetch = int(config.get("prefetch_factor") or loader.get("prefetch_factor") or 2)
        prefetch_top = _space_top(space.get("prefetch_factor"))
        if prefetch_top is None or prefetch < prefetch_top:
            knobs.append(f"prefetch_factor (this config uses {prefetch})")
        if not loader.get("persistent_workers"):
            knobs.append("persistent_workers=True")
    # one decimal when the whole percent would read as the threshold itself ("10% ... (over 10%)" for 0.1028)
    share = f"{data_wait_fraction:.0%}" if f"{data_wait_fraction:.0%}" != f"{INPUT_BOUND_FRACTION:.0%}" else f"{data_wait_fraction:.1%}"
    head = f"input-bound: {share} of each step waits for data (over {INPUT_BOUND_FRACTION:.0%})"
    cheaper = (
        "index whole batches of the in-memory TensorDataset at once instead of one sample at a time "
        "(DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), batch_size, drop_last=False), batch_size=None): "
        "the same batches in the same order, without the per-sample indexing and stacking)"
        if loader.get("tensor_dataset_per_sample")
        else "make the data pipeline cheaper (pre-processed tensors, less work per sample)"
    )
    if not knobs:
        rest = (
            "no other DataLoader setting is left to try"
            if measured or raced or elsewhere
            else "the other DataLoader settings are at theirs"
        )
        return f"{head}{has}, and {rest}; {cheaper}"
    return f"{head}{has}; {verb}: {', '.join(knobs)}; or {cheaper}"


def _space_top(entry: Mapping[str, Any] | None) -> int | None:
    """The largest value of an integer knob's resolved space entry, or ``None`` when not searched."""
    if entry is None:
        return None
    return int(max(entry["choices"]) if "choices" in entry else entry["high"])
