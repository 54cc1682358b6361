"""The memory model's fit and cap (pure), on synthetic data."""

import random

import pytest

from autotune.memory import fit_memory, max_batch, probe_batches


def test_fit_recovers_fixed_and_per_sample_memory_from_noisy_points():
    rng = random.Random(0)
    points = [(b, 2.0 + 0.05 * b + rng.uniform(-0.01, 0.01)) for b in (8, 16, 32, 64)]
    fixed, per_sample = fit_memory(points)
    assert fixed == pytest.approx(2.0, abs=0.03) and per_sample == pytest.approx(0.05, rel=0.02)
    assert fit_memory([(16, 1.0), (32, 3.0)]) == (-1.0, 0.125)
    assert fit_memory([(16, 3.0), (32, 2.9)]) == (pytest.approx(2.95), 0.0)  # a falling line is noise: flat
    with pytest.raises(ValueError, match="two distinct batch sizes"):
        fit_memory([(16, 1.0), (16, 1.1)])


def test_max_batch_keeps_the_margin():
    # 80 GiB device, 10% margin: 72 GiB; 2 GiB fixed, 0.05 GiB per sample -> 1400 samples
    assert max_batch(2.0, 0.05, 80.0, 0.1) == 1400
    assert max_batch(75.0, 0.05, 80.0, 0.1) is None  # the fixed part alone exceeds the budget
    assert max_batch(2.0, 0.0, 80.0, 0.1) == 2**31
    assert probe_batches([64, 16, 32]) == (16, 32) and probe_batches([48]) == (48, 96)
