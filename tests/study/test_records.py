"""The study's records, its baseline, and the recommendation with and without confirmation runs."""

import math

import optuna
import pytest

from autotune.study import confirm_candidates, confirmation, recommendation, records_of
from autotune.study.records import _baseline_pending, _first_baseline, _search_records
from autotune.study.settings import StudySettings

from .helpers import add, make_study, race


def _settings(study):
    return StudySettings.from_dict(study.user_attrs["autotune"])


def test_records_of_reduces_every_trial_and_reads_a_target_never_reached_as_inf():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True, attrs={"time_to_target": 2.5, "target_reached": True})
    add(study, 150.0, 1.01, attrs={"time_to_target": None, "goodput": 90.0}, batch_size=32)
    add(study, None, None, state="FAIL", attrs={"fail_kind": "oom"}, batch_size=512)
    records = records_of(study)
    assert [(r.number, r.complete, r.baseline) for r in records] == [(0, True, True), (1, True, False), (2, False, False)]
    assert records[0].time_to_target == 2.5 and records[0].target_reached
    assert records[1].time_to_target == math.inf and not records[1].target_reached and records[1].goodput == 90.0
    assert math.isnan(records[2].samples_per_sec) and math.isnan(records[2].loss) and math.isnan(records[2].time_to_target)


def test_a_study_without_a_baseline_recommends_nothing():
    study = make_study()
    add(study, 500.0, 1.0, batch_size=64)  # a completed trial, but no baseline to judge its loss against
    assert recommendation(study, _settings(study)) == (None, None)
    assert confirm_candidates(study, _settings(study), 3) == []
    assert confirmation(study, _settings(study)) is None


def test_the_fastest_feasible_trial_is_recommended_not_a_faster_infeasible_one():
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    add(study, 300.0, 1.2, batch_size=128)  # fastest, but its loss is 20% worse: infeasible
    good = add(study, 200.0, 1.04, batch_size=64)  # within 5%
    add(study, 180.0, 0.9, batch_size=32)
    add(study, None, None, state="FAIL", attrs={"fail_kind": "crashed"}, batch_size=256)
    recommended, baseline = recommendation(study, _settings(study))
    assert recommended.number == good.number and baseline.number == base.number


def test_a_config_of_the_baseline_s_math_told_feasible_at_the_wider_tolerance_is_a_candidate():
    """A new user's report: trial 5 (the baseline's math, 2.8x faster, loss 46% up against a 30% tolerance
    whose same-math limit is 90%) was shown and stored feasible, yet confirmation said "no feasible config
    other than the baseline to race": the candidates re-judged its loss at the plain tolerance."""
    study = make_study(loss_tolerance=0.3)
    add(study, 650.0, 0.0256, baseline=True)
    same = add(study, 1818.0, 0.0374, attrs={"feasible": True, "constraint": -0.011, "math": "preserving"},  # as tell.py judged it
               batch_size=16, accumulate_grad_batches=2)
    assert same.user_attrs["feasible"] and [t.number for t in confirm_candidates(study, _settings(study), 3)] == [same.number]
    assert recommendation(study, _settings(study))[0].number == same.number


def test_the_baseline_is_recommended_when_nothing_beats_it_within_tolerance():
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    add(study, 400.0, 1.5, batch_size=128)
    add(study, 100.0, 1.0, lr=0.02)  # as fast and as good: the tie goes to the baseline
    assert recommendation(study, _settings(study))[0].number == base.number


def test_with_mode_max_a_lower_metric_is_the_worse_one():
    study = make_study(mode="max", monitor="val_acc")
    add(study, 100.0, 0.90, baseline=True)
    add(study, 300.0, 0.80, batch_size=128)  # below 0.90 - 5% = 0.855
    within = add(study, 200.0, 0.86, batch_size=64)
    assert recommendation(study, _settings(study))[0].number == within.number


def test_short_runs_duplicates_and_confirmation_runs_are_not_search_records():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    full = add(study, 200.0, 1.0, batch_size=32)
    add(study, 900.0, 0.5, attrs={"trial_samples": 256, "stage": "system"}, batch_size=64)  # fastest, but a short run
    add(study, 200.0, 1.0, attrs={"duplicate_of": full.number}, batch_size=32)
    assert [r.number for r in _search_records(study)] == [0, 1]
    assert recommendation(study, _settings(study))[0].number == full.number  # not the short run's 900 samples/s
    race(study, full.number, [100.0], [250.0])
    assert [r.number for r in _search_records(study)] == [0, 1]


def test_a_stage_1_run_as_long_as_the_full_budget_is_a_search_record():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    whole = add(study, 300.0, 1.0, attrs={"stage": "system"}, batch_size=64)  # 32 steps of 64 were the whole budget: judged
    assert recommendation(study, _settings(study))[0].number == whole.number


def test_confirm_candidates_are_the_best_distinct_feasible_configs_without_the_baseline():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True, attrs={"time_to_target": 10.0, "target_reached": True})
    add(study, 450.0, 1.0, lr=0.05)  # the baseline's config measured again (an --enqueue'd repeat): never a candidate
    a = add(study, 400.0, 1.0, batch_size=64)
    add(study, 380.0, 1.0, batch_size=64)  # a's config again: one candidate per config
    add(study, 500.0, 1.3, batch_size=128)  # infeasible
    b = add(study, 300.0, 1.02, batch_size=32)
    add(study, 350.0, 1.0, attrs={"trial_samples": 256, "stage": "system"}, batch_size=256)  # short: not judged
    c = add(study, 150.0, 0.95, batch_size=32, accumulate_grad_batches=2)
    settings = _settings(study)
    assert [t.number for t in confirm_candidates(study, settings, 2)] == [a.number, b.number]
    assert [t.number for t in confirm_candidates(study, settings, 10)] == [a.number, b.number, c.number]
    assert confirm_candidates(study, settings, 0) == []
    # a config of the baseline's math its own search run measured no faster than the baseline's is not raced (its
    # race is on samples/s too); one of other math is (its race is on the seconds to the baseline's loss) when its
    # search run reached the loss target sooner than the baseline's: not when it was later, or its time is unknown
    # (a new user's model with no loss curve had a config at 116 samples/s vs 639 raced)
    add(study, 90.0, 1.0, num_workers=2)
    other = add(study, 95.0, 1.0, lr=0.5, attrs={"time_to_target": 8.0, "target_reached": True})
    add(study, 97.0, 1.0, lr=0.4, attrs={"time_to_target": 12.0, "target_reached": True})  # later to the target
    add(study, 98.0, 1.0, lr=0.3, attrs={"time_to_target": 6.0, "target_reached": False})  # an estimate: never reached
    add(study, 99.0, 1.0, lr=0.2)  # no loss curve: no time to the target
    assert [t.number for t in confirm_candidates(study, settings, 10)] == [a.number, b.number, c.number, other.number]


def test_confirmation_reads_the_races_of_the_latest_budget():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    fast = add(study, 300.0, 1.0, batch_size=64, precision="bf16-mixed")
    race(study, fast.number, [90.0, 95.0, 92.0], [300.0, 310.0, 305.0], samples=1024)  # an earlier budget: won there
    race(study, fast.number, [100.0, 104.0], [280.0, 290.0], samples=4096, failed=1)
    confirmed = confirmation(study, _settings(study))
    assert confirmed.samples == 4096 and len(confirmed.races) == 1
    (only,) = confirmed.races
    assert (only.incumbent, only.candidate, len(only.pairs), only.verdict.outcome) == (0, fast.number, 2, "failed")
    assert confirmed.chosen == 0 and confirmed.won == () and confirmed.ratio == 1.0  # a failed run: the baseline stays


def test_the_winners_median_paired_run_is_recommended_and_the_baseline_its_median_paired_run():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    fast = add(study, 300.0, 1.0, batch_size=64)
    add(study, 900.0, 1.0, batch_size=256)  # the best single run, never raced: not recommended
    pairs = race(study, fast.number, [104.0, 100.0, 98.0], [310.0, 250.0, 290.0])
    recommended, baseline = recommendation(study, _settings(study))
    assert recommended.number == pairs[2][1].number  # 290: the median, neither the fastest nor the first run
    assert baseline.number == pairs[1][0].number  # the baseline is its median paired run too
    confirmed = confirmation(study, _settings(study))
    assert confirmed.chosen == fast.number and confirmed.pairs == 3 and confirmed.low > 1.05


def test_a_candidate_that_wins_becomes_the_incumbent_of_the_next_race():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    a = add(study, 300.0, 1.0, batch_size=64)
    b = add(study, 400.0, 1.0, batch_size=128)
    race(study, a.number, [100.0, 102.0, 98.0], [200.0, 210.0, 205.0])
    pairs = race(study, b.number, [200.0, 205.0, 202.0, 198.0], [260.0, 270.0, 265.0, 262.0], incumbent=a.number)
    confirmed = confirmation(study, _settings(study))
    assert [r.candidate for r in confirmed.won] == [a.number, b.number] and confirmed.chosen == b.number
    assert confirmed.pairs == 7 and confirmed.ratio == pytest.approx(2.03 * 1.31, rel=0.03)
    assert recommendation(study, _settings(study))[0].number in {p[1].number for p in pairs}


def test_a_candidate_of_other_math_slower_to_the_baseline_s_loss_in_its_pairs_is_not_recommended():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    bigger = add(study, 130.0, 1.03, batch_size=64, lr=0.02)  # other math: fewer, larger steps
    race(study, bigger.number, [100.0, 102.0, 98.0], [130.0, 131.0, 128.0], candidate_loss=1.03,
         reach=([10.0, 11.0, 10.5], [27.0, 29.0, 30.0]))
    confirmed = confirmation(study, _settings(study))
    (only,) = confirmed.races
    # judged on its seconds to the baseline's loss (27-30 s against 10-11 s), not its 1.3x samples/s
    assert only.verdict.outcome == "slower" and "in seconds to the baseline's training loss" in only.verdict.reason
    assert only.verdict.ratio < 0.4
    assert confirmed.chosen == 0 and recommendation(study, _settings(study))[0].number != bigger.number
    # the same figures for a config of the same math (another loader worker count): samples/s decide, and it wins
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    workers = add(study, 130.0, 1.03, num_workers=2)
    race(study, workers.number, [100.0, 102.0, 98.0], [130.0, 131.0, 128.0], candidate_loss=1.03,
         reach=([10.0, 11.0, 10.5], [27.0, 29.0, 30.0]))
    assert confirmation(study, _settings(study)).chosen == workers.number


def test_a_speed_up_of_other_math_says_it_was_measured_to_the_baseline_s_loss_over_the_races_samples():
    from autotune.study import confirmed_speed
    from autotune.summary import speedup_line

    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    bigger = add(study, 300.0, 1.0, batch_size=64, lr=0.1)
    race(study, bigger.number, [100.0, 102.0, 98.0], [300.0, 301.0, 298.0], reach=([10.0, 11.0, 10.5], [5.0, 5.2, 5.1]))
    speed = confirmed_speed(study, _settings(study))
    assert speed["won"] and speed["timed"] and speed["ratio"] > 1.8
    line = speedup_line(speed, bigger, base)
    assert "faster" in line and "in seconds to the baseline's training loss in runs of up to 2,048 training samples" in line
    # a config of the baseline's math is judged on samples/s: no caveat
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    workers = add(study, 300.0, 1.0, num_workers=2)
    race(study, workers.number, [100.0, 102.0, 98.0], [300.0, 301.0, 298.0], reach=([10.0, 11.0, 10.5], [5.0, 5.2, 5.1]))
    speed = confirmed_speed(study, _settings(study))
    assert speed["won"] and not speed["timed"] and "training loss" not in speedup_line(speed, workers, base)


def test_a_raced_config_whose_loss_is_worse_at_the_longer_budget_is_not_recommended():
    study = make_study()
    base = add(study, 100.0, 1.0, baseline=True)
    fast = add(study, 300.0, 1.0, batch_size=64)
    race(study, fast.number, [100.0, 101.0, 99.0], [300.0, 301.0, 299.0], incumbent_loss=0.5, candidate_loss=0.6)
    recommended, baseline = recommendation(study, _settings(study))
    # 20% above the baseline's loss: the baseline at 1.00x, as its search trial (the whole --samples; a paired run of a
    # same-math race may be shorter, and the export's header would quote that run's loss)
    assert recommended.number == baseline.number == base.number
    assert confirmation(study, _settings(study)).races[0].verdict.outcome == "loss"


def test_the_first_baseline_that_did_not_fail_is_the_studys_baseline():
    study = make_study()
    assert _first_baseline(study) is None and not _baseline_pending(study)
    add(study, None, None, state="FAIL", baseline=True, attrs={"fail_kind": "crashed"})
    study.enqueue_trial({"batch_size": 16}, user_attrs={"baseline": True})
    study.enqueue_trial({"batch_size": 16}, user_attrs={"baseline": True})  # a second process queued one too
    assert _first_baseline(study) == 1 and _baseline_pending(study)
    trial = study.ask()  # trial 1 runs
    assert _baseline_pending(study)
    study.tell(trial, [100.0])
    assert _first_baseline(study) == 1 and _baseline_pending(study)  # trial 2 still waits
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    assert not _baseline_pending(study) and _first_baseline(study) == 1


def test_without_confirmation_optunas_best_trial_is_the_recommendation(tmp_path):
    # Optuna's best_trial (what `optuna best-trial` prints) over the same SQLite storage the CLI reads
    study = make_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    add(study, 100.0, 1.0, baseline=True)
    add(study, 300.0, 2.0, batch_size=64)  # fastest, but its loss breaks the tolerance: infeasible
    add(study, 900.0, 3.0, attrs={"trial_samples": 256}, batch_size=128)  # a short stage-1 run: not judged
    add(study, 200.0, 1.02, batch_size=32)
    add(study, 150.0, 1.0, batch_size=256)
    recommended, _ = recommendation(study, _settings(study))
    loaded = optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{tmp_path / 's.db'}")
    assert loaded.best_trial.number == recommended.number == 3


def test_with_confirmation_optunas_best_trial_is_the_fastest_single_run_not_the_recommendation():
    # what the README says: with confirmation, `optuna best-trial` names one lucky run; autotune the raced winner
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 220.0, 1.0, batch_size=32)  # fast once
    add(study, 190.0, 1.0, batch_size=64)
    race(study, 1, [100.0, 101.0, 99.0], [99.0, 102.0, 98.0])  # not borne out in paired runs
    pairs = race(study, 2, [100.0, 101.0, 99.0], [180.0, 182.0, 181.0])
    recommended, _ = recommendation(study, _settings(study))
    assert recommended.number == pairs[2][1].number  # trial 2's config, its median paired run
    assert study.best_trial.number == 1  # the single fastest feasible trial


class _GrowingStudy:
    """A study that another process adds a completed, faster trial to before every read of its trials
    (how the worker's ``IndexError`` in ``_search_records`` arose: numbers from a later read used to
    index an earlier one)."""

    def __init__(self, study):
        self._study = study

    def __getattr__(self, name):
        return getattr(self._study, name)

    def get_trials(self, *args, **kwargs):
        add(self._study, 1000.0 + len(self._study.trials), 1.0, batch_size=64)
        return self._study.get_trials(*args, **kwargs)


def test_queries_read_the_trials_once_while_other_processes_add_trials():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 200.0, 1.0, batch_size=32)
    growing = _GrowingStudy(study)
    records = _search_records(growing)
    assert [r.number for r in records] == list(range(len(records)))  # one snapshot: numbers 0..n-1, no gap, no IndexError
    candidates = confirm_candidates(growing, _settings(study), 2)
    assert candidates and all(c.user_attrs["samples_per_sec"] >= 200.0 for c in candidates)
    recommended, baseline = recommendation(growing, _settings(study))
    assert recommended is not None and recommended.user_attrs["samples_per_sec"] > 1000.0 and baseline.number == 0
    race(study, recommended.number, [100.0, 100.0, 100.0], [2000.0, 2100.0, 2200.0])
    recommended, baseline = recommendation(growing, _settings(study))
    assert recommended is not None and baseline is not None

def test_trial_log_is_the_stored_output_or_says_why_there_is_none():
    import pytest

    from autotune.errors import AutotuneError
    from autotune.study.records import trial_log

    study = make_study()
    ran = add(study, 100.0, 1.0, baseline=True, attrs={"log": "TINY-MARKER\n"})
    silent = add(study, 100.0, 1.0, attrs={"log": ""}, batch_size=32)
    copy = add(study, 100.0, 1.0, attrs={"duplicate_of": 0})
    unrun = add(study, None, None, state="PRUNED", attrs={"fail_kind": "predicted_oom"}, batch_size=512)
    old = add(study, None, None, state="FAIL", attrs={"fail_kind": "crashed", "log_tail": "Segmentation fault"}, batch_size=64)
    assert trial_log(ran, "s") == "TINY-MARKER\n" and trial_log(silent, "s") == ""
    with pytest.raises(AutotuneError, match=r"trial 2 was not run: it copies trial 0's figures .*`autotune show s 0 --log`"):
        trial_log(copy, "s")
    with pytest.raises(AutotuneError, match=r"trial 3 was not run \(predicted_oom\)"):
        trial_log(unrun, "s")
    with pytest.raises(AutotuneError, match=r"trial 4 has no stored output.*`autotune show s 4 --format json`"):
        trial_log(old, "s")
    study.enqueue_trial({})
    with pytest.raises(AutotuneError, match=r"trial 5 is waiting: its output is stored when it ends"):
        trial_log(study.trials[5], "s")


def test_a_race_holds_a_candidate_that_keeps_the_baselines_math_to_the_sanity_tolerance():
    """More loader workers change only the data order: a 10% higher loss is within the sanity check's
    15% (3 x 5%) and the race is won; the same loss gap on a larger batch (other math) loses it."""
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    workers = add(study, 300.0, 1.0, num_workers=2)
    race(study, workers.number, [100.0, 104.0, 98.0], [300.0, 310.0, 290.0], candidate_loss=1.10)
    confirmed = confirmation(study, _settings(study))
    assert confirmed.races[0].verdict.outcome == "win" and confirmed.chosen == workers.number

    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    bigger = add(study, 300.0, 1.0, batch_size=64)
    race(study, bigger.number, [100.0, 104.0, 98.0], [300.0, 310.0, 290.0], candidate_loss=1.10)
    confirmed = confirmation(study, _settings(study))
    assert confirmed.races[0].verdict.outcome == "loss" and confirmed.chosen == 0


def test_an_interrupted_race_is_resumed_by_the_search_not_by_a_worker():
    """Ctrl-C during confirmation re-queues the interrupted paired run; only the search races, so the
    resume line names the search command (a worker would run the queued run and leave the race undecided)."""
    from autotune.study.plan import _Plan
    from autotune.study.queue import _resume

    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    fast = add(study, 300.0, 1.0, batch_size=64)
    settings = _settings(study)
    plan = _Plan(study, "run-1", "flat", 4)
    assert _resume(study, settings, "sqlite:///s.db", plan) == ""  # nothing left, nothing queued
    study.enqueue_trial({"batch_size": 64}, user_attrs={"confirm_of": fast.number, "confirm_samples": 2048, "pair_of": fast.number,
                                                        "pair_index": 0, "incumbent": 0})
    assert _resume(study, settings, "sqlite:///s.db", plan).startswith("autotune search ")
    assert _resume(study, settings, "sqlite:///s.db", None).startswith("autotune worker ")  # no search run to continue
    # stopped while racing, its interrupted paired run not queued again (the next race queues its pair): the search resumes
    fresh = make_study()
    add(fresh, 100.0, 1.0, baseline=True)
    racing = _Plan(fresh, "run-2", "flat", 4)
    assert _resume(fresh, settings, "sqlite:///s.db", racing) == ""
    racing.racing = True
    assert _resume(fresh, settings, "sqlite:///s.db", racing).startswith("autotune search ")


def test_a_candidate_of_other_math_already_slower_to_the_target_is_raced_after_the_others():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True, attrs={"time_to_target": 10.0, "target_reached": True})
    slow = add(study, 900.0, 1.0, batch_size=64, attrs={"time_to_target": 30.0, "target_reached": False})  # fastest, slower to target
    never = add(study, 800.0, 1.0, batch_size=128, attrs={"time_to_target": None, "target_reached": False})
    same = add(study, 700.0, 1.0, num_workers=2, attrs={"time_to_target": 40.0, "target_reached": True})  # the baseline's math
    quick = add(study, 600.0, 1.0, batch_size=32, attrs={"time_to_target": 4.0, "target_reached": True})
    unknown = add(study, 500.0, 1.0, batch_size=256)  # no curve: not judged by it
    settings = _settings(study)
    assert [t.number for t in confirm_candidates(study, settings, 10)] == [same.number, quick.number, unknown.number, slow.number,
                                                                           never.number]
    assert [t.number for t in confirm_candidates(study, settings, 2)] == [slow.number, never.number]  # the 2 best, then ordered


def test_the_table_says_by_how_much_an_infeasible_trial_missed_the_loss_and_against_what_limit():
    from autotune.report import trial_rows

    study = make_study(loss_tolerance=0.05)
    add(study, 100.0, 1.0, baseline=True)
    other = add(study, 300.0, 1.2, batch_size=128)  # other math: the plain tolerance
    same = add(study, 150.0, 1.28, attrs={"feasible": False, "math": "preserving"}, num_workers=2)  # the sanity check's 15%
    fine = add(study, 120.0, 1.01, batch_size=64)
    notes = {r["number"]: r["note"] for r in trial_rows(study)}
    assert notes[other.number].endswith("loss +20% vs the baseline's (limit +5%)")
    assert notes[same.number].endswith("loss +28% vs the baseline's (limit +15%)") and notes[same.number].startswith("same math")
    assert "loss" not in notes[fine.number] and "loss" not in notes[0]
    # a score under --mode max is named, not called a loss (helper-29: "loss -15%" for an accuracy)
    scored = make_study(loss_tolerance=0.05, mode="max", monitor="val_acc")
    add(scored, 100.0, 0.86, baseline=True, attrs={"loss_source": "val_acc"})
    worse = add(scored, 300.0, 0.73, batch_size=128, attrs={"loss_source": "val_acc"})
    note = {r["number"]: r["note"] for r in trial_rows(scored)}[worse.number]
    assert note.endswith("val_acc -15% vs the baseline's (limit -5%)"), note


def test_a_near_tie_of_the_baseline_s_math_is_raced_only_when_no_other_candidate_is():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    far = add(study, 60.0, 1.0, precision="bf16-mixed")  # the baseline's math, far slower in its one run: not raced
    settings = _settings(study)
    assert confirm_candidates(study, settings, 3) == []
    near = add(study, 93.0, 1.0, num_workers=2)  # within 10% of the baseline's run: its race tells gain from noise
    assert [t.number for t in confirm_candidates(study, settings, 3)] == [near.number]
    assert confirm_candidates(study, settings, 0) == []
    faster = add(study, 150.0, 1.0, batch_size=64)  # another candidate: the budget goes to it, not to the near tie
    assert [t.number for t in confirm_candidates(study, settings, 3)] == [faster.number]
    assert far.number not in [t.number for t in confirm_candidates(study, settings, 3)]


def test_an_unconfirmed_recommendation_is_never_a_config_of_other_math_slower_to_the_baseline_s_loss():
    # helper-33: --confirm 0 recommended batch 64 at 1.38x the baseline's samples/s, which its own header
    # then called 0.62x as fast to the baseline's training loss, the figure a race would judge it on
    study = make_study()
    base = add(study, 1000.0, 1.0, baseline=True, attrs={"time_to_target": 1.07, "target_reached": True})
    later = add(study, 1380.0, 1.03, batch_size=64, lr=0.0707, attrs={"time_to_target": 1.73, "target_reached": False})
    workers = add(study, 1100.0, 1.0, num_workers=2, attrs={"time_to_target": 0.98, "target_reached": True})  # the same math
    recommended, baseline = recommendation(study, _settings(study))
    assert (recommended.number, baseline.number) == (workers.number, base.number) and later.number != recommended.number
    sooner = add(study, 1300.0, 1.02, batch_size=32, lr=0.07, attrs={"time_to_target": 0.8, "target_reached": True})
    assert recommendation(study, _settings(study))[0].number == sooner.number  # other math, sooner to the loss: it counts
    blind = make_study()  # no loss curve, no time to the target: samples/s alone, as before
    add(blind, 1000.0, 1.0, baseline=True)
    bigger = add(blind, 1380.0, 1.03, batch_size=64, lr=0.0707)
    assert recommendation(blind, _settings(blind))[0].number == bigger.number


def test_a_baseline_too_short_to_measure_the_objective_is_told_to_raise_samples_not_to_fix_the_model():
    """helper-37: --objective goodput --samples 16 failed the baseline with 'fix the model or its --config'."""
    from autotune.study.queue import _baseline_failed

    study = make_study(objective="goodput")
    failed = add(study, None, None, state="FAIL", baseline=True, attrs={
        "fail_kind": "no_noise_scale", "fail_reason": "goodput needs the gradient noise scale, and no step measured it; raise --samples"})
    message = str(_baseline_failed(study, _settings(study), failed))
    assert "; raise --samples, then run the same command again" in message and "fix the model" not in message
    crashed = add(study, None, None, state="FAIL", baseline=True, attrs={"fail_kind": "exception", "fail_reason": "ValueError"})
    assert "fix the model or its --config so the baseline trains" in str(_baseline_failed(study, _settings(study), crashed))
