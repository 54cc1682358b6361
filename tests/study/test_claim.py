"""Which queued trials a process takes from the study's shared queue."""

from __future__ import annotations

import optuna

from autotune.study.queue import _claim


def test_a_paired_confirmation_run_is_taken_only_by_the_confirmation_that_queued_it():
    """helper-29: an `autotune worker` took the candidate half of a pair while the search ran the baseline
    half, at the same time, and the race read the two as back-to-back runs (1.60x [0.04x, 60.40x])."""
    study = optuna.create_study(storage="sqlite:///:memory:")
    study.enqueue_trial({}, user_attrs={"pair_of": 3, "pair_index": 0, "pair_role": "incumbent"})
    study.enqueue_trial({}, user_attrs={"stage": "full"})
    taken = _claim(study, baseline_only=False)  # a worker, or the search's own search stage
    assert taken is not None and taken.number == 1
    assert _claim(study, baseline_only=False) is None  # only the pair's run is left: not this process's to take
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert waiting.number == 0
    paired = _claim(study, baseline_only=False, pairs=True)  # the confirmation
    assert paired is not None and paired.number == 0
