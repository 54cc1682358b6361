"""A sampled config measured before at the same budget is a duplicate (not trained again); nothing else is."""

from autotune.config import TrialConfig
from autotune.study.records import _budget, _measured_before
from autotune.study.settings import settings_of

from .helpers import BASELINE, add, make_study

SAMPLES = 1024  # the study's budget (helpers.make_study)


def test_the_budget_is_a_confirmation_runs_else_a_short_runs_else_the_studys():
    settings = settings_of(make_study(samples=SAMPLES))
    assert _budget({}, settings) == SAMPLES
    assert _budget({"trial_samples": 256}, settings) == 256
    assert _budget({"confirm_samples": 2048, "trial_samples": 256}, settings) == 2048


def test_the_same_config_at_the_same_budget_is_a_duplicate_of_the_first_trial_that_measured_it():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    first = add(study, 200.0, 1.0, batch_size=32)
    add(study, 210.0, 1.0, batch_size=32, attrs={"seeded_from": "best.yaml"})  # an --enqueue'd repeat, trained again
    config = BASELINE.replace(batch_size=32)
    assert _measured_before(study, 99, config, SAMPLES).number == first.number
    assert _measured_before(study, 99, BASELINE, SAMPLES).number == 0  # the baseline's config was measured by the baseline
    assert _measured_before(study, 99, config.replace(lr=0.1), SAMPLES) is None  # another lr is another config
    assert _measured_before(study, 99, config.replace(num_workers=1), SAMPLES) is None


def test_a_trial_is_not_a_duplicate_of_itself_nor_of_a_failed_trial():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, None, None, state="FAIL", attrs={"fail_kind": "crashed"}, batch_size=64)
    only = add(study, 300.0, 1.0, batch_size=128)
    assert _measured_before(study, 1, BASELINE.replace(batch_size=64), SAMPLES) is None  # a crash measured nothing: run it
    assert _measured_before(study, only.number, BASELINE.replace(batch_size=128), SAMPLES) is None


def test_another_budget_is_not_a_duplicate():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    short = add(study, 200.0, 1.0, batch_size=32, attrs={"trial_samples": 256, "stage": "system"})
    config = BASELINE.replace(batch_size=32)
    assert _measured_before(study, 99, config, SAMPLES) is None  # stage 2 trains stage 1's config at full budget
    assert _measured_before(study, 99, config, 256).number == short.number  # another short run of it is a duplicate
    assert _measured_before(study, 99, BASELINE, 256) is None  # the baseline ran the full budget


def test_a_confirmation_run_is_never_the_original():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    # a confirmation run of the baseline at the study's own budget: same config, same budget, still not an original
    add(study, 100.0, 1.0, attrs={"confirm_of": 0, "confirm_samples": SAMPLES}, batch_size=32)
    assert _measured_before(study, 99, BASELINE.replace(batch_size=32), SAMPLES) is None


def test_a_duplicate_is_never_the_original():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 200.0, 1.0, batch_size=32, attrs={"duplicate_of": 7})  # (its original is no longer complete)
    assert _measured_before(study, 99, BASELINE.replace(batch_size=32), SAMPLES) is None


def test_extended_knobs_are_part_of_the_config():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    compiled = add(study, 150.0, 1.0, compile="default")
    assert _measured_before(study, 99, BASELINE.replace(compile="default"), SAMPLES).number == compiled.number
    assert _measured_before(study, 99, TrialConfig.from_dict({**BASELINE.to_dict(), "channels_last": True}), SAMPLES) is None


def test_configs_left_counts_the_discrete_space_and_the_configs_trials_ran_at_full_budget():
    from autotune.study.records import configs_left

    resolved = {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 1}}  # 3 x 2 configs
    study = make_study()
    assert configs_left(study, resolved) == (6, 0)
    add(study, 100.0, 1.0, baseline=True)
    add(study, 200.0, 1.0, batch_size=32)
    add(study, 200.0, 1.0, batch_size=32, attrs={"duplicate_of": 1})  # the same config: counted once
    add(study, None, None, state="PRUNED", attrs={"fail_kind": "predicted_oom"}, batch_size=64)  # not new either
    add(study, 300.0, 1.0, batch_size=64, num_workers=1, attrs={"trial_samples": 256})  # a short run: another budget
    add(study, 300.0, 1.0, batch_size=16, num_workers=1, attrs={"confirm_of": 0})  # a confirmation run
    study.enqueue_trial({})  # queued, not sampled yet
    assert configs_left(study, resolved) == (6, 3)
    assert configs_left(study, {**resolved, "lr": {"low": 0.01, "high": 0.1, "log": True}}) is None  # a continuous knob: no end
