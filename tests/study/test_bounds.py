"""Batch sizes larger than an epoch: learned from a trial's first batch, stored in the study, never run (issue 14.7a)."""

from autotune.study.bounds import EPOCH_ATTR, above_epoch, epoch_limit, epoch_lines, learn_epoch

from .helpers import BASELINE, make_settings, make_study


class Lines:
    def __init__(self):
        self.lines = []

    def warn(self, message):
        self.lines.append(message)


def _ran_out(samples):
    return [{"rank": 0, "ok": False, "error": {"kind": "batch_size_not_applied", "message": "...", "epoch_samples": samples}}]


def test_epoch_limit_holds_for_as_many_devices_or_more():
    bounds = {"1": {"samples": 50, "trial": 2}, "4": {"samples": 10, "trial": 7}}
    assert epoch_limit(bounds, 1) == (50, 2)
    assert epoch_limit(bounds, 2) == (50, 2)  # split over more ranks, a rank never sees more samples
    assert epoch_limit(bounds, 8) == (10, 7)
    assert epoch_limit({"2": {"samples": 25, "trial": 1}}, 1) is None  # one rank may see the other rank's share too
    assert epoch_limit({}, 1) is None


def test_a_trial_whose_data_ran_out_bounds_the_batch_once_with_one_line():
    study = make_study()
    settings = make_settings(space={"batch_size": {"choices": [16, 32, 64, 128]}})
    ui = Lines()
    assert above_epoch(study, BASELINE.replace(batch_size=128)) is None
    learn_epoch(study, 1, [{"rank": 0, "ok": False, "error": {"kind": "oom", "message": "..."}}], BASELINE, settings, ui)
    assert EPOCH_ATTR not in study.user_attrs and ui.lines == []  # another failure teaches nothing
    learn_epoch(study, 2, _ran_out(50), BASELINE.replace(batch_size=128), settings, ui)
    assert study.user_attrs[EPOCH_ATTR] == {"1": {"samples": 50, "trial": 2}}
    assert ui.lines == ["removed batch sizes [64, 128] from the space: trial 2's training data ran out after 50 samples per device "
                        "(an epoch); larger batches are not run"]
    reason = above_epoch(study, BASELINE.replace(batch_size=64))
    assert reason == "not run: batch_size 64 is larger than an epoch (50 samples per device, as trial 2's first batch showed)"
    assert above_epoch(study, BASELINE.replace(batch_size=50)) is None and above_epoch(study, BASELINE.replace(batch_size=32)) is None
    # a trial sampled before the bound was known (another job) finds the same: no second line
    learn_epoch(study, 3, _ran_out(50), BASELINE.replace(batch_size=64), settings, ui)
    assert len(ui.lines) == 1
    assert epoch_lines(study) == ["epoch: 50 samples per device with 1 or more device(s) (trial 2): larger batches are not run"]


def test_the_bound_lives_in_the_study_for_a_resume_and_other_workers(tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = make_study(storage=url)
    learn_epoch(study, 4, _ran_out(40) + _ran_out(30), BASELINE.replace(batch_size=64, devices=2, strategy="ddp"),
                make_settings(space={"batch_size": {"low": 16, "high": 512}}), Lines())
    again = optuna.load_study(study_name=study.study_name, storage=url)  # another process
    assert again.user_attrs[EPOCH_ATTR] == {"2": {"samples": 30, "trial": 4}}  # the smallest rank's epoch
    assert above_epoch(again, BASELINE.replace(batch_size=32, devices=2, strategy="ddp")) is not None
    assert above_epoch(again, BASELINE.replace(batch_size=32)) is None  # one device: its epoch may be larger
