"""--search staged's pure parts beyond tests/test_staged.py: the plan's edges, stage 1's budget and
screen, the speed ranking, and stage 2's rounds."""

from autotune.config import TrialConfig
from autotune.study import (
    screen_points,
    stage2_round,
    staged_plan,
    system_budget,
    top_system_configs,
)
from autotune.study.staged import SCREEN_MAX_POINTS, STAGE2_ATTEMPTS

from .helpers import add, make_study

FIXED = {"lr": 0.05, "accumulate_grad_batches": 1}  # the baseline's convergence knobs (helpers.BASELINE)
SHORT = {"trial_samples": 256, "stage": "system"}


def test_the_plan_leaves_nothing_when_the_baseline_and_seeds_take_every_trial():
    assert staged_plan(3, baseline_needed=True, seeds=5, system_knobs=True) == (0, 0)
    assert staged_plan(3, baseline_needed=True, seeds=0, system_knobs=True) == (1, 1)
    assert staged_plan(2, baseline_needed=False, seeds=0, system_knobs=True) == (1, 1)
    assert staged_plan(6, baseline_needed=True, seeds=0, system_knobs=True) == (3, 2)
    assert sum(staged_plan(17, baseline_needed=False, seeds=3, system_knobs=True)) == 14


def test_a_short_run_counts_samples_over_every_device():
    assert system_budget(TrialConfig(batch_size=16, devices=2, strategy="ddp"), 8192) == 2048  # 32 steps x 32 < a quarter
    assert system_budget(TrialConfig(batch_size=64, devices=2, strategy="ddp"), 8192) == 4096  # 32 steps x 128
    assert system_budget(TrialConfig(batch_size=16), 100) == 100  # less than 32 steps: the whole (small) budget


def test_the_speed_ranking_leaves_out_user_arguments_lr_multiplier_and_unmeasured_trials():
    import optuna
    from optuna.distributions import CategoricalDistribution

    def trial(params, sps):
        attrs = {} if sps is None else {"samples_per_sec": sps}
        return optuna.trial.create_trial(params=params, distributions={k: CategoricalDistribution([v]) for k, v in params.items()},
                                         values=[sps or 0.0], user_attrs=attrs)

    trials = [
        trial({"batch_size": 32, "lr_multiplier": 1.0, "model.hidden": 8}, 100.0),
        trial({"batch_size": 32, "lr_multiplier": 2.0, "model.hidden": 64}, 150.0),  # the same system config
        trial({"batch_size": 64, "lr_multiplier": 1.0, "model.hidden": 8}, None),  # nothing measured
        trial({"batch_size": 128, "lr_multiplier": 1.0, "model.hidden": 8}, 0.0),
    ]
    assert top_system_configs(trials, with_speed=True) == [({"batch_size": 32}, 150.0)]
    assert top_system_configs(trials, 0) == []


def test_a_round_takes_at_most_k_configs_fastest_first():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    for batch, sps in ((32, 200.0), (64, 400.0), (128, 800.0), (256, 600.0)):
        add(study, sps, 1.0, attrs=SHORT, batch_size=batch)
    assert [p["batch_size"] for p, _ in stage2_round(study.trials, FIXED, k=2)] == [128, 256]
    assert all(attrs == {"stage": "full"} and {**p, **FIXED} == p for p, attrs in stage2_round(study.trials, FIXED))


def test_only_a_judged_full_budget_run_sets_the_speed_to_beat():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 900.0, 1.0, attrs=SHORT, batch_size=256)  # fastest, but a short run: it beats nothing yet
    add(study, 500.0, 1.0, attrs=SHORT, batch_size=64)
    assert [p["batch_size"] for p, _ in stage2_round(study.trials, FIXED)] == [256, 64]
    # a stage-1 run as long as the budget is judged: feasible, it solves its config and is the speed to beat
    add(study, 600.0, 1.0, attrs={"stage": "system"}, batch_size=128)
    assert [p["batch_size"] for p, _ in stage2_round(study.trials, FIXED)] == [256]


def test_failed_full_budget_runs_count_as_attempts_but_short_runs_and_confirmation_runs_do_not():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 900.0, 1.0, attrs=SHORT, batch_size=256)
    add(study, None, None, state="FAIL", attrs={"fail_kind": "nonfinite_loss"}, batch_size=256)  # at the baseline's lr
    add(study, None, None, state="FAIL", attrs={**SHORT, "fail_kind": "crashed"}, batch_size=256)
    add(study, 900.0, 2.0, attrs={"confirm_of": 0, "confirm_samples": 2048}, batch_size=256)
    add(study, 850.0, 1.5, batch_size=256, lr=0.2)  # infeasible
    assert stage2_round(study.trials, FIXED) == [({"batch_size": 256, "precision": "32-true", "num_workers": 0}, {"stage": "full"})]
    assert STAGE2_ATTEMPTS == 3
    add(study, None, None, state="FAIL", attrs={"fail_kind": "nonfinite_loss"}, batch_size=256, lr=0.5)
    assert stage2_round(study.trials, FIXED) == []  # three full-budget attempts, none feasible: 256 is given up


def test_a_config_tried_only_at_another_lr_is_tried_at_the_baselines_first():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 900.0, 1.0, attrs=SHORT, batch_size=256)
    add(study, 880.0, 1.4, batch_size=256, lr=0.2)  # (an enqueued config, say), infeasible
    assert stage2_round(study.trials, FIXED) == [({"batch_size": 256, "precision": "32-true", "num_workers": 0, **FIXED}, {"stage": "full"})]


def test_screen_points_leave_out_the_convergence_knobs_and_points_visited_at_any_lr():
    resolved = {"batch_size": {"choices": [16, 32]}, "precision": {"choices": ["32-true"]}, "num_workers": {"low": 0, "high": 1},
                "accumulate_grad_batches": {"choices": [1, 2]}, "lr": {"low": 0.01, "high": 0.1, "log": True},
                "model.hidden": {"choices": [8, 64], "type": "int"}}
    convergence = {"lr", "accumulate_grad_batches", "model.hidden"}
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 200.0, 1.0, lr=0.09, batch_size=32)
    points = screen_points(study.trials, resolved, convergence, seed=0)
    assert sorted((p["batch_size"], p["num_workers"]) for p in points) == [(16, 1), (32, 1)]
    assert all(set(p) == {"batch_size", "precision", "num_workers"} for p in points)
    visited = [{"batch_size": b, "precision": "32-true", "num_workers": w, "lr": 0.05} for b in (16, 32) for w in (0, 1)]
    assert screen_points([], resolved, convergence, seed=0, visited_params=visited) == []  # all screened: nothing left


def test_no_screen_for_a_grid_too_large_or_no_system_knob():
    side = int(SCREEN_MAX_POINTS ** 0.5) + 1
    big = {"batch_size": {"choices": list(range(1, side + 1))}, "num_workers": {"choices": list(range(side))}}
    assert screen_points([], big, set(), seed=0) is None
    assert screen_points([], {"lr": {"low": 0.01, "high": 0.1, "log": True}}, {"lr"}, seed=0) is None
