"""The OOM frontier over a study's trials: which configs are predicted to run out of memory, and the summary."""

from autotune.config import TrialConfig
from autotune.study import oom_frontier
from autotune.study.memory import _predicted_oom
from autotune.summary import frontier_lines

from .helpers import BASELINE, add, make_study


def _oom(study, batch_size, precision="32-true", **config):
    return add(study, None, None, state="FAIL", attrs={"fail_kind": "oom", "fail_reason": "CUDA out of memory"},
               batch_size=batch_size, precision=precision, **config)


def test_a_trial_that_ran_out_of_memory_rules_out_larger_batches_at_its_precision_or_wider():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    oom = _oom(study, 256)
    reason = _predicted_oom(study, BASELINE.replace(batch_size=512))
    assert reason is not None and f"trial {oom.number} ran out of memory at per-device batch 256" in reason
    assert _predicted_oom(study, BASELINE.replace(batch_size=256, precision="64-true")) is not None
    assert _predicted_oom(study, BASELINE.replace(batch_size=128)) is None
    assert _predicted_oom(study, BASELINE.replace(batch_size=512, precision="bf16-mixed")) is None  # narrower: may fit
    # accumulation does not change the memory of a step: still predicted
    assert _predicted_oom(study, BASELINE.replace(batch_size=256, accumulate_grad_batches=4)) is not None


def test_only_real_out_of_memory_failures_count():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, None, None, state="FAIL", attrs={"fail_kind": "crashed"}, batch_size=64)
    add(study, None, None, state="PRUNED", attrs={"fail_kind": "predicted_oom"}, batch_size=128)  # predicted, never run
    add(study, None, None, state="FAIL", attrs={"fail_kind": "timeout"}, batch_size=32, precision="bf16-mixed")
    assert _predicted_oom(study, BASELINE.replace(batch_size=512)) is None
    assert oom_frontier(study) == []


def test_other_devices_strategies_and_memory_settings_have_their_own_frontier():
    study = make_study()
    _oom(study, 64)
    assert _predicted_oom(study, BASELINE.replace(batch_size=64, devices=2, strategy="ddp")) is None
    assert _predicted_oom(study, BASELINE.replace(batch_size=64, compile="default")) is None
    _oom(study, 32, devices=2, strategy="ddp")
    assert _predicted_oom(study, BASELINE.replace(batch_size=32, devices=2, strategy="ddp")) is not None
    assert _predicted_oom(study, BASELINE.replace(batch_size=32, devices=2, strategy="fsdp")) is None


def test_the_frontier_evidence_comes_before_the_memory_model_which_applies_to_the_studys_devices_only():
    study = make_study(memory_model={"32-true": {"max_batch": 100}}, memory_limit_gib=16.0, memory_model_margin=0.1)
    oom = _oom(study, 512)
    assert f"trial {oom.number} ran out of memory" in _predicted_oom(study, BASELINE.replace(batch_size=512))
    assert _predicted_oom(study, BASELINE.replace(batch_size=128)).startswith("predicted OOM by the memory model: per-device batch 128 > 100")
    assert _predicted_oom(study, BASELINE.replace(batch_size=128, devices=2, strategy="ddp")) is None  # probed on 1 device


def test_oom_frontier_lists_settings_with_an_oom_and_the_largest_batch_that_fit():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 200.0, 1.0, batch_size=64)
    add(study, 220.0, 1.0, batch_size=128, attrs={"trial_samples": 512, "stage": "system"})  # a short run fits as well
    _oom(study, 512)
    _oom(study, 256)
    add(study, 300.0, 1.0, batch_size=512, precision="bf16-mixed")  # no OOM at this precision: not listed
    assert oom_frontier(study) == [{"devices": 1, "strategy": "auto", "precision": "32-true", "fits_up_to": 128, "oom_from": 256}]
    assert frontier_lines(oom_frontier(study)) == ["OOM frontier: 32-true, 1 device(s), auto: per-device batch <= 128 fits, "
                                     ">= 256 runs out of memory (not run again)"]


def test_the_memory_model_rules_out_batches_above_its_precision_maximum():
    study = make_study(memory_limit_gib=80.0, memory_model_margin=0.1,
                       memory_model={"32-true": {"max_batch": 100}, "bf16-mixed": {"max_batch": 300}})
    assert _predicted_oom(study, TrialConfig(batch_size=128, precision="32-true")).startswith(
        "predicted OOM by the memory model: per-device batch 128 > 100, the most that fits 32-true in 90% of 80 GiB")
    assert _predicted_oom(study, TrialConfig(batch_size=128, precision="bf16-mixed")) is None
    assert _predicted_oom(study, TrialConfig(batch_size=64, precision="32-true")) is None
