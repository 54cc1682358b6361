"""Timed races stop their runs at the study's loss target (autotune.study.racing.stop_target), and their
stopped runs are judged on the seconds to it, not on their final losses."""

from __future__ import annotations

from autotune.study.races import races_of
from autotune.study.racing import stop_target
from study.helpers import add, make_settings, make_study, race

INFO = {"trial": 0, "loss": 1.0, "loss_target": 0.42}


def test_only_a_one_process_race_judged_on_the_seconds_to_the_target_stops_its_runs():
    study = make_study()
    base = add(study, 100.0, baseline=True)
    bigger = add(study, 400.0, batch_size=64, lr=0.2)  # another effective batch and lr: other math
    workers = add(study, 150.0, num_workers=2, precision="bf16-mixed")  # the baseline's math
    settings = make_settings()
    assert stop_target(settings, INFO, base, bigger) == 0.42
    assert stop_target(settings, INFO, base, workers) is None  # judged on samples/s at the race's length
    assert stop_target(settings.replace(devices=2), INFO, base, bigger) is None  # DDP ranks would have to agree
    assert stop_target(settings.replace(objective="time-to-quality"), INFO, base, bigger) is None
    assert stop_target(settings, {**INFO, "loss_target": None}, base, bigger) is None  # no loss curve: no target
    assert stop_target(settings, None, base, bigger) is None


def test_runs_stopped_at_the_target_are_judged_on_the_seconds_to_it_not_on_their_final_losses():
    settings = make_settings()
    for stopped, outcome in ((("incumbent", "candidate"), "win"), ((), "loss")):
        study = make_study()
        add(study, 100.0, baseline=True)
        cand = add(study, 400.0, batch_size=64, lr=0.2)
        # the candidate ends at a higher loss than the baseline (1.2 vs 1.0, past the 5% tolerance) but reached the
        # study's loss target 5x sooner in both pairs: stopped there, the final losses say nothing
        race(study, cand.number, [100.0, 102.0], [400.0, 398.0], incumbent_loss=1.0, candidate_loss=1.2,
             reach=([6.0, 6.2], [1.2, 1.25]), stopped=stopped)
        (got,) = races_of(study.get_trials(deepcopy=False), settings)
        assert got.verdict.outcome == outcome, got.verdict
    assert 4.5 < races_of(study.get_trials(deepcopy=False), settings)[0].verdict.ratio < 5.5


def test_a_pair_is_expected_to_take_each_trial_s_overhead_plus_its_samples_and_stopped_runs_only_to_the_target():
    import datetime
    from types import SimpleNamespace

    from autotune.study.racing import pair_seconds

    settings = make_settings()  # 1,024 samples per trial
    t0 = datetime.datetime(2026, 1, 1)

    def trial(wall, sps, **attrs):  # a search trial of settings.samples at sps: its overhead is wall - samples / sps
        end = t0 + datetime.timedelta(seconds=wall)
        return SimpleNamespace(datetime_start=t0, datetime_complete=end, user_attrs={"samples_per_sec": sps, **attrs})

    samples = settings.samples
    base = trial(3.0 + samples / 100.0, 100.0, time_to_target=8.0, target_reached=True)  # reached at 800 samples
    fast = trial(1.0 + samples / 400.0, 400.0, time_to_target=0.5, target_reached=True)  # at 200: under a quarter
    assert pair_seconds(settings, samples, (base, fast), False) == 3.0 + samples / 100.0 + 1.0 + samples / 400.0
    # stopped at the target: the baseline trains to 800 samples, the candidate to the quarter of its run checked first
    assert abs(pair_seconds(settings, samples, (base, fast), True) - (3.0 + 8.0 + 1.0 + samples / 4 / 400.0)) < 1e-9
    never = trial(3.0 + samples / 100.0, 100.0, time_to_target=float("inf"), target_reached=False)
    assert abs(pair_seconds(settings, 2 * samples, (never, fast), True) - (3.0 + 2 * samples / 100.0 + 1.0 + 2 * samples / 4 / 400.0)) < 1e-9


def test_a_later_race_starts_only_when_the_pairs_it_needs_fit_the_first_when_one_does():
    from autotune.study.racing import _current, _over_budget

    study = make_study()
    base = add(study, 100.0, baseline=True)
    cand = add(study, 400.0, num_workers=2)  # the baseline's math: its runs train all 1,024 samples
    other = add(study, 380.0, num_workers=1)
    # 200 s of search allow 50 s of confirmation (20% of the run); 30 s are spent; a pair is expected to take
    # 1,024 / 100 + 1,024 / 400 = 12.8 s (no start-up: these trials have no wall times)
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}, {"stage": "confirm", "wall_seconds": 30.0}])
    settings = make_settings()
    budget = (0.2, 0.0)
    empty = _current(study, settings, base.number, cand.number, settings.samples, 6)
    assert not _over_budget(study, settings, empty, base, cand, budget, True)  # 42.8 s: one pair fits
    # the next candidate against the baseline (the first race lost): 1,024 / 100 + 1,024 / 380 = 12.9 s a pair
    later = _current(study, settings, base.number, other.number, settings.samples, 6)
    assert _over_budget(study, settings, later, base, other, budget, False)  # its 2 pairs: 55.9 s > 50 s
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}, {"stage": "confirm", "wall_seconds": 20.0}])
    assert not _over_budget(study, settings, later, base, other, budget, False)  # 45.9 s: both fit


def test_the_outcome_line_says_whether_the_budget_stopped_a_race_ahead_or_behind():
    from autotune.study.races import Confirmation
    from autotune.study.records import confirmation
    from autotune.summary import confirmation_lines

    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    cand = add(study, 150.0, num_workers=2)
    assert confirmation_lines(Confirmation((), (), 0, 0, 1024, 1.0, 1.0, 1.0, 0, None, None), "throughput")[0].startswith(
        "not confirmed: a pair of runs of the best candidate and the baseline would take confirmation past its budget"
    )
    race(study, cand.number, [100.0], [150.0])  # one pair, 1.5x, and the budget stopped the race
    (line, *races) = confirmation_lines(confirmation(study, settings), "throughput")
    assert line.startswith(f"not confirmed: trial {cand.number}'s config was 1.50x faster over 1 pair(s) of runs vs the baseline")
    assert "a larger --confirm-share" in line and races == []  # the outcome line said it all: no race line repeats it
    decided = make_study()
    add(decided, 100.0, baseline=True)
    race(decided, add(decided, 150.0, num_workers=2).number, [100.0, 100.0, 100.0], [99.0, 101.0, 98.0])  # not faster
    (line, *races) = confirmation_lines(confirmation(decided, settings), "throughput")
    assert line.startswith("confirmed: no candidate was shown at least 5% better than the baseline")
    assert ", 0.99x as fast [" in races[0]  # a ratio below 1 reads as a speed, not "as good"
    behind = make_study()
    add(behind, 100.0, baseline=True)
    slow = add(behind, 150.0, num_workers=2)
    race(behind, slow.number, [100.0], [92.0])  # one pair, 0.92x, and the budget stopped the race: not "confirmed"
    (line, *races) = confirmation_lines(confirmation(behind, settings), "throughput")
    assert line.startswith(f"not confirmed: the confirmation budget stopped trial {slow.number}'s race before a decision"), line
    assert "0.92x as fast over 1 pair(s)" in line and line.endswith("the baseline is recommended (1.00x)"), line


def test_candidates_the_budget_left_unraced_are_named_while_a_decided_race_does_not_read_as_confirmed():
    # a new user's feasible config at 13x the baseline's speed to the target went unmentioned under
    # "confirmed: no candidate was shown at least 5% better": a same-math race had spent the budget
    from autotune.study.racing import _left_unraced
    from autotune.study.records import confirmation
    from autotune.summary import confirmation_lines

    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    same = add(study, 110.0, num_workers=2)
    fast = add(study, 700.0, batch_size=64, lr=0.1)
    race(study, same.number, [100.0, 100.0, 100.0], [99.0, 101.0, 98.0])  # decided: not faster
    _left_unraced(study, [fast, same])
    _left_unraced(study, [fast])  # a later run's: listed once
    confirmed = confirmation(study, settings)
    assert confirmed.unraced == (fast.number,)  # the raced one is not "unraced"
    (line, *rest) = confirmation_lines(confirmed, "throughput")
    assert line.startswith("not confirmed: no candidate raced was shown at least 5% better") and "1 other(s) were not raced" in line
    assert rest[-1] == (f"not raced: trial {fast.number}'s config, found in the search: the confirmation budget had no room for "
                        "its pairs; a longer search (--trials) or a larger --confirm-share makes room")


def test_a_race_s_replicate_runs_include_each_config_s_search_trial_when_it_trained_as_many_samples():
    settings = make_settings()  # samples=1024
    outcomes = {}
    for samples in (1024, 2048):
        study = make_study()
        add(study, 100.0, baseline=True)
        cand = add(study, 150.0, num_workers=2)  # the baseline's math: judged on samples/s
        # 1.50x then 1.20x: the pairs alone give an interval from 0.51x to 2.6x; the baseline's search trial and its
        # first run agree (100), the candidate's three runs too (150)
        race(study, cand.number, [100.0, 125.0], [150.0, 150.0], samples=samples)
        (got,) = races_of(study.get_trials(deepcopy=False), settings)
        outcomes[samples] = got.verdict
    assert outcomes[1024].outcome == "win" and outcomes[1024].df == 4  # 2 + 2 degrees: each config's 3 runs
    assert outcomes[2048].outcome == "running" and outcomes[2048].df in (-1, 2)  # runs longer than the search's: pairs only


def test_a_resumed_confirmation_races_a_new_candidate_against_the_chain_s_winner_not_the_baseline(monkeypatch):
    """A new user's resumed search: trial 7 had won against the baseline (1.63x), the resumed search found a
    faster config and raced it against the baseline (2.16x, a win) while the summary and the export still
    recommended trial 7: a race from the baseline could not extend the chain."""
    from autotune.study import racing
    from autotune.study.records import confirmation

    settings = make_settings()
    study = make_study()
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 1000.0}])
    add(study, 100.0, baseline=True)
    winner = add(study, 300.0, num_workers=2)
    lost = add(study, 280.0, num_workers=1)
    race(study, winner.number, [100.0, 102.0, 98.0], [300.0, 310.0, 305.0], samples=1024)
    race(study, lost.number, [300.0, 305.0, 302.0], [200.0, 205.0, 198.0], incumbent=winner.number, samples=1024)
    new = add(study, 500.0, num_workers=3)  # the resumed search's find
    raced, messages = [], []

    def run_race(study, settings, ui, incumbent, candidate, lengths, *rest):
        samples, _ = lengths  # (the confirmation's samples per run, this race's)
        raced.append((incumbent.number, candidate.number))
        race(study, candidate.number, [300.0, 301.0, 299.0], [500.0, 510.0, 505.0], incumbent=incumbent.number, samples=samples)
        return racing._current(study, settings, incumbent.number, candidate.number, samples, 6), 6

    class Recorder:
        def info(self, message):
            messages.append(message)

        def stage(self, message, trials):
            messages.append(message)

    monkeypatch.setattr(racing, "_run_race", run_race)
    ran = racing.race_candidates(study, settings, Recorder(), 3, 6, None, 0.2, cold=True, storage_url="", pools=object())
    assert raced == [(winner.number, new.number)] and ran == 6  # the lost candidate is not raced again
    assert f"against trial {winner.number}'s config" in messages[0]
    confirmed = confirmation(study, settings)
    assert [r.candidate for r in confirmed.won] == [winner.number, new.number] and confirmed.chosen == new.number
    assert confirmed.ratio > 4.0  # 3x then 1.68x, chained
    raced.clear()
    assert racing.race_candidates(study, settings, Recorder(), 3, 6, None, 0.2, cold=True, storage_url="", pools=object()) == 0
    assert raced == [] and f"the recommendation stands (trial {new.number}'s config)" in messages[-1]


def test_a_short_paired_run_is_smoothed_over_the_window_the_target_was_set_with():
    """A 512-sample paired run of a 2,048-sample study: a tenth of its own samples (51) caught one noisy dip
    below the target; over the target's own window (205 samples) it stays above, as it is."""
    from autotune.study import BASELINE_ATTR
    from autotune.study.tell import _judge

    study = make_study(samples=2048)
    settings = make_settings(samples=2048)
    add(study, 100.0, 1.0, baseline=True)
    study.set_user_attr(BASELINE_ATTR, {**study.user_attrs[BASELINE_ATTR], "loss_target": 1.0})
    curve = [[s, 1.2] for s in range(16, 513, 16)]
    curve[26:29] = [[s, 0.7] for s, _ in curve[26:29]]  # three noisy steps at 432 to 464 samples
    trial = study.ask()
    trial.set_user_attr("confirm_samples", 512)
    trial.set_user_attr("config", make_settings().baseline_config)
    trial.set_user_attr("effective_batch_size", 16)
    measured = {"loss_curve": curve, "train_loss_final": 1.2, "metrics": {"val_loss": 1.2}, "samples_per_sec": 100.0, "samples_seen": 512}
    attrs: dict = {}
    _judge(study, trial, attrs, measured, settings, False)
    assert attrs["target_reached"] is False and attrs["loss_target"] == 1.0
    assert attrs["time_to_target"] is None or attrs["time_to_target"] > 512 / 100.0  # not on the dip: never, or extrapolated past the run


def test_a_shortened_confirmation_races_a_later_config_of_other_math_at_the_search_s_samples(monkeypatch):
    """A new user's resumed search: the winner had been confirmed on shortened (same-math) 1,024-sample runs,
    and every later candidate of other math was "not raced" for good (its race needs --samples runs). It
    now races at --samples, as part of the same confirmation (confirm_budget), against the chain's winner."""
    import optuna

    from autotune.study import racing
    from autotune.study.records import confirmation, recommendation
    from autotune.summary import confirmation_lines

    settings = make_settings(samples=2048)
    study = make_study(samples=2048)
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 10000.0}])
    add(study, 100.0, baseline=True)
    same = add(study, 300.0, num_workers=2)
    other = add(study, 600.0, batch_size=64, lr=0.1)
    race(study, same.number, [100.0, 101.0, 99.0], [300.0, 302.0, 298.0], samples=1024)  # shortened: the baseline's math
    speeds = {same.number: (300.0, 3.0), other.number: (600.0, 1.0)}  # samples/s, seconds to the loss target
    queued = []

    def drain(study, *args, **kwargs):
        ran = 0
        while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            trial = study.ask()
            queued.append(dict(trial.user_attrs))
            of = study.get_trials(deepcopy=False)[trial.user_attrs["confirm_of"]]
            sps, reach = speeds[of.number]
            for key, value in {"config": of.user_attrs["config"], "samples_per_sec": sps, "loss": 1.0, "time_to_target": reach}.items():
                trial.set_user_attr(key, value)
            study.tell(trial, [sps])
            ran += 1
        return ran

    class Quiet:
        def info(self, message):
            pass

        def stage(self, message, trials):
            pass

    monkeypatch.setattr(racing, "drain_queue", drain)
    pools = type("Pools", (), {"cold": True})()
    ran = racing.race_candidates(study, settings, Quiet(), 3, 6, None, 0.2, cold=True, storage_url="", pools=pools)
    assert ran >= 2 and {(q["confirm_samples"], q.get("confirm_budget"), q["incumbent"]) for q in queued} == {(2048, 1024, same.number)}
    confirmed = confirmation(study, settings)
    assert [r.candidate for r in confirmed.won] == [same.number, other.number] and confirmed.samples == 1024
    assert "(1,024 to 2,048 samples per run)" in confirmation_lines(confirmed, "throughput")[0]
    # the ratio is the chain's (each race against the winner before it), not one race's pairs against the baseline
    assert "pair(s) of runs in a chain of 2 won races from the baseline" in confirmation_lines(confirmed, "throughput")[0]
    recommended, baseline = recommendation(study, settings)
    assert recommended.user_attrs["confirm_of"] == other.number and baseline.number == 0  # the baseline's own 2,048-sample run


def test_a_race_of_other_math_behind_on_the_loss_is_not_called_ahead_and_its_loss_leads_its_line():
    from autotune.study.records import confirmation
    from autotune.summary import confirmation_lines

    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    bigger = add(study, 200.0, batch_size=64, lr=0.2)  # other math: judged on the seconds to the loss target
    # one pair, 2x the samples/s, but it never reached the baseline's loss: a longer race would not make room for a win
    race(study, bigger.number, [100.0], [200.0], reach=([0.65], [None]))
    (line, *races) = confirmation_lines(confirmation(study, settings), "throughput")
    assert line.startswith(f"not confirmed: the confirmation budget stopped trial {bigger.number}'s race before a decision"), line
    assert "slower to the baseline's training loss in its pair(s)" in line and "--confirm-share" not in line, line
    # its own race line (shown when its runs were longer than the confirmation's) leads with the loss too (helper-28 read
    # "3.56x faster ... stopped before a decision" for a config slower to the baseline's loss)
    from autotune.summary import behind_on_loss, race_line

    (stopped,) = confirmation(study, settings).races
    assert behind_on_loss(stopped) and not stopped.verdict.decided
    said = race_line(bigger.number, stopped.verdict, "throughput", "the baseline", " (2,048 samples per run)", "stopped: budget spent",
                     behind=behind_on_loss(stopped))
    assert said.startswith(f"race: trial {bigger.number}'s config (2,048 samples per run): stopped: budget spent, slower to the "
                           "baseline's training loss in its pair(s); on throughput alone it was 2.00x faster"), said
    # decided: two pairs, lost on the loss; the line leads with the loss, the samples/s after it as what they were
    lost = make_study()
    add(lost, 100.0, baseline=True)
    bigger = add(lost, 200.0, batch_size=64, lr=0.2)
    race(lost, bigger.number, [100.0, 100.0], [200.0, 230.0], reach=([0.65, 0.7], [None, None]))
    (line, *races) = confirmation_lines(confirmation(lost, settings), "throughput")
    assert races[0].startswith(f"race: trial {bigger.number}'s config: loss: slower to the baseline's training loss: median never"), races
    assert "; on throughput alone it was 2.1" in races[0] and "x faster" in races[0], races
    # a race of the baseline's math ahead when stopped still says what makes room: its reach is not judged
    same = make_study()
    add(same, 100.0, baseline=True)
    workers = add(same, 150.0, num_workers=2)
    race(same, workers.number, [100.0], [150.0], reach=([0.65], [None]))
    assert "a larger --confirm-share" in confirmation_lines(confirmation(same, settings), "throughput")[0]


def test_a_race_of_other_math_without_times_to_the_target_says_it_was_judged_on_samples_per_second():
    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    bigger = add(study, 200.0, batch_size=64, lr=0.2)  # other math, but its runs have no loss curve to time
    race(study, bigger.number, [100.0, 101.0], [200.0, 205.0])
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert got.verdict.outcome == "win" and not got.verdict.timed
    assert "(on samples/s, not on the seconds to the baseline's training loss: not every run has a finite time" in got.verdict.reason
    broken = make_study()
    add(broken, 100.0, baseline=True)
    crashed = add(broken, 200.0, batch_size=64, lr=0.2)
    race(broken, crashed.number, [100.0], [200.0], failed=1)  # a failed run decides it: nothing was compared
    (got,) = races_of(broken.get_trials(deepcopy=False), settings)
    assert got.verdict.outcome == "failed" and "not on the seconds" not in got.verdict.reason
    same = make_study()
    add(same, 100.0, baseline=True)
    workers = add(same, 200.0, num_workers=2)  # the baseline's math: samples/s is its measure, nothing to add
    race(same, workers.number, [100.0, 101.0], [200.0, 205.0])
    (got,) = races_of(same.get_trials(deepcopy=False), settings)
    assert got.verdict.outcome == "win" and "not on the seconds" not in got.verdict.reason


def test_a_paired_run_that_fails_once_is_run_again_and_a_race_failed_twice_says_why():
    """helper-32: one transient fault in a paired run ended the race as "failed", the summary said "confirmed:
    no candidate was shown ... better", and no later search raced that config again."""
    from autotune.study.records import confirmation
    from autotune.summary import confirmation_lines

    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    cand = add(study, 200.0, num_workers=2)
    race(study, cand.number, [100.0], [200.0])
    attrs = {"confirm_of": cand.number, "confirm_samples": 2048, "pair_of": cand.number, "pair_index": 1, "incumbent": 0, "pair_cap": 6,
             "fail_kind": "exception", "fail_reason": "exception in user code: OSError: corrupt record 1617 at model.py:48"}
    add(study, 110.0, attrs={k: v for k, v in attrs.items() if not k.startswith("fail_")} | {"confirm_of": 0})  # pair 1's incumbent run
    first = add(study, None, None, state="FAIL", attrs=attrs, num_workers=2)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert got.verdict.outcome == "running" and got.missing == ((1, "candidate"),)  # queued again, not a failed race
    again = add(study, None, None, state="FAIL", attrs=attrs, num_workers=2)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert got.verdict.outcome == "failed" and got.missing == ()
    assert got.verdict.reason == (f"1 paired run(s) failed, each tried twice (trial {again.number}: exception in user code: OSError: "
                                  "corrupt record 1617 at model.py:48)") and first.number < again.number
    lines = confirmation_lines(confirmation(study, settings), "throughput")
    assert any(line.startswith(f"not confirmed: trial {cand.number}'s race failed (1 paired run(s) failed, each tried twice") for line in lines), lines
    assert not any(line.startswith("confirmed:") for line in lines), lines


def _timed(wall: float, sps: float, state: str = "COMPLETE", **attrs):
    """A finished trial of ``make_settings().samples`` at ``sps`` whose wall time was ``wall`` seconds (frozen-trial-like)."""
    import datetime
    from types import SimpleNamespace

    t0 = datetime.datetime(2026, 1, 1)
    return SimpleNamespace(number=attrs.pop("number", 0), state=SimpleNamespace(name=state), datetime_start=t0,
                           datetime_complete=t0 + datetime.timedelta(seconds=wall), user_attrs={"samples_per_sec": sps, **attrs})


def test_one_run_s_one_off_overhead_is_not_expected_again_but_a_compiled_config_s_is():
    from types import SimpleNamespace

    from autotune.study.racing import pair_seconds, run_seconds, typical_overheads

    settings = make_settings()  # 1,024 samples a trial
    n = settings.samples
    # bn_cnn's baseline trial: 1.7 s of overhead once (0.86 s after its last step), the other runs 0.5-0.7 s
    base = _timed(1.7 + n / 100.0, 100.0, config={"compile": False})
    others = [_timed(o + n / 200.0, 200.0, config={"compile": False}) for o in (0.5, 0.6, 0.7)]
    compiled = _timed(20.0 + n / 400.0, 400.0, config={"compile": "default"})  # compilation, paid by every run of it
    duplicate = _timed(0.0, 200.0, config={"compile": False}, duplicate_of=1)  # not run: no overhead to count
    failed = _timed(9.0, 200.0, state="FAIL", config={"compile": False})
    study = SimpleNamespace(get_trials=lambda deepcopy=False: [base, *others, compiled, duplicate, failed])
    typical = typical_overheads(study, settings)
    assert list(typical) == [False] and abs(typical[False] - 0.65) < 1e-9  # the median of 1.7, 0.5, 0.6 and 0.7; one compiled run is too few for a median
    assert run_seconds(base, settings, n) == (1.7 + n / 100.0 - n / 100.0, 100.0)  # its own, without the study's
    assert run_seconds(base, settings, n, typical)[0] == typical[False]
    assert abs(run_seconds(others[0], settings, n, typical)[0] - 0.5) < 1e-9  # below the median: its own
    assert abs(run_seconds(compiled, settings, n, typical)[0] - 20.0) < 1e-9
    assert abs(pair_seconds(settings, n, (base, compiled), False, typical) - (0.65 + n / 100.0 + 20.0 + n / 400.0)) < 1e-6


def test_the_best_candidate_races_first_when_its_runs_stopped_at_the_target_fit_the_budget():
    from autotune.study.racing import same_math_first

    settings = make_settings(samples=4096)
    study = make_study(samples=4096)
    base = add(study, 100.0, baseline=True, attrs={"time_to_target": 10.0, "target_reached": True})  # at 1,000 samples
    same = add(study, 120.0, num_workers=2)  # the baseline's math
    other = add(study, 200.0, batch_size=64, lr=0.2, attrs={"time_to_target": 2.0, "target_reached": True})  # at 400
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}])  # 50 s for confirmation
    # full-length pairs: 4,096 / 100 + 4,096 / 200 = 61 s each, 2 would not fit; with no loss target to stop at the
    # same-math candidate races first (on shorter runs)
    assert same_math_first(study, settings, [other, same], base, 0.2) == [same, other]
    # stopped at the baseline's loss target: 10 s + 1,024 samples (the quarter checked first) / 200 = 15.1 s a pair
    study.set_user_attr("baseline", {**study.user_attrs["baseline"], "loss_target": 0.9})
    assert same_math_first(study, settings, [other, same], base, 0.2) == [other, same]
    # under time-to-quality (no run stops at the target) the full-length prediction stands
    assert same_math_first(study, settings.replace(objective="time-to-quality"), [other, same], base, 0.2) == [same, other]


def test_a_pair_split_by_an_interruption_counts_only_once_both_halves_ran_in_one_search_run():
    """helper-34: pair 0's incumbent run completed before Ctrl-C (11,798 samples/s), its candidate run after the
    resume in another process (951 samples/s); the race read "0.12x as fast" from runs that were not back to back."""
    from autotune.study.races import PAIR_RUN_ATTR

    settings = make_settings()
    study = make_study()
    add(study, 100.0, baseline=True)
    cand = add(study, 200.0, num_workers=2)
    attrs = {"confirm_samples": 2048, "pair_of": cand.number, "pair_index": 0, "incumbent": 0, "pair_cap": 6}
    add(study, 11798.0, attrs=attrs | {"confirm_of": 0, PAIR_RUN_ATTR: "run-a"})  # before Ctrl-C
    add(study, None, None, state="FAIL", attrs=attrs | {"confirm_of": cand.number, PAIR_RUN_ATTR: "run-a", "fail_kind": "interrupted"},
        num_workers=2)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert got.missing == ((0, "candidate"),) and not got.pairs
    # the resumed search run (run-b) queues both runs of the pair again, in its order (pair 0: the incumbent first)
    (got,) = races_of(study.get_trials(deepcopy=False), settings, current="run-b")
    assert got.missing == ((0, "incumbent"), (0, "candidate")) and not got.pairs
    (got,) = races_of(study.get_trials(deepcopy=False), settings, current="run-a")  # the same run: only the missing run
    assert got.missing == ((0, "candidate"),)
    add(study, None, None, state="WAITING", attrs=attrs | {"confirm_of": cand.number}, num_workers=2)  # (a study from before: queued again)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert (got.pending, got.waiting_index, got.missing) == (1, 0, ())  # the live line names pair 0, the pair it runs
    study = make_study()  # the queued run ran in the resumed search run: the incumbent's half runs again beside it
    add(study, 100.0, baseline=True)
    cand = add(study, 200.0, num_workers=2)
    add(study, 11798.0, attrs=attrs | {"confirm_of": 0, PAIR_RUN_ATTR: "run-a"})
    add(study, 951.0, attrs=attrs | {"confirm_of": cand.number, PAIR_RUN_ATTR: "run-b"}, num_workers=2)
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert (got.pairs, got.missing, got.next_index) == ((), ((0, "incumbent"),), 1)
    again = add(study, 480.0, attrs=attrs | {"confirm_of": 0, PAIR_RUN_ATTR: "run-b"})
    (got,) = races_of(study.get_trials(deepcopy=False), settings)
    assert [p.runs for p in got.pairs] == [(again.number, again.number - 1)] and got.missing == ()
    assert 1.9 < got.pairs[0].candidate / got.pairs[0].incumbent < 2.0  # 951 vs 480, both after the resume, not vs 11,798
    from autotune.report import trial_rows
    from autotune.study.races import uncounted_runs

    assert uncounted_runs(study.get_trials(deepcopy=False)) == {again.number - 2}  # the run from before the interruption
    notes = {r["number"]: r["note"] for r in trial_rows(None, trials=study.get_trials(deepcopy=False))}
    assert notes[again.number - 2] == f"confirms #0 (pair 0 of #{cand.number}; not counted: the pair's other run ran in a later search run)"
    assert notes[again.number] == f"confirms #0 (pair 0 of #{cand.number})"
    # runs stored before the attribute existed (no search run recorded) pair as before
    legacy = make_study()
    add(legacy, 100.0, baseline=True)
    cand = add(legacy, 200.0, num_workers=2)
    race(legacy, cand.number, [100.0], [200.0])
    (got,) = races_of(legacy.get_trials(deepcopy=False), settings)
    assert len(got.pairs) == 1 and got.missing == ()
