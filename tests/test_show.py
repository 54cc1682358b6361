"""``autotune show`` on a study of more trials than its table shows (autotune.show): the rows it picks,
the line that says what it left out, --limit and --all, machine-readable output that stays complete,
and one trial read alone."""

import json
import re

import pytest
import yaml
from study.helpers import add, make_study  # tests/study/helpers.py

from autotune import cli
from autotune.show import SHOW_LIMIT, choose_rows, left_out_line


def _big_study(path, search_trials=55):
    """A SQLite study of ``search_trials + 5`` trials: a slow baseline (trial 0), search trials of
    distinct speeds whose fastest six are infeasible (so the recommendation is not the fastest trial),
    three failed and one pruned trial."""
    study = make_study(f"sqlite:///{path}")
    add(study, 100.0, 1.0, baseline=True)
    for k in range(search_trials):
        fast = k >= search_trials - 6
        add(study, 200.0 + 10 * k, 3.0 if fast else 1.0, batch_size=(16, 32, 64)[k % 3], num_workers=k % 5)
    for _ in range(3):
        add(study, None, None, state="FAIL", attrs={"fail_kind": "oom", "fail_reason": "CUDA out of memory"}, batch_size=512)
    add(study, None, None, state="PRUNED")
    return study


def _shown(out: str) -> list[int]:
    """Trial numbers of the rows of a boxed trial table."""
    return [int(n) for n in re.findall(r"^│\s*(\d+)\s*│", out, re.M)]


@pytest.fixture
def big(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # every column, in a boxed table
    db = tmp_path / "big.db"
    return db, _big_study(db)


def _show(capfd, *args):
    code = cli.main(["show", *map(str, args)])
    out, err = capfd.readouterr()
    return code, out, err


def test_the_default_table_shows_the_recommended_the_baseline_and_the_best_and_says_what_it_left_out(big, capfd):
    db, study = big
    code, out, _ = _show(capfd, db)
    assert code == 0
    rows = _shown(out)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    feasible = [t for t in complete if t.user_attrs["feasible"]]
    recommended = max(feasible, key=lambda t: t.user_attrs["samples_per_sec"]).number
    fastest = sorted((t for t in complete if t.number not in (0, recommended)),
                     key=lambda t: (not t.user_attrs["feasible"], -t.user_attrs["samples_per_sec"]))
    assert len(rows) == SHOW_LIMIT == 25 and rows == sorted(rows)  # in trial-number order, as a table of every trial
    assert set(rows) == {0, recommended, *(t.number for t in fastest[:23])}
    assert re.search(rf"^│\s*{recommended} │.*recommended", out, re.M) and re.search(r"^│\s*0 │.*baseline", out, re.M)
    assert (
        "25 of 60 trials shown (the recommended trial, the baseline and the 23 best complete by samples/s, feasible first); 35 left out "
        "(31 complete, 3 fail, 1 pruned): --limit N shows N rows, --all every trial, --format json or yaml every trial in full"
    ) in out
    assert "OOM frontier:" in out  # the lines under the table still cover every trial


def test_limit_and_all_set_the_rows_of_the_table(big, capfd):
    db, _ = big
    _, out, _ = _show(capfd, db, "--limit", 5)
    assert len(_shown(out)) == 5 and "5 of 60 trials shown" in out and "55 left out" in out
    _, out, _ = _show(capfd, db, "--all")
    assert _shown(out) == list(range(60)) and "left out" not in out
    _, out, _ = _show(capfd, db, "--limit", 60)
    assert _shown(out) == list(range(60)) and "trials shown" not in out


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_hold_every_trial(big, capfd, fmt):
    db, _ = big
    code, out, _ = _show(capfd, db, "--format", fmt)
    rows = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert code == 0 and [r["number"] for r in rows] == list(range(60)) and "user_attrs" in rows[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--limit", 5, "--format", "json"],
            "--limit 5 sets the rows of the table, but this shows every trial (--format json); leave --limit out",
        ),
        ([3, "--all"], "--all sets the rows of the table, but this shows trial 3 alone; leave --all out"),
        (["--limit", 0], "--limit must be at least 1, got 0; --all shows every trial"),
        ([99], "has no trial 99 (its trials are 0..59)"),
    ],
)
def test_flags_that_do_not_fit_are_one_line_errors(big, capfd, args, message):
    db, _ = big
    code, _, err = _show(capfd, db, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_limit_and_all_together_are_refused_by_the_parser(big, capfd):
    db, _ = big
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["show", str(db), "--all", "--limit", "3"])
    assert exit_info.value.code == 2 and "not allowed with argument" in capfd.readouterr().err


def test_a_small_study_prints_every_trial_as_before(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("COLUMNS", "250")
    db = tmp_path / "small.db"
    _big_study(db, search_trials=10)
    _, out, _ = _show(capfd, db)
    assert _shown(out) == list(range(15)) and "trials shown" not in out
    assert _show(capfd, db, "--all")[1] == out


def test_the_table_and_one_trial_read_in_full_only_the_trials_they_print(big, capfd, monkeypatch):
    import autotune.bulk_read as bulk_read

    db, _ = big
    full_reads = []
    original = bulk_read.read_trials

    def counting(*args, user_attr_keys=None, **kwargs):
        found = original(*args, user_attr_keys=user_attr_keys, **kwargs)
        if user_attr_keys is None:
            full_reads.append(len(found))
        return found

    monkeypatch.setattr(bulk_read, "read_trials", counting)
    _, out, _ = _show(capfd, db)
    assert len(_shown(out)) == 25 and full_reads == [25]
    full_reads.clear()
    _, out, _ = _show(capfd, db, 42)
    assert _shown(out) == [42] and full_reads == [1]


def test_choose_rows_keeps_the_kept_trials_first_and_ranks_by_the_objective():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True, attrs={"goodput": 10.0})
    for k, (sps, goodput) in enumerate([(300.0, 5.0), (200.0, 50.0), (float("nan"), 40.0), (250.0, 20.0)]):
        # (a NaN samples/s stored as an attribute: Optuna refuses a NaN value)
        add(study, 150.0, 1.0, attrs={"goodput": goodput, "samples_per_sec": sps}, batch_size=(32, 64, 128, 256)[k])
    trials = study.trials
    choice = choose_rows(trials, "throughput", 3, keep={2: "the recommended trial", 0: "the baseline"})
    assert choice.numbers == [0, 1, 2] and choice.kept == ["the recommended trial", "the baseline"]
    assert left_out_line(choice, 5, "throughput") == (
        "3 of 5 trials shown (the recommended trial, the baseline and the 1 best complete by samples/s, feasible first); 2 left out "
        "(2 complete): --limit N shows N rows, --all every trial, --format json or yaml every trial in full"
    )
    choice = choose_rows(trials, "throughput", 2, keep={2: "the recommended trial", 0: "the baseline"})  # no room for a best one
    assert left_out_line(choice, 5, "throughput").startswith("2 of 5 trials shown (the recommended trial and the baseline); 3 left out")
    choice = choose_rows(trials, "goodput", 3, keep={0: "the baseline"})
    assert choice.numbers == [0, 2, 3] and choice.kept == ["the baseline"] and dict(choice.left_out) == {"COMPLETE": 2}
    assert left_out_line(choice, 5, "goodput").startswith("3 of 5 trials shown (the baseline and the 2 best complete by goodput, feasible first)")
    assert choose_rows(trials, "throughput", 1, keep={2: "the recommended trial", 0: "the baseline"}).numbers == [2]
    # a NaN samples/s ranks last, not first
    assert choose_rows(trials, "throughput", 4).numbers == [0, 1, 2, 4]
    assert choose_rows(trials, "throughput", 5).numbers == [0, 1, 2, 3, 4]


def test_short_screening_runs_rank_after_every_full_budget_run():
    """A new user's report: `show` (and the search's summary table) ranked stage 1's short runs, the
    fastest samples/s but their loss never judged, above the full-budget runs."""
    from autotune.report import sort_key, trial_rows

    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    for k in range(3):  # stage 1: short runs, faster than anything at full budget
        add(study, 900.0 + k, None, attrs={"stage": "system", "trial_samples": 256}, batch_size=(32, 64, 128)[k])
    add(study, 300.0, 1.0, attrs={"stage": "full"}, batch_size=64)
    add(study, 200.0, 1.0, attrs={"stage": "full"}, batch_size=128)
    trials = study.trials
    assert choose_rows(trials, "throughput", 3, keep={0: "the baseline"}).numbers == [0, 4, 5]
    ranked = [r["number"] for r in sorted((r for r in trial_rows(study) if r["state"] == "COMPLETE"), key=sort_key("throughput"))]
    assert ranked == [4, 5, 0, 3, 2, 1]


def test_a_confirmed_study_keeps_the_recommended_run_the_baseline_and_its_median_run(tmp_path, monkeypatch, capfd):
    from study.helpers import race

    monkeypatch.setenv("COLUMNS", "250")
    db = tmp_path / "confirmed.db"
    study = _big_study(db, search_trials=30)
    pairs = race(study, 24, [99.0, 101.0, 100.0], [430.0, 440.0, 435.0])  # trial 24: the fastest feasible search trial
    _, out, _ = _show(capfd, db, "--limit", 5)
    rows = _shown(out)
    assert {0, pairs[2][0].number, pairs[2][1].number} <= set(rows) and len(rows) == 5  # the median runs: 100 and 435
    assert re.search(rf"^│\s*{pairs[2][1].number} │.*recommended", out, re.M)
    assert "4.35x faster [" in out and "over 3 pair(s) of runs vs the baseline" in out
    assert (
        "5 of 41 trials shown (the recommended trial, the baseline, the baseline's median paired run and the 2 best complete by samples/s, feasible first)"
    ) in out


def test_a_no_curve_column_is_explained_under_the_table(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("COLUMNS", "250")
    db = tmp_path / "manual.db"
    study = make_study(f"sqlite:///{db}")
    no_curve = {"target_reached": False, "time_to_target": None, "loss_target": None}  # manual optimization: no loss returned
    add(study, 100.0, 1.0, baseline=True, attrs=no_curve)
    add(study, 150.0, 1.0, num_workers=1, attrs=no_curve)
    _, out, _ = _show(capfd, db)
    assert "no curve" in out
    line = next(line for line in out.splitlines() if line.startswith("to target 'no curve'"))
    assert "training_step returned no loss tensor and --monitor 'val_loss' is not logged in each training_step" in line
    # a study with curves says nothing of it
    db2 = tmp_path / "auto.db"
    study = make_study(f"sqlite:///{db2}")
    add(study, 100.0, 1.0, baseline=True, attrs={"target_reached": True, "time_to_target": 2.0, "loss_target": 1.05})
    assert "to target 'no curve'" not in _show(capfd, db2)[1]


def test_a_sanity_check_above_its_limit_reads_as_a_decision_only_where_it_decided():
    """A short same-math run that fails the training-loss check gets no full-budget run ("loss sanity
    failed"); a full-budget run is judged on its monitored metric, so the check only informs (a new user
    read "loss sanity failed" beside "feasible yes" on a trial that was then raced)."""
    import types

    from autotune.report import trial_rows

    sanity = {"ok": False, "change": 0.46, "samples": 1952, "tolerance": 0.15}

    def trial(number, **attrs):
        attrs = {"config": {"batch_size": 32}, "math": "preserving", "loss_sanity": sanity, **attrs}
        return types.SimpleNamespace(number=number, state=types.SimpleNamespace(name="COMPLETE"), user_attrs=attrs)

    short, full = trial_rows(
        None, trials=[trial(1, trial_samples=512, feasible=None, stage="system"), trial(4, feasible=True, loss_source="val_loss")]
    )
    assert short["note"] == "same math short (512 samples) loss sanity failed: +46% against the baseline's at 1952 samples (limit +15%)"
    assert full["note"] == (
        "same math training loss +46% vs the baseline's at 1952 samples (sanity limit +15%; a full-budget run is judged on val_loss)"
    )
    # just above the limit: as many decimals as tell the two apart (helper-28 read "+15% ... (limit +15%)" as a pass)
    sanity.update(change=0.15040)
    (short,) = trial_rows(None, trials=[trial(1, trial_samples=512, feasible=None, stage="system")])
    assert short["note"].endswith("loss sanity failed: +15.04% against the baseline's at 1952 samples (limit +15.00%)")
