"""The trial's Trainer arguments: max_steps is the optimizer steps Lightning really takes."""

import math

from autotune.config import TrialConfig
from autotune.trial_trainer import _optimizer_steps, max_steps, total_batches


def _lightning_steps(batches, per_epoch, accumulate):
    """Count steps as Lightning takes them: every `accumulate` batches, and at each epoch's end."""
    steps, in_window = 0, 0
    for i in range(batches):
        in_window += 1
        if in_window == accumulate or (i + 1) % per_epoch == 0:
            steps, in_window = steps + 1, 0
    return steps + (1 if in_window else 0)


def test_optimizer_steps_count_the_extra_step_at_each_epoch_end():
    for batches in (1, 7, 28, 64, 100):
        for per_epoch in (1, 2, 5, 44, 45, 1000):
            for accumulate in (1, 2, 7, 8):
                assert _optimizer_steps(batches, per_epoch, accumulate) == _lightning_steps(batches, per_epoch, accumulate)


def test_max_steps_is_the_budgets_steps_so_a_onecycle_schedule_ends_with_the_trial():
    plain = TrialConfig(batch_size=32, lr=0.1)
    assert max_steps(plain, 2048, 1438) == total_batches(plain, 2048)[0] == 64
    digits = TrialConfig(batch_size=32, accumulate_grad_batches=8, lr=0.1)  # 8 steps of 64 batches, 45 an epoch
    assert max_steps(digits, 2048, 1438) == _lightning_steps(64, 45, 8) == 9
    small = TrialConfig(batch_size=128, accumulate_grad_batches=7, lr=0.1)  # 2 batches an epoch: a step at every end
    assert max_steps(small, 1024, 256) == 7
    # without the training set's size: one step per batch, never fewer than Lightning takes
    assert max_steps(digits, 2048, None) == 64
    two = TrialConfig(batch_size=32, accumulate_grad_batches=4, lr=0.1, devices=2, strategy="ddp")
    batches = total_batches(two, 4096)[1]
    assert max_steps(two, 4096, 1000) >= _lightning_steps(batches, math.floor(500 / 32), 4)
