"""The gradient noise scale estimator and the statistical efficiency (pure), on synthetic gradients."""

import math

import numpy as np
import pytest

from autotune.noise import mean_terms, noise_scale, noise_terms, statistical_efficiency


def _estimate(mean, std, b_small, n_small, steps, seed=0):
    """Per-sample gradients ~ N(mean, diag(std^2)); each step: n_small batches of b_small, combined."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(steps):
        samples = rng.normal(mean, std, size=(n_small * b_small, mean.size))
        small = samples.reshape(n_small, b_small, -1).mean(axis=1)
        sq_small = float((small**2).sum(axis=1).mean())
        sq_big = float((samples.mean(axis=0) ** 2).sum())
        pairs.append(noise_terms(sq_small, b_small, sq_big, n_small * b_small))
    return noise_scale(*mean_terms(pairs)), mean_terms(pairs)


@pytest.mark.parametrize("b_small, n_small", [(16, 2), (8, 4), (32, 8)])
def test_noise_scale_recovers_a_known_value(b_small, n_small):
    dim = 50
    mean = np.full(dim, 0.2)  # |G|^2 = 50 * 0.04 = 2
    std = np.full(dim, 1.0)  # tr(Sigma) = 50
    truth = 50 / 2.0  # B_noise = 25 samples
    got, (grad_sq, trace) = _estimate(mean, std, b_small, n_small, steps=400, seed=b_small)
    assert grad_sq == pytest.approx(2.0, rel=0.15)
    assert trace == pytest.approx(50.0, rel=0.1)
    assert got == pytest.approx(truth, rel=0.15)


def test_noise_scale_edges():
    assert noise_scale(2.0, 0.0) == 0.0 and noise_scale(-1.0, 5.0) == math.inf
    assert math.isnan(noise_scale(math.nan, 1.0))
    with pytest.raises(ValueError, match="need 0 < b_small < b_big"):
        noise_terms(1.0, 32, 1.0, 32)


def test_statistical_efficiency_pollux_formula():
    assert statistical_efficiency(100.0, 32, 32) == 1.0
    assert statistical_efficiency(100.0, 132, 32) == pytest.approx(132 / 232)
    assert statistical_efficiency(100.0, 16, 32) > 1.0  # a smaller batch gets more from each sample
    assert statistical_efficiency(0.0, 256, 32) == pytest.approx(32 / 256)  # no noise: extra samples are wasted
    assert statistical_efficiency(math.inf, 256, 32) == 1.0  # all noise: perfect linear scaling
    assert math.isnan(statistical_efficiency(math.nan, 256, 32))
