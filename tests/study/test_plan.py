"""A search run's plan in the study (no training): what workers wait for and what the next search continues."""

import optuna

from autotune.errors import FailKind
from autotune.optuna_compat import study_system_attrs
from autotune.study.plan import PLAN_ATTR, _Plan, _take_over, continue_line, live_runs, same_host_line, stopped_runs
from autotune.study.queue import _requeue_interrupted

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_live_plan_keeps_workers_waiting_and_a_stopped_or_silent_one_is_continued(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_INTERVAL", "1")
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE", "30")
    study = optuna.create_study()
    live = _Plan(study, "live", "staged", 8)
    live.full = 3
    live.hold([({"batch_size": 32}, {"stage": "system"})], 2)
    assert [p["run"] for p in live_runs(study)] == ["live"] and live_runs(study, exclude="live") == []
    assert stopped_runs(study) == []
    stopped = _Plan(study, "stopped", "flat", 4)
    stopped.hold([], 3)
    stopped.end("interrupted")
    done = _Plan(study, "done", "flat", 2)
    done.end("done")
    # a search process killed with SIGKILL: its plan's heartbeat is older than the grace period
    killed = _Plan(study, "killed", "staged", 6)
    killed.save()
    old = study_system_attrs(study)[PLAN_ATTR + "killed"]
    study._storage.set_study_system_attr(study._study_id, PLAN_ATTR + "killed", {**old, "beat": old["beat"] - 31})
    assert [p["run"] for p in live_runs(study)] == ["live"]
    assert sorted(p["run"] for p in stopped_runs(study)) == ["killed", "stopped"]
    seeds = next(p for p in live_runs(study))["seeds"]
    assert seeds == [[{"batch_size": 32}, {"stage": "system"}]]
    line = continue_line([study_system_attrs(study)[PLAN_ATTR + "stopped"]], 5)
    assert line.startswith("continuing the flat search run stopped of --trials 4 (interrupted; 3 trial(s) held back)")
    assert "with the 5 trial(s) it left queued, instead of adding --trials more (run the same command again afterwards" in line
    _take_over(study, study_system_attrs(study)[PLAN_ATTR + "stopped"], "next")
    assert [p["run"] for p in stopped_runs(study)] == ["killed"]  # continued once only
    live.end("done")
    live.end("interrupted")  # an ended plan stays as it ended
    assert live_runs(study) == [] and study_system_attrs(study)[PLAN_ATTR + "live"]["state"] == "done"


def test_an_interrupted_trial_is_queued_again_once_with_its_params_and_what_it_was_queued_as():
    study = optuna.create_study()
    study.enqueue_trial({"x": 1}, user_attrs={"stage": "system", "screen": True})
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9), "y": optuna.distributions.FloatDistribution(0, 1)})
    trial.set_user_attr("fail_kind", FailKind.INTERRUPTED)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    other = study.ask()
    study.tell(other, state=optuna.trial.TrialState.FAIL)  # failed for another reason: not queued again
    _requeue_interrupted(study, [0, 1])
    _requeue_interrupted(study, [0, 1])
    retries = [t for t in study.trials if t.state.name == "WAITING"]
    assert len(retries) == 1
    assert retries[0].user_attrs == {"stage": "system", "screen": True, "retry_of": 0}
    assert retries[0].system_attrs["fixed_params"] == study.trials[0].params and set(study.trials[0].params) == {"x", "y"}


def test_a_worker_is_told_when_a_live_search_run_of_its_study_trains_on_the_same_machine(monkeypatch):
    # a new user's two workers beside their search on 2 cores measured the baseline's config at 195 samples/s (2,874 alone)
    study = optuna.create_study()
    assert same_host_line(study, 2) is None  # no search run
    run = _Plan(study, "r1", "staged", 8)
    run.save()
    assert same_host_line(study, 2) is None  # this process's own run
    other = study_system_attrs(study)[PLAN_ATTR + "r1"]
    study._storage.set_study_system_attr(study._study_id, PLAN_ATTR + "r1", {**other, "pid": other["pid"] + 1})
    line = same_host_line(study, 2)
    assert line is not None and f"run r1 (pid {other['pid'] + 1})" in line and "share its 2 core(s)" in line and "--jobs N" in line
    study._storage.set_study_system_attr(study._study_id, PLAN_ATTR + "r1", {**other, "pid": 1, "host": "another-machine"})
    assert same_host_line(study, 2) is None  # a search on another machine shares nothing
    study._storage.set_study_system_attr(study._study_id, PLAN_ATTR + "r1", {**other, "pid": 1, "state": "done"})
    assert same_host_line(study, 2) is None  # a run that ended trains nothing


def test_the_max_epochs_line_counts_the_whole_batches_an_epoch_trains():
    from autotune.study.budget_lines import max_epochs_line
    from study.helpers import BASELINE, make_settings

    # a new user's 140 training samples in batches of 8 for 15 epochs: 17 whole batches an epoch, 2,040 samples, short
    # of a 2,048-sample budget (the line said "covers 2,100 training samples, fewer than --samples 2048")
    settings = make_settings(samples=2048, train_samples=140, baseline_config=BASELINE.replace(batch_size=8).to_dict(),
                             model_info={"training_length": {"max_epochs": 15}})
    assert max_epochs_line(settings) == (
        "your max_epochs=15 covers 2,040 training samples in whole batches, fewer than --samples 2048: trials raise it to 16 "
        "epochs, enough for their budget (the export keeps max_epochs=15)")
    assert max_epochs_line(settings.replace(samples=2040)) is None  # 15 epochs cover it
    assert max_epochs_line(settings.replace(train_samples=None)) is None  # the training set's size unknown


def test_a_budget_of_fewer_than_eight_optimizer_steps_is_warned_about():
    """helper-36: --samples 16 at effective batch 64 ran one step per trial and recommended without a word."""
    from autotune.study.budget_lines import short_budget_line
    from study.helpers import make_settings

    assert short_budget_line(make_settings(samples=1024)) is None  # baseline batch 16: 64 steps
    assert short_budget_line(make_settings(samples=128)) is None  # 8 steps
    assert short_budget_line(make_settings(samples=16)) == (
        "--samples 16 is 1 optimizer step(s) of the baseline's effective batch 16: a trial this short measures its start-up, "
        "not training; give --samples 128 or more"
    )
