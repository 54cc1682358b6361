"""The gradient noise scale and the statistical efficiency of a batch size (pure functions).

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training" (arXiv:1812.06162): for a
gradient ``g_B`` averaged over ``B`` samples, ``E|g_B|^2 = |G|^2 + tr(Sigma) / B``, with ``G`` the
true gradient and ``Sigma`` the per-sample covariance. Two batch sizes ``b < B`` measured at the same
point give unbiased estimates (their appendix A.1)::

    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

and the *simple noise scale* ``B_noise = tr(Sigma) / |G|^2`` is the ratio of the two estimates, each
averaged over steps first (the ratio of means, not the mean of ratios, as they recommend).

Pollux/AdaptDL (Qiao et al. 2021, "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized
Deep Learning", OSDI) turn it into the statistical efficiency of a batch size ``M`` relative to a
reference ``m0``: ``E(M) = (B_noise + m0) / (B_noise + M)`` (the fraction of the progress per sample
that ``m0`` makes, which ``M`` keeps), and ``goodput = throughput x E(M)``.

Inside a trial the small and the large batch come from what the step already computes: each DDP
rank's local gradient before the all-reduce against the all-reduced one; else each micro-batch under
gradient accumulation against the accumulated one; else two consecutive optimizer steps against
their mean (which assumes ``G`` barely moves in one step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean_terms", "noise_scale", "noise_terms", "statistical_efficiency"]


def noise_terms(sq_small: float, b_small: float, sq_big: float, b_big: float) -> tuple[float, float]:
    """Unbiased estimates of ``|G|^2`` and ``tr(Sigma)`` from one pair of measurements.

    Args:
        sq_small: Mean squared norm of the gradients of the small batches.
        b_small: Samples per small batch (``> 0``).
        sq_big: Squared norm of the gradient of the big batch (the small ones combined).
        b_big: Samples in the big batch (``> b_small``).

    Returns:
        ``(grad_sq, trace)``; either may be negative for one noisy pair.

    Raises:
        ValueError: ``b_big <= b_small`` or ``b_small <= 0``.
    """
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got b_small={b_small}, b_big={b_big}")
    grad_sq = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return grad_sq, trace


def noise_scale(grad_sq_mean: float, trace_mean: float) -> float:
    """``B_noise = tr(Sigma) / |G|^2`` from step-averaged estimates, in samples.

    Returns:
        ``>= 0``; ``inf`` when ``|G|^2 <= 0`` (the gradient is all noise at this point), ``0`` when
        the trace estimate is ``<= 0`` (no measurable noise); NaN for NaN input.
    """
    if math.isnan(grad_sq_mean) or math.isnan(trace_mean):
        return math.nan
    if trace_mean <= 0:
        return 0.0
    if grad_sq_mean <= 0:
        return math.inf
    return trace_mean / grad_sq_mean


def statistical_efficiency(noise: float, batch: float, base_batch: float) -> float:
    """Pollux's statistical efficiency of effective batch ``batch`` relative to ``base_batch``.

    ``(B_noise + base_batch) / (B_noise + batch)``: ``1`` at the base batch, ``> 1`` below it,
    ``< 1`` above it; ``base_batch / batch`` when ``B_noise = 0`` (extra samples per step are
    wasted), ``1`` when ``B_noise = inf`` (perfect linear scaling).

    Args:
        noise: The gradient noise scale, in samples (``>= 0`` or ``inf``).
        batch: Effective batch size of the config (``>= 1``).
        base_batch: The baseline's effective batch size (``>= 1``).

    Returns:
        The efficiency, ``> 0``; NaN when ``noise`` is NaN.
    """
    if math.isnan(noise):
        return math.nan
    if math.isinf(noise):
        return 1.0
    return (noise + base_batch) / (noise + batch)


def mean_terms(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Mean ``(grad_sq, trace)`` over steps (NaN for none)."""
    if not pairs:
        return math.nan, math.nan
    return sum(g for g, _ in pairs) / len(pairs), sum(t for _, t in pairs) / len(pairs)
