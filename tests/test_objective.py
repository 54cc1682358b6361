import math

import pytest

from autotune.errors import UsageError
from autotune.objective import (
    RETURNED_LOSS,
    TimeToTarget,
    TrialRecord,
    constraint_value,
    directions,
    final_loss,
    loss_target,
    monitor_note,
    pareto_front,
    recommend,
    smooth_curve,
    time_to_target,
    validate_tolerance,
)


def test_constraint_relative_to_baseline_both_modes():
    assert constraint_value(1.04, 1.0, 0.05) < 0
    assert constraint_value(1.06, 1.0, 0.05) > 0
    assert constraint_value(0.5, 1.0, 0.05) < 0
    # mode max: accuracy may drop by at most 5% of the baseline's
    assert constraint_value(0.86, 0.9, 0.05, "max") < 0
    assert constraint_value(0.85, 0.9, 0.05, "max") > 0
    # a negative baseline (e.g. a log-likelihood) uses its magnitude
    assert constraint_value(-1.96, -2.0, 0.05) < 0
    assert constraint_value(-1.89, -2.0, 0.05) > 0
    assert constraint_value(math.nan, 1.0, 0.05) == math.inf


def test_final_loss_prefers_the_monitor_and_falls_back_to_the_returned_loss():
    assert final_loss({"val_loss": 0.3}, 0.5, "val_loss", False) == (0.3, "val_loss")
    assert final_loss({}, 0.5, "val_loss", False) == (0.5, "autotune/train_loss") == (0.5, RETURNED_LOSS)
    with pytest.raises(UsageError, match=r"metric 'val_acc' \(--monitor\) was not logged.*\['val_loss'\]"):
        final_loss({"val_loss": 0.3}, 0.5, "val_acc", True)
    with pytest.raises(UsageError, match=r"metric 'g_los' \(--monitor\) was not logged.*; did you mean --monitor g_loss\?$"):
        final_loss({"d_loss": 0.3, "g_loss": 0.5}, None, "g_los", True)


def test_the_returned_loss_is_named_apart_from_a_metric_the_module_logs_as_train_loss():
    # the module logs its own train_loss (another value); val_loss is missing: autotune's fallback is not it
    value, source = final_loss({"train_loss": 500.0, "valid_loss": 0.4}, 0.5, "val_loss", False)
    assert (value, source) == (0.5, RETURNED_LOSS) and source != "train_loss"
    # judged by the user's train_loss when asked for
    assert final_loss({"train_loss": 500.0}, 0.5, "train_loss", True) == (500.0, "train_loss")


def test_no_monitored_metric_and_no_returned_loss_is_one_line_naming_the_logged_metrics_and_the_flag():
    with pytest.raises(UsageError) as caught:
        final_loss({"g_loss": 0.7, "d_loss": 1.3}, None, "val_loss", False)
    message = str(caught.value)
    assert message == (
        "the judged metric 'val_loss' was never logged, and training_step returns no loss; "
        "logged: ['d_loss', 'g_loss']; give --monitor NAME"
    )
    assert "non-finite" not in message and "\n" not in message
    assert final_loss({"g_loss": 0.7}, None, "g_loss", True) == (0.7, "g_loss")  # --monitor g_loss judges it


def test_monitor_note_lists_the_logged_metrics_only_when_the_monitor_was_missing():
    note = monitor_note("val_loss", RETURNED_LOSS, {"valid_loss": 0.4, "train_loss": 500.0})
    assert "'val_loss' (--monitor) was never logged" in note and "logged: ['train_loss', 'valid_loss']" in note
    assert RETURNED_LOSS in note and "--monitor NAME" in note
    assert monitor_note("val_loss", "val_loss", {"val_loss": 0.3}) is None


def R(n, sps, loss, complete=True, baseline=False):
    return TrialRecord(n, complete, sps, loss, baseline)


def test_recommend_fastest_feasible_never_infeasible_or_failed():
    records = [R(0, 100, 1.0, baseline=True), R(1, 300, 1.2), R(2, 200, 1.04), R(3, 900, math.nan, complete=False), R(4, 150, 0.9)]
    best = recommend(records, baseline_loss=1.0, tolerance=0.05)
    assert best.number == 2
    assert recommend(records, 1.0, 0.5).number == 1  # a looser tolerance admits trial 1
    assert recommend([R(1, 300, 2.0)], 1.0, 0.05) is None


def test_recommend_follows_the_feasibility_a_trial_was_told():
    # a config of the baseline's math is told feasible at the sanity check's wider tolerance (its loss 7% up)
    records = [
        R(0, 100, 1.0, baseline=True),
        TrialRecord(1, True, 300.0, 1.07, feasible=True),
        TrialRecord(2, True, 400.0, 1.01, feasible=False),
    ]
    assert recommend(records, 1.0, 0.05).number == 1
    assert recommend([R(0, 100, 1.0, baseline=True), R(1, 300, 1.07)], 1.0, 0.05).number == 0  # not stored: judged at 5%


def test_recommend_tie_goes_to_the_baseline():
    assert recommend([R(1, 100, 1.0), R(0, 100, 1.0, baseline=True)], 1.0, 0.05).number == 0


def test_pareto_front_and_pareto_recommendation():
    records = [R(0, 100, 1.0, baseline=True), R(1, 200, 1.5), R(2, 150, 0.8), R(3, 120, 0.9), R(4, 90, 2.0)]
    assert {r.number for r in pareto_front(records)} == {1, 2}
    assert recommend(records, 1.0, 0.05, "pareto").number == 2
    assert directions("pareto", "max") == ["maximize", "maximize"]
    assert directions("throughput") == ["maximize"]
    with pytest.raises(UsageError, match="unknown objective 'speed'"):
        directions("speed")


@pytest.mark.parametrize("mode", ["min", "max"])
def test_the_pareto_front_is_the_set_no_trial_dominates_ties_and_duplicates_included(mode):
    import random

    rng = random.Random(7)
    # few distinct values, so that equal speeds, equal losses and exact duplicates are common
    records = [R(i, float(rng.choice([100, 120, 150, 200, 250])), rng.choice([0.5, 0.8, 1.0, 1.2, math.nan])) for i in range(300)]
    records.append(TrialRecord(300, False, 999.0, 0.1, False))  # not complete: never on the front
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)

    def dominated(r, by):
        at_least = by.samples_per_sec >= r.samples_per_sec and (by.loss == r.loss or better(by.loss, r.loss))
        return at_least and (by.samples_per_sec > r.samples_per_sec or better(by.loss, r.loss))

    done = [r for r in records if r.complete and math.isfinite(r.loss)]
    expected = [r.number for r in done if not any(dominated(r, o) for o in done)]
    assert [r.number for r in pareto_front(records, mode)] == expected and 0 < len(expected) < len(done)


@pytest.mark.parametrize("value", [-0.1, 1.0, "abc"])
def test_tolerance_out_of_range(value):
    with pytest.raises(UsageError, match="--loss-tolerance"):
        validate_tolerance(value)


def _log_curve(a: float, b: float, samples: int, step: int = 64):
    """A noiseless curve loss = a + b ln(samples seen)."""
    return [(s, a + b * math.log(s)) for s in range(step, samples + 1, step)]


def test_smooth_curve_is_a_trailing_mean_over_samples():
    curve = [(10, 4.0), (20, 2.0), (30, 6.0), (40, 0.0)]
    assert smooth_curve(curve, 20) == [(20, 3.0), (30, 4.0), (40, 3.0)]
    assert smooth_curve([(10, 1.0), (20, math.nan), (30, 3.0)], 100) == [(30, 2.0)]  # shorter than the window


def test_loss_target_is_the_mean_of_the_last_tenth():
    curve = [(s, 1.0 if s <= 900 else 0.5) for s in range(100, 1001, 100)]
    assert loss_target(curve, 1000) == pytest.approx(0.5)
    assert math.isnan(loss_target([], 1000))


def test_time_to_target_interpolates_the_crossing():
    curve = [(s, 10.0 - s / 100) for s in range(10, 1001, 10)]  # falls 1 per 100 samples
    smoothed_lag = 0.1 * 1000 / 2 / 100  # a trailing mean over 100 samples lags by ~50 samples
    got = time_to_target(curve, target=5.0, samples_per_sec=100.0, budget_samples=1000)
    assert got.reached
    assert got.samples == pytest.approx(500 + 100 * smoothed_lag - 5, abs=1.0)
    assert got.seconds == pytest.approx(got.samples / 100.0)


def test_time_to_target_extrapolates_a_log_curve_and_marks_it():
    curve = _log_curve(5.0, -0.5, 4096)
    target = 5.0 - 0.5 * math.log(16384)  # reached at 16,384 samples, 4x the budget
    got = time_to_target(curve, target, samples_per_sec=1000.0, budget_samples=4096)
    assert not got.reached
    # the smoothing lag shifts the fitted line; within 15% of the true crossing
    assert got.samples == pytest.approx(16384, rel=0.15)
    assert got.seconds == pytest.approx(got.samples / 1000.0)
    flat = [(s, 2.0) for s in range(64, 4097, 64)]
    assert time_to_target(flat, 1.0, 1000.0, 4096) == TimeToTarget(math.inf, math.inf, False)
    assert math.isnan(time_to_target([], 1.0, 1000.0, 4096).seconds)


def test_time_to_quality_ranks_reached_trials_above_extrapolated_ones():
    records = [
        TrialRecord(0, True, 100.0, 1.0, baseline=True, time_to_target=10.0, target_reached=True),
        TrialRecord(1, True, 300.0, 1.0, time_to_target=4.0, target_reached=False),  # a lucky extrapolation
        TrialRecord(2, True, 200.0, 1.0, time_to_target=6.0, target_reached=True),
        TrialRecord(3, True, 400.0, 2.0, time_to_target=1.0, target_reached=True),  # infeasible loss
        TrialRecord(4, False, math.nan, math.nan),
    ]
    assert recommend(records, 1.0, 0.05, "time-to-quality").number == 2
    assert directions("time-to-quality") == ["minimize"]
    assert recommend(records[:2], 1.0, 0.05, "time-to-quality").number == 0


def test_input_bound_advice_names_the_knobs_to_widen():
    from autotune.objective import input_bound_advice

    space = {"num_workers": {"low": 0, "high": 2}}
    assert input_bound_advice(0.08, {"num_workers": 0}, space, "gpu") is None
    advice = input_bound_advice(0.35, {"num_workers": 1}, space, "gpu")
    assert advice.startswith("input-bound: 35% of each step waits for data")
    assert "num_workers (this config uses 1, the space allows up to 2)" in advice
    assert "pin_memory=True" in advice and "prefetch_factor (this config uses 2)" in advice and "persistent_workers=True" in advice
    no_workers = input_bound_advice(0.2, {"num_workers": 0}, space, "cpu")
    assert "num_workers (this config uses 0, the space allows up to 2)" in no_workers
    # persistent_workers and prefetch_factor mean nothing without workers; pin_memory nothing on a CPU
    assert "persistent_workers" not in no_workers and "prefetch_factor" not in no_workers and "pin_memory" not in no_workers
    assert "more num_workers (this config uses 0)" in input_bound_advice(0.2, {"num_workers": 0}, {}, "cpu")
    # just over the threshold: one decimal, not "10% ... (over 10%)"
    assert input_bound_advice(0.1028, {"num_workers": 0}, {}, "cpu").startswith("input-bound: 10.3% of each step waits for data (over 10%)")


def test_input_bound_advice_on_a_tensor_dataset_indexed_per_sample_names_the_batch_sampler():
    from autotune.objective import input_bound_advice

    space = {"num_workers": {"choices": [0, 2]}}
    per_sample = input_bound_advice(0.2, {"num_workers": 2}, space, "cpu", {"tensor_dataset_per_sample": True})
    assert "sampler=BatchSampler(RandomSampler(dataset), batch_size, drop_last=False), batch_size=None" in per_sample
    assert "pre-processed tensors" not in per_sample and "num_workers is already 2" in per_sample
    other = input_bound_advice(0.2, {"num_workers": 2}, space, "cpu", {"tensor_dataset_per_sample": False})
    assert "BatchSampler" not in other and other.endswith("make the data pipeline cheaper (pre-processed tensors, less work per sample)")


def test_input_bound_advice_never_suggests_what_the_config_already_has():
    from autotune.objective import input_bound_advice

    space = {"num_workers": {"choices": [0, 2, 4]}, "prefetch_factor": {"low": 2, "high": 8}}
    # num_workers at the top of its searched range, the loader already pinned and persistent
    loader = {"pin_memory": True, "prefetch_factor": 2, "persistent_workers": True}
    advice = input_bound_advice(0.3, {"num_workers": 4}, space, "gpu", loader)
    widen = advice.split("widen: ")[1]
    assert "num_workers" not in widen and "pin_memory" not in widen and "persistent_workers" not in widen
    assert "num_workers is already 4, the top of its searched range" in advice
    assert widen.startswith("prefetch_factor (this config uses 2)")
    # the trial's own pin_memory counts as well as the loader's
    assert "pin_memory" not in input_bound_advice(0.3, {"num_workers": 2, "pin_memory": True}, space, "gpu", {"pin_memory": False})
    # everything at its maximum: no "widen" at all, only the data pipeline
    done = input_bound_advice(0.3, {"num_workers": 4, "prefetch_factor": 8}, space, "gpu", loader)
    assert "widen" not in done and "pin_memory" not in done and "persistent_workers" not in done
    assert "num_workers is already 4" in done and "make the data pipeline cheaper" in done


def test_input_bound_line_reads_the_inspected_loader_and_what_the_trial_applied():
    from types import SimpleNamespace

    from autotune.summary import input_bound_line

    settings = SimpleNamespace(
        hardware={"accelerator": "gpu"},
        space={"num_workers": {"low": 0, "high": 2}},
        model_info={"loader": {"pin_memory": False, "prefetch_factor": None, "persistent_workers": True}},
    )
    attrs = {"data_wait_fraction": 0.4, "config": {"num_workers": 2}, "applied": {"pin_memory": True, "prefetch_factor": 2}}
    line = input_bound_line(SimpleNamespace(user_attrs=attrs), settings)
    assert "pin_memory" not in line and "persistent_workers" not in line and "num_workers is already 2" in line
    # a study made before the loader's persistent_workers was inspected: still suggested
    settings.model_info = {"loader": {"pin_memory": False, "prefetch_factor": None}}
    assert "persistent_workers=True" in input_bound_line(SimpleNamespace(user_attrs=attrs), settings)
    # inspection saw the baseline's loader without workers (persistent_workers=num_workers > 0 is then False);
    # the trial's ranks trained with persistent workers: what they applied wins (a new user's report)
    attrs["applied"]["persistent_workers"] = True
    assert "persistent_workers" not in input_bound_line(SimpleNamespace(user_attrs=attrs), settings)


def test_input_bound_line_weighs_the_wider_num_workers_the_study_measured():
    from autotune.summary import input_bound_line
    from tests.study.helpers import add, make_settings, make_study

    space = {"num_workers": {"low": 0, "high": 4}}
    # more workers measured slower: no advice to widen them, the line says what was measured
    study = make_study(space=space)
    add(study, 1000.0, baseline=True, attrs={"data_wait_fraction": 0.3})
    add(study, 700.0, num_workers=2, attrs={"data_wait_fraction": 0.05})
    add(study, 650.0, num_workers=4, attrs={"data_wait_fraction": 0.02})
    add(study, 5000.0, num_workers=4, batch_size=512)  # other knobs: never weighed
    settings = make_settings(space=space)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert line.startswith("input-bound: 30% of each step waits for data")
    assert "more num_workers measured no faster in this study (2, 4: at best 700 samples/s vs this config's 1,000 with 0)" in line
    assert "widen:" not in line and "no other DataLoader setting is left to try" in line
    # a confirmation run (another budget) is weighed by the search trial it confirms, at the others' budget
    run = add(study, 500.0, attrs={"confirm_of": 0, "confirm_samples": 2048, "data_wait_fraction": 0.3})
    assert "measured no faster" in input_bound_line(run, settings, study.get_trials(deepcopy=False))
    # without the study's trials, the space alone speaks (as before)
    assert "widen: num_workers (this config uses 0, the space allows up to 4)" in input_bound_line(trials[0], settings)

    # only trials with other knobs ran more workers: nothing is weighed (the space speaks), not a
    # comparison with another batch size; a short screening run of this config's knobs is weighed
    study = make_study(space=space)
    add(study, 1000.0, baseline=True, attrs={"data_wait_fraction": 0.3})
    add(study, 400.0, num_workers=2, batch_size=512, accumulate_grad_batches=3)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "measured" not in line and "widen: num_workers (this config uses 0, the space allows up to 4)" in line
    add(study, 300.0, num_workers=1, attrs={"trial_samples": 2048})
    line = input_bound_line(trials[0], settings, study.get_trials(deepcopy=False))
    assert "more num_workers measured no faster in this study (1: at best 300 samples/s vs this config's 1,000 with 0)" in line

    # more workers measured faster: widening them is advised, naming the measurement
    study = make_study(space=space)
    add(study, 1000.0, baseline=True, attrs={"data_wait_fraction": 0.3})
    add(study, 1800.0, num_workers=2)
    add(study, 1500.0, num_workers=4)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "widen: num_workers (this config uses 0; 2 measured 1,800 samples/s vs this config's 1,000)" in line
    assert "measured no faster" not in line

    # fewer workers measured faster (a new user's 1-worker config, 2.3x slower than 0 workers): fewer are advised,
    # not more; a fewer count slower than the config, or than a count above it, is not
    study = make_study(space=space)
    add(study, 4151.0, baseline=True, num_workers=1, attrs={"data_wait_fraction": 0.69})
    add(study, 9491.0, num_workers=0)
    add(study, 3000.0, num_workers=2)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "; try: fewer num_workers (0 measured 9,491 samples/s vs this config's 4,151 with 1: " in line
    assert "widen" not in line and "more num_workers" not in line
    study = make_study(space=space)
    add(study, 4151.0, baseline=True, num_workers=1, attrs={"data_wait_fraction": 0.69})
    add(study, 2000.0, num_workers=0)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "fewer" not in line and "widen: num_workers (this config uses 1, the space allows up to 4)" in line


def test_loss_target_adds_the_tolerance_of_its_magnitude():
    curve = [(s, 1.0 if s <= 900 else 0.5) for s in range(100, 1001, 100)]
    assert loss_target(curve, 1000, 0.05) == pytest.approx(0.525)
    assert loss_target([(s, -2.0) for s in range(100, 1001, 100)], 1000, 0.1) == pytest.approx(-1.8)  # a negative loss: still looser
    assert math.isnan(loss_target([], 1000, 0.05))


def test_a_plateau_at_the_baselines_quality_reaches_the_relaxed_target_but_not_its_lucky_end():
    """The demo BoringModel's case: the baseline's batch-1 curve ends on a low dip of its noise; a smoother
    curve on the same plateau never crosses that dip (extrapolated far off or never) but is within 5%."""
    baseline = [(s, 0.0100 + (0.0015 if (s // 400) % 2 else -0.0015) - (0.0006 if s > 7400 else 0.0)) for s in range(41, 8193, 41)]
    smooth = [(s, 0.0098 + 1e-7 * ((s * 7919) % 13)) for s in range(256, 8193, 256)]
    strict, relaxed = loss_target(baseline, 8192), loss_target(baseline, 8192, 0.05)
    assert strict < 0.0098 < relaxed
    assert not time_to_target(smooth, strict, 10_000.0, 8192).reached
    got = time_to_target(smooth, relaxed, 10_000.0, 8192)
    assert got.reached and got.samples <= 1024  # at the first full smoothing window


def test_the_quality_line_of_a_recommended_baseline_does_not_compare_it_with_itself():
    from types import SimpleNamespace

    from autotune.summary import quality_line

    base = SimpleNamespace(number=0, user_attrs={"time_to_target": 9.18, "target_reached": True, "loss_target": 0.12})
    faster = SimpleNamespace(number=3, user_attrs={"time_to_target": 5.1, "target_reached": True, "loss_target": 0.12})
    assert quality_line(faster, base).endswith("5.1 s (reached) vs 9.18 s for the baseline = 1.80x faster")
    paired = SimpleNamespace(number=7, user_attrs={**faster.user_attrs, "pair_of": 3})  # a race's median run: one pair's figure
    assert quality_line(paired, base).endswith("= 1.80x faster (in the two runs shown; a race's figure is its median over the pairs)")
    line = quality_line(base, base)
    assert line.endswith("9.18 s (reached)") and "faster" not in line and "vs" not in line
    never = SimpleNamespace(number=4, user_attrs={"time_to_target": None, "target_reached": False, "loss_target": 0.12})
    line = quality_line(never, base)
    assert line.startswith("time to the baseline's training loss: never (not reached in its run") and "not falling or would need more than" in line


def test_input_bound_line_does_not_suggest_workers_a_paired_race_did_not_show_faster():
    from autotune.summary import input_bound_line
    from tests.study.helpers import add, make_settings, make_study, race

    space = {"num_workers": {"low": 0, "high": 2}}
    study = make_study(space=space)
    add(study, 711.0, baseline=True, attrs={"data_wait_fraction": 0.5})
    fast = add(study, 3003.0, num_workers=2, attrs={"data_wait_fraction": 0.05})  # one lucky unpaired run
    settings = make_settings(space=space)
    trials = study.get_trials(deepcopy=False)
    assert "widen: num_workers (this config uses 0; 2 measured 3,003 samples/s" in input_bound_line(trials[0], settings, trials)
    race(study, fast.number, [1000.0, 1100.0], [1010.0, 1090.0], samples=1024)  # its race: about 1.00x, not a win
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "widen: num_workers" not in line and "3,003" not in line, line
    assert "other num_workers were raced against this config in paired runs and not shown faster (2: 1.00x" in line
    assert "over 2 pair(s) of runs vs this config)" in line
    # a race the candidate won says nothing against it: the measured figure speaks again
    won = make_study(space=space)
    add(won, 711.0, baseline=True, attrs={"data_wait_fraction": 0.5})
    fast = add(won, 3003.0, num_workers=2, attrs={"data_wait_fraction": 0.05})
    race(won, fast.number, [700.0, 710.0, 690.0, 705.0], [3000.0, 2900.0, 3100.0, 2950.0], samples=1024)
    trials = won.get_trials(deepcopy=False)
    assert "widen: num_workers (this config uses 0; 2 measured 3,003 samples/s" in input_bound_line(trials[0], settings, trials)


def test_input_bound_line_says_a_race_of_other_workers_that_was_ahead_was_stopped_undecided():
    from autotune.summary import input_bound_line
    from tests.study.helpers import add, make_settings, make_study, race

    space = {"num_workers": {"low": 0, "high": 2}}
    study = make_study(space=space)
    add(study, 711.0, baseline=True, attrs={"data_wait_fraction": 0.5})
    fast = add(study, 1200.0, num_workers=2, attrs={"data_wait_fraction": 0.05, "trial_samples": 256})
    race(study, fast.number, [700.0], [1150.0], samples=512)  # one pair, 1.64x, then the budget stopped it
    settings = make_settings(space=space)
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "(2: 1.64x faster" in line and "undecided: the confirmation budget stopped its race (a larger --confirm-share" in line, line


def test_input_bound_line_does_not_suggest_workers_that_measured_slower_with_every_other_knobs_tried():
    from autotune.summary import input_bound_line
    from tests.study.helpers import add, make_settings, make_study

    space = {"num_workers": {"low": 0, "high": 2}}
    settings = make_settings(space=space)
    study = make_study(space=space)
    add(study, 12133.0, baseline=True, attrs={"data_wait_fraction": 0.25})  # batch 32, 0 workers
    add(study, 3391.0, num_workers=1)  # the baseline's knobs with 1 worker: slower
    big = add(study, 20000.0, batch_size=64, lr=0.2, attrs={"data_wait_fraction": 0.25})  # recommended: no other workers ran
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[big.number], settings, trials)
    assert "widen: num_workers" not in line, line
    assert "more num_workers measured slower with other knobs in the one config of this study that ran both" in line
    assert "(at best 1: 3,391 samples/s vs 12,133 with 0)" in line
    # one comparison where more workers were faster: the space's room is suggested again
    add(study, 9000.0, batch_size=16, num_workers=0)
    add(study, 15000.0, batch_size=16, num_workers=2)
    trials = study.get_trials(deepcopy=False)
    assert "widen: num_workers (this config uses 0, the space allows up to 2)" in input_bound_line(trials[big.number], settings, trials)


def test_input_bound_line_does_not_suggest_the_workers_of_a_run_that_missed_the_loss():
    """helper-37: 'widen: num_workers (... 2 measured 1,975 samples/s vs this config's 1,814)' for a 2-worker run the same
    summary called infeasible (its Dataset's random augmentation drew otherwise with other workers)."""
    from autotune.summary import input_bound_line
    from tests.study.helpers import add, make_settings, make_study

    space = {"num_workers": {"low": 0, "high": 2}}
    settings = make_settings(space=space)
    study = make_study(space=space)
    add(study, 1814.0, 1.0, baseline=True, attrs={"data_wait_fraction": 0.4})
    missed = add(study, 1975.0, 1.41, num_workers=2, attrs={"feasible": False})
    trials = study.get_trials(deepcopy=False)
    line = input_bound_line(trials[0], settings, trials)
    assert "widen: num_workers" not in line and "1,975" not in line, line
    assert f"other num_workers ran in this study but missed the baseline's loss (2 in trial {missed.number}), so they are not suggested" in line
    add(study, 1990.0, 1.0, num_workers=2)  # a run of 2 workers that kept the loss: weighed as before
    trials = study.get_trials(deepcopy=False)
    assert "num_workers (this config uses 0; 2 measured 1,990 samples/s vs this config's 1,814)" in input_bound_line(trials[0], settings, trials)
