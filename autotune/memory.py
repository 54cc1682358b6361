"""A memory model fitted before the search: peak memory = fixed + per-sample x batch (pure parts).

Before the first trial of a new study (on a GPU, or on a CPU when ``--memory-limit`` is given),
autotune runs short *probes*: two optimizer steps at the two smallest batch sizes of the space, per
precision, each in its own trial process, and reads their peak memory (CUDA's
``max_memory_allocated`` per device, or the process's peak RSS on a CPU). A straight line through
those points (:func:`fit_memory`) predicts the peak at any per-device batch size, and
:func:`max_batch` gives the largest batch that keeps it under ``(1 - margin) x limit``. Batch sizes
above every precision's maximum are removed from the space; above one precision's maximum, a config
is pruned as predicted OOM without running (:mod:`autotune.frontier`). The fitted model is stored
with the study's settings (``memory_model``) and printed.

Activations grow linearly with the batch; weights, gradients, optimizer state and the framework
do not, which is what the line's two terms stand for (the usual model, e.g. in DeepSpeed's
autotuner and in Lightning's batch-size finder reasoning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["fit_memory", "max_batch", "probe_batches"]


def fit_memory(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line ``peak = fixed + per_sample x batch`` through ``(batch, peak)`` points.

    Args:
        points: At least two ``(batch size, peak memory in GiB)`` pairs with two distinct batches.

    Returns:
        ``(fixed_gib, per_sample_gib)``; a negative slope (noise) is clipped to 0.

    Raises:
        ValueError: Fewer than two distinct batch sizes.
    """
    xs = [float(b) for b, _ in points]
    if len(set(xs)) < 2:
        raise ValueError(f"need two distinct batch sizes to fit, got {sorted(set(xs))}")
    ys = [float(m) for _, m in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, slope)
    return my - slope * mx, slope


def max_batch(fixed: float, per_sample: float, limit: float, margin: float) -> int | None:
    """Largest per-device batch whose predicted peak fits in ``(1 - margin) x limit``.

    Returns:
        The batch size (``>= 1``), ``None`` when not even one sample fits, or a very large number
        (``2**31``) when the slope is 0 (memory does not measurably grow with the batch).
    """
    budget = (1.0 - margin) * limit - fixed
    if budget < per_sample:
        return None
    if per_sample <= 0:
        return 2**31
    return math.floor(budget / per_sample)


def probe_batches(choices: Sequence[int]) -> tuple[int, int]:
    """The two batch sizes probed: the two smallest of ``choices`` (or ``b`` and ``2b`` for one)."""
    ordered = sorted(set(int(c) for c in choices))
    return (ordered[0], ordered[1]) if len(ordered) > 1 else (ordered[0], 2 * ordered[0])
