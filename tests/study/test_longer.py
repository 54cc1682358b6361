"""Longer-training candidates: configs of other math that miss the loss at --samples, yet reach the
baseline's loss sooner with more samples (records.longer_candidates), raced on longer runs."""

from __future__ import annotations

import math

import optuna
import pytest
import yaml

from autotune.study.races import races_of
from autotune.study.racing import race_length
from autotune.study.records import LONGER_FACTOR, confirm_candidates, longer_candidates
from study.helpers import add, make_settings, make_study, race

CPU = {"accelerator": "cpu", "device_count": 1, "device_name": "cpu", "cpu_count": 2, "bf16_supported": False, "device_memory_gib": 8.0}


def _reach(seconds, samples, reached=False):
    return {"time_to_target": seconds, "samples_to_target": samples, "target_reached": reached}


def test_only_an_infeasible_config_of_other_math_extrapolated_sooner_within_the_longer_budget_is_a_longer_candidate():
    settings = make_settings()  # 1,024 samples per trial
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True, attrs=_reach(10.0, 1000.0, True))
    quick = add(study, 300.0, 1.4, batch_size=128, lr=0.01, attrs=_reach(6.0, 1800.0))  # missed the loss, 1.7x sooner
    quicker = add(study, 400.0, 1.6, batch_size=256, lr=0.02, attrs=_reach(5.0, 2000.0))
    add(study, 500.0, 2.0, batch_size=512, lr=0.02, attrs=_reach(4.0, 2100.0))  # past LONGER_FACTOR x --samples
    add(study, 110.0, 1.3, batch_size=64, lr=0.1, attrs=_reach(9.8, 1078.0))  # within 5% of the baseline's time
    add(study, 300.0, 1.4, num_workers=2, attrs=_reach(6.0, 1800.0))  # the baseline's math that missed its loss
    add(study, 300.0, 1.4, batch_size=128, lr=0.2, attrs=_reach(3.0, 900.0, True))  # reached it: its val loss failed
    add(study, 300.0, 1.4, batch_size=128, lr=0.05, attrs=_reach(None, None))  # never
    add(study, 300.0, 1.4, batch_size=128, lr=0.3, attrs={**_reach(2.0, 600.0), "trial_samples": 256})  # a short run
    every = study.get_trials(deepcopy=False)
    assert [t.number for t in longer_candidates(every, base, settings)] == [quicker.number, quick.number]
    assert [t.number for t in longer_candidates(every, base, settings, [quicker.params])] == [quick.number]
    # feasible candidates first; the longer ones fill what --confirm leaves
    feasible = add(study, 150.0, 1.0, batch_size=64, lr=0.02, attrs=_reach(7.0, 1050.0, True))
    assert [t.number for t in confirm_candidates(study, settings, 3)] == [feasible.number, quicker.number, quick.number]
    assert [t.number for t in confirm_candidates(study, settings, 1)] == [feasible.number]
    # no time to the target for the baseline (no loss curve): none
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    add(study, 300.0, 1.4, batch_size=128, lr=0.01, attrs=_reach(6.0, 1800.0))
    assert longer_candidates(study.get_trials(deepcopy=False), base, settings) == []


def test_a_longer_candidate_s_race_runs_up_to_longer_factor_times_the_samples():
    settings = make_settings()
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True, attrs=_reach(10.0, 1000.0, True))
    longer = add(study, 300.0, 1.4, batch_size=128, lr=0.01, attrs=_reach(6.0, 1800.0))
    other = add(study, 200.0, 1.0, batch_size=64, lr=0.02)
    same = add(study, 200.0, 1.0, num_workers=2)
    assert race_length(settings, 512, longer, base) == int(LONGER_FACTOR * settings.samples) == 2048
    assert race_length(settings, 4096, longer, base) == 4096  # a longer confirmation: as long as it
    assert race_length(settings, 512, other, base) == settings.samples  # its loss is judged at --samples
    assert race_length(settings, 512, same, base) == 512  # the baseline's math: a rate, at any length


def test_a_run_longer_than_the_search_s_that_did_not_reach_the_target_is_never_there_not_extrapolated():
    settings = make_settings()
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    cand = add(study, 300.0, 1.4, batch_size=128, lr=0.01)
    # the candidate's runs trained their 2,048 samples without reaching it: extrapolated times
    race(study, cand.number, [100.0, 101.0], [300.0, 310.0], samples=2048, reach=([8.0, 8.2], [3.0, 3.1]), stopped=("incumbent",), reached=False)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert all(math.isinf(p.candidate_reach) for p in got.pairs) and got.verdict.outcome != "win"
    # at the search's own budget, an extrapolated time still counts (a feasible candidate's race)
    study = make_study(samples=2048)
    add(study, 100.0, 1.0, baseline=True)
    cand = add(study, 300.0, 1.0, batch_size=128, lr=0.01)
    race(study, cand.number, [100.0, 101.0], [300.0, 310.0], samples=2048, reach=([8.0, 8.2], [3.0, 3.1]), reached=False)
    (got,) = races_of(study.get_trials(deepcopy=False), make_settings(samples=2048))
    assert [p.candidate_reach for p in got.pairs] == [3.0, 3.1]


def test_a_longer_candidate_that_wins_is_recommended_with_more_epochs(monkeypatch, tmp_path):
    """The zoo's vision transformer: batch 128 at a larger lr missed the loss at --samples, but its curve
    reached the baseline's loss sooner with more samples. Its race runs up to twice --samples, stopping
    at that loss; it wins on the seconds to it, and the export trains it as many times longer as its
    paired runs needed more samples (max_epochs 10 -> 17, max_steps in its larger batches' steps), its header comparing the paired runs' losses."""
    from autotune.study import racing
    from autotune.study.publish import export_study
    from autotune.study.records import confirmation, recommendation
    from autotune.study.settings import settings_of
    from autotune.summary import samples_ratio

    study = make_study(hardware=CPU, model_info={"training_length": {"max_epochs": 10, "max_steps": 1000}})
    settings = settings_of(study)
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 10000.0}])
    add(study, 100.0, 1.0, baseline=True, attrs=_reach(9.0, 900.0, True))
    longer = add(study, 300.0, 1.4, batch_size=128, lr=0.01, attrs=_reach(5.0, 1500.0))
    info = dict(study.user_attrs["baseline"], loss_target=0.9)
    study.set_user_attr("baseline", info)
    runs = {0: (100.0, 9.0, 900.0, 1.0), longer.number: (300.0, 5.0, 1500.0, 1.02)}  # samples/s, s and samples to target, loss
    queued = []

    def drain(study, *args, **kwargs):
        ran = 0
        while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            trial = study.ask()
            queued.append(dict(trial.user_attrs))
            of = study.get_trials(deepcopy=False)[trial.user_attrs["confirm_of"]]
            sps, seconds, samples, loss = runs[of.number]
            attrs = {"config": of.user_attrs["config"], "samples_per_sec": sps, "loss": loss, "stopped_at_target": True,
                     "samples_seen": samples, "loss_target": 0.9, **_reach(seconds, samples, True)}
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            study.tell(trial, [sps])
            ran += 1
        return ran

    stages = []

    class Quiet:
        def info(self, message):
            pass

        def stage(self, message, trials):
            stages.append(message)

    monkeypatch.setattr(racing, "drain_queue", drain)
    pools = type("Pools", (), {"cold": True})()
    racing.race_candidates(study, settings, Quiet(), 3, 6, None, 0.2, cold=True, storage_url="", pools=pools)
    assert queued and {q["confirm_samples"] for q in queued} == {2 * settings.samples} and all(q["stop_at_target"] == 0.9 for q in queued)
    assert "pairs of back-to-back runs (up to 6 pairs each; a clear win is decided at 1 or 2, anything else at 2 or more) of 2,048 training samples (what fits" in stages[0]
    assert "other math" not in stages[0]  # every race at the confirmation's own length
    confirmed = confirmation(study, settings)
    assert [r.candidate for r in confirmed.won] == [longer.number] and confirmed.won[0].verdict.timed
    assert 1.75 < confirmed.ratio < 1.85  # 9 s over 5 s
    assert samples_ratio(confirmed, study.get_trials(deepcopy=False)) == 1500.0 / 900.0
    recommended, baseline = recommendation(study, settings)
    text = export_study(study, settings, recommended, baseline, tmp_path / "best.yaml", "sqlite:///x.db").read_text()
    assert yaml.safe_load(text)["trainer"]["max_epochs"] == 17  # ceil(10 x 1.667)
    assert yaml.safe_load(text)["trainer"]["max_steps"] == 209  # ceil(1000 x 16 / 128 x 1.667): steps of 8x the samples
    assert (
        f"# training length: the config of trial {longer.number} reached the baseline's training loss after 1.67x the baseline's "
        "training samples (median of its paired runs), and sooner: it changes the training math, so train it 1.67x as long for the "
        "baseline's loss: the export raises max_epochs from 10 to 17 and lowers max_steps from 1,000 to 209 (1,000 x 1.67 x 16 / 128, "
        "rounded up: 1.67x the samples in steps of effective batch 128, not 16)"
    ) in text
    assert "max_epochs=10, as in your own runs" not in text
    # the loss line compares the paired runs at the baseline's training loss, not the search trial's 1.4 at --samples
    assert "val_loss: 1.02 vs baseline 1 (tolerance 5%), after 1500 training samples (its paired run stopped" in text


def test_a_longer_candidate_s_pair_is_predicted_to_its_extrapolated_samples_to_the_target():
    import datetime
    from types import SimpleNamespace

    from autotune.study.racing import pair_seconds

    settings = make_settings()  # 1,024 samples per trial
    t0 = datetime.datetime(2026, 1, 1)

    def trial(sps, **attrs):  # a search trial of 1,024 samples with 1 s of overhead
        end = t0 + datetime.timedelta(seconds=1.0 + settings.samples / sps)
        return SimpleNamespace(datetime_start=t0, datetime_complete=end, user_attrs={"samples_per_sec": sps, **attrs})

    base = trial(100.0, time_to_target=9.0, target_reached=True)  # 900 samples
    longer = trial(400.0, time_to_target=4.0, target_reached=False)  # 1,600 samples, extrapolated
    length = int(LONGER_FACTOR * settings.samples)
    assert abs(pair_seconds(settings, length, (base, longer), True) - (1.0 + 9.0 + 1.0 + 4.0)) < 1e-9
    # not stopping at the target (a DDP race): both train the whole 2,048 samples
    assert abs(pair_seconds(settings, length, (base, longer), False) - (1.0 + 20.48 + 1.0 + 5.12)) < 1e-9


def test_the_confirming_line_gives_the_run_length_of_a_race_of_other_math(monkeypatch):
    """A new user read 'of 512 training samples (the study's stored races)' and then a race of other math ran
    4,096-sample runs (its loss is judged at --samples): the line gives both lengths."""
    from autotune.study import racing
    from autotune.study.settings import settings_of

    study = make_study(hardware=CPU)
    settings = settings_of(study)
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 10000.0}])
    add(study, 100.0, 1.0, baseline=True, attrs=_reach(9.0, 900.0, True))
    add(study, 300.0, 1.4, batch_size=128, lr=0.01, attrs=_reach(5.0, 1500.0))  # a longer-training candidate
    stages = []
    ui = type("UI", (), {"info": lambda self, m: None, "stage": lambda self, m, n: stages.append(m)})()
    monkeypatch.setattr(racing, "confirm_samples", lambda *a, **k: (512, "the study's stored races"))
    class Stop(Exception):
        pass

    monkeypatch.setattr(racing, "_run_race", lambda *a, **k: (_ for _ in ()).throw(Stop()))  # the line is all this test reads
    pools = type("Pools", (), {"cold": True})()
    with pytest.raises(Stop):
        racing.race_candidates(study, settings, ui, 3, 6, None, 0.2, cold=True, storage_url="", pools=pools)
    assert (
        f"of 512 training samples (the study's stored races; a config of other math on runs of {2 * settings.samples:,}, its loss "
        "being judged at --samples or later)"
    ) in stages[0]
