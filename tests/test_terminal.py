"""Trial tables on a terminal of any width (autotune show, the end-of-search tables, the live view), and
output into a pipe: $COLUMNS, and a reader that goes away (``autotune show | head``)."""

import io
import json
import os
import re
import subprocess
import sys

import optuna
import pytest
from conftest import run_cli
from rich.cells import cell_len
from rich.console import Console
from study.helpers import add, make_settings, make_study, race  # tests/study/helpers.py

from autotune.cli import EXIT_BROKEN_PIPE
from autotune.live import LiveUI
from autotune.report import _COLUMNS, _TEXT_COLUMNS, ConsoleUI, _cell, _fmt, render_rows, sort_key, trial_rows
from autotune.study import load_study, recommendation

LABELS = {key: label for key, label, _ in _COLUMNS}


def realistic_study(storage=None):
    """A study as a day of real use leaves it: the baseline, fast trials in every precision, big numbers,
    MFU and time to target, an OOM with a long reason, a duplicate, the extended space's knobs."""
    study = make_study(storage)
    add(study, 918.25, 0.5012, baseline=True, attrs={"mfu": 0.0412, "target_reached": True, "time_to_target": 14.2, "loss_target": 0.5012})
    add(study, 1234567.8, 0.5123, batch_size=256, precision="bf16-mixed", accumulate_grad_batches=4, num_workers=2, lr=0.0123456,
        attrs={"mfu": 0.4567, "target_reached": True, "time_to_target": 4.91, "loss_target": 0.5012})
    add(study, None, None, state="FAIL", batch_size=512, precision="16-mixed", num_workers=4,
        attrs={"fail_kind": "oom", "fail_reason": "oom: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity)"})
    add(study, 45000.0, 0.9876, batch_size=128, precision="32-true", lr=0.31, attrs={"target_reached": False, "time_to_target": 123.0, "loss_target": 0.5012})
    add(study, 45000.0, 0.9876, batch_size=128, precision="32-true", lr=0.31, attrs={"duplicate_of": 3})
    add(study, 7000.5, 0.5, batch_size=64, precision="bf16-true", accumulate_grad_batches=8, compile="max-autotune",
        model_args={"hidden": 16}, attrs={"mfu": 0.2})
    add(study, 99999.0, 0.505, batch_size=32, precision="16-mixed", num_workers=3, lr=0.00501, attrs={"mfu": 0.301})
    return study


def row_cells(line: str) -> list[str]:
    """The cells of a table line: split at the boxed table's rules or the compact one's two spaces."""
    return [cell.strip() for cell in re.split(r"[│┃]|\s{2,}", line) if cell.strip()]


def check_table(text: str, width: int, rows: list[dict], label_of: dict[str, str]):
    """No line of ``text`` is wider than ``width``; every shown value of every row is a whole cell of the
    row's first line; a free-text cell's words are whole on the row's lines; a column is shown or named
    as left out. Returns the headers of the left-out columns."""
    lines = text.splitlines()
    assert max(map(cell_len, lines)) <= width, "\n" + text
    caption = re.search(r"left out to fit (\d+) columns: (.*?) \(all|left out to fit (\d+) columns: (.*)$", " ".join(lines))
    left_out = set()
    if caption:
        assert int(caption.group(1) or caption.group(3)) == width
        left_out = {name.strip() for name in (caption.group(2) or caption.group(4)).split(",")}
    body = lines[: next((i for i, line in enumerate(lines) if line.strip().startswith("left out to fit")), len(lines))]
    starts = [i for i, line in enumerate(body) if row_cells(line)[:1] and row_cells(line)[0].isdigit()]
    assert len(starts) == len(rows), "\n" + text
    for row, start, end in zip(rows, starts, [*starts[1:], len(body)]):
        cells = row_cells(lines[start])
        assert cells[0] == str(row["number"])
        for key, value in row.items():
            if key in label_of and label_of[key] not in left_out and value:
                if key in _TEXT_COLUMNS:
                    block = " ".join(" ".join(row_cells(line)) for line in lines[start:end])
                    assert all(word in block.split() for word in value.split()), f"{value!r} not whole in\n{text}"
                else:
                    assert value in cells, f"{key}={value!r} not a whole cell of {lines[start]!r}\n{text}"
    return left_out


def shown_rows(rows):
    """Each row as the table shows it: every column's text."""
    return [{key: _cell(key, row) for key in LABELS} for row in rows]


def plain(text: str) -> str:
    """``text`` without terminal control sequences (colours, the live view's cursor moves)."""
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text)


@pytest.mark.parametrize("width", [80, 120])
def test_the_trial_table_fits_the_terminal_and_never_splits_a_value(width):
    study = realistic_study()
    recommended, _ = recommendation(study, make_settings())
    rows = trial_rows(study, recommended.number)
    out = io.StringIO()
    render_rows(rows, "table", Console(file=out, width=width), title=f"study {study.study_name}")
    left_out = check_table(out.getvalue(), width, shown_rows(rows), LABELS)
    # what goes first is the least needed: the figures that judge a trial stay
    assert not {"#", "state", "samples/s", "to target", "batch", "precision", "loss", "feasible"} & left_out
    if width == 80:
        assert {"workers", "eff. batch", "other knobs"} <= left_out
        assert "autotune show --format json" in out.getvalue()
    else:
        assert left_out <= {"other knobs", "workers", "eff. batch"}
    assert "1,234,568" in out.getvalue() and "bf16-mixed" in out.getvalue()


def test_a_config_column_the_same_in_every_row_is_left_out_before_a_searched_one():
    """helper-28: on a 120-column terminal the searched workers column was left out while precision,
    32-true in every row, stayed."""
    study = make_study()
    add(study, 900.0, 0.5, baseline=True)
    for n, workers in enumerate([1, 2, 3, 1, 2]):
        add(study, 1000.0 + n, 0.51, num_workers=workers, batch_size=32 * 2 ** (n % 3),
            attrs={"math": "preserving", "stage": "system"} if n % 2 else {"duplicate_of": 0})
    rows = trial_rows(study)
    for width in (60, 70, 80):
        out = io.StringIO()
        render_rows(rows, "table", Console(file=out, width=width))
        left_out = check_table(out.getvalue(), width, shown_rows(rows), LABELS)
        if "workers" in left_out:  # only once every config column that does not vary is out
            assert {"precision", "accum", "lr"} <= left_out, (width, left_out)
        assert "precision" in left_out or not left_out, (width, left_out)


def test_a_wide_terminal_shows_every_column_boxed_and_no_empty_one():
    study = realistic_study()
    out = io.StringIO()
    render_rows(trial_rows(study), "table", Console(file=out, width=250))
    text = out.getvalue()
    assert "left out" not in text and "┃" in text  # the boxed table: it fits
    check_table(text, 250, shown_rows(trial_rows(study)), LABELS)
    for label in LABELS.values():
        assert label.split()[-1] in text
    # a column no trial fills is left out whatever the width (no MFU measured here)
    plain = make_study()
    add(plain, 100.0, 1.0, baseline=True)
    out = io.StringIO()
    render_rows(trial_rows(plain), "table", Console(file=out, width=250))
    assert "MFU" not in out.getvalue() and "samples/s" in out.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_the_end_of_search_summary_fits_the_terminal(width):
    study = realistic_study()
    settings = make_settings()
    recommended, baseline = recommendation(study, settings)
    ui = ConsoleUI()
    out = io.StringIO()
    ui.console = Console(file=out, width=width)
    ui.summary(study, settings, recommended, baseline, None)
    text = out.getvalue()
    table = text[: text.index("trial(s) failed")]
    complete = sorted((r for r in trial_rows(study, recommended.number) if r["state"] == "COMPLETE"), key=sort_key("throughput"))
    check_table(table, width, shown_rows(complete), LABELS)
    assert max(map(cell_len, text.splitlines())) <= width
    assert f"recommended: trial {recommended.number}" in text
    assert "1 trial(s) failed: #2 oom: CUDA out of memory" in " ".join(text.split())


def test_the_summary_counts_a_pruned_trial_apart_from_the_failed_ones():
    study = make_study()
    add(study, 900.0, 0.5, baseline=True)
    add(study, None, None, state="PRUNED", batch_size=256, attrs={"fail_kind": "failed_class", "fail_reason": "not run: trial 7 failed"})
    add(study, None, None, state="FAIL", batch_size=512, attrs={"fail_kind": "crashed", "fail_reason": "crashed: boom"})
    settings = make_settings()
    ui, out = ConsoleUI(), io.StringIO()
    ui.console = Console(file=out, width=200)
    ui.summary(study, settings, *recommendation(study, settings), None)
    lines = out.getvalue().splitlines()
    assert "1 trial(s) failed: #2 crashed: boom" in lines and "1 trial(s) pruned or not run: #1 not run: trial 7 failed" in lines


def test_the_summary_says_which_trial_ran_a_failed_one_again():
    # helper-31 read "#5 interrupted: Ctrl-C" after a resume that had run it again as #6 as a measurement lost
    study = make_study()
    add(study, 900.0, 0.5, baseline=True)
    add(study, None, None, state="FAIL", batch_size=128, attrs={"fail_kind": "interrupted", "fail_reason": "interrupted: Ctrl-C"})
    add(study, 1200.0, 0.5, batch_size=128, attrs={"retry_of": 1})
    cand = add(study, 1500.0, 0.5, num_workers=2)
    pair = {"confirm_of": cand.number, "confirm_samples": 1024, "pair_of": cand.number, "pair_index": 0, "incumbent": 0, "pair_cap": 6}
    add(study, 100.0, 0.5, attrs={**pair, "confirm_of": 0})
    add(study, None, None, state="FAIL", num_workers=2, attrs={**pair, "fail_kind": "exception", "fail_reason": "exception: flaky"})
    add(study, None, None, state="FAIL", batch_size=512, attrs={"fail_kind": "crashed", "fail_reason": "crashed: boom"})  # not run again
    add(study, 1490.0, 0.5, num_workers=2, attrs=pair)  # the paired run again
    settings = make_settings()
    ui, out = ConsoleUI(), io.StringIO()
    ui.console = Console(file=out, width=400)
    ui.summary(study, settings, *recommendation(study, settings), None)
    (line,) = [x for x in out.getvalue().splitlines() if "trial(s) failed" in x]
    assert line == ("3 trial(s) failed: #1 interrupted: Ctrl-C (run again as #2); #5 exception: flaky (run again as #7); "
                    "#6 crashed: boom"), line


@pytest.mark.parametrize("width", [80, 120])
def test_the_live_view_fits_the_terminal_and_never_splits_a_value(width):
    study = realistic_study()
    out = io.StringIO()
    ui = LiveUI(Console(file=out, force_terminal=True, width=width, color_system=None))
    ui.search_started(make_settings(), len(study.trials))
    for trial in study.trials:
        ui.trial_finished(trial)
    ui.stop()
    text = plain(out.getvalue())
    table = text[text.rindex("finished trials") :]  # the last frame
    labels = {key: label for key, label, _ in LiveUI.COLUMNS}
    rows = []
    for row in trial_rows(study):
        shown = {key: _fmt(key, row.get(key)) for key in labels if key != "status"}
        shown["status"] = "FAIL: " + row["fail_reason"] if row["state"] == "FAIL" else ""
        rows.append(shown)
    left_out = check_table(table, width, rows, labels)
    assert not {"#", "samples/s", "status", "batch", "precision"} & left_out
    assert "best so far" in table and "FAIL: oom:" in table


def test_a_pipe_takes_the_width_of_COLUMNS_else_160(tmp_path):
    db = tmp_path / "s.db"
    optuna.copy_study(from_study_name=(s := realistic_study()).study_name, from_storage=s._storage,
                      to_storage=f"sqlite:///{db}", to_study_name="s")
    narrow = run_cli(["show", db], cwd=tmp_path, env={"COLUMNS": "80"}, check_rc=0).stdout
    # (the sentences under the table stay one line each, for grep)
    table = narrow[: narrow.index("OOM frontier:")]
    assert "left out to fit 80 columns" in table
    check_table(table, 80, shown_rows(trial_rows(load_study(None, f"sqlite:///{db}")[0], recommended_number=1)), LABELS)
    wide = run_cli(["show", db], cwd=tmp_path, env={"COLUMNS": ""}, check_rc=0).stdout
    table = wide[: wide.index("OOM frontier:")]
    assert "left out" not in table and 80 < max(map(cell_len, table.splitlines())) <= 160


@pytest.fixture(scope="module")
def long_study(tmp_path_factory):
    """A study database whose ``show --format json`` is far longer than a pipe holds (64 KiB): two trials
    store a loss curve of 3,000 points."""
    study = realistic_study()
    curve = [[64 * i, 2.0 / (i + 1)] for i in range(3000)]
    add(study, 2000.0, 0.5, batch_size=32, attrs={"loss_curve": curve})
    add(study, 2100.0, 0.5, batch_size=64, attrs={"loss_curve": curve})
    db = tmp_path_factory.mktemp("pipe") / "long.db"
    optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage, to_storage=f"sqlite:///{db}", to_study_name="long")
    return db


def _autotune(args, **kwargs):
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "PYTHONUNBUFFERED")}
    return subprocess.Popen([sys.executable, "-m", "autotune", *map(str, args)], env={**env, **kwargs.pop("env", {})},
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
def test_output_into_a_pipe_whose_reader_has_gone_stops_quietly_with_141(long_study, fmt, buffered):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written: the first write fails
    try:
        proc = _autotune(["show", long_study, "--format", fmt], stdout=write_end, env={} if buffered else {"PYTHONUNBUFFERED": "1"})
    finally:
        os.close(write_end)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (EXIT_BROKEN_PIPE, "")  # no BrokenPipeError traceback, no "Exception ignored"


def test_show_piped_into_a_reader_that_stops_after_one_line_stops_quietly(long_study):
    proc = _autotune(["show", long_study, "--format", "json"], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == "[\n"  # the reader takes one line, as `| head -1`, and goes
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (EXIT_BROKEN_PIPE, "")
    # the whole output is well over a pipe's 64 KiB, so the reader left before the end of it
    whole = _autotune(["show", long_study, "--format", "json"], stdout=subprocess.PIPE)
    out, _ = whole.communicate(timeout=120)
    assert whole.returncode == 0 and len(out) > 256 * 1024 and len(json.loads(out)) == 9


def test_a_broken_pipe_other_than_the_output_is_not_hidden(monkeypatch, capfd):
    """Only standard output whose reader went away exits quietly; any other broken pipe is an error."""
    from autotune import cli

    def breaks(args):
        raise BrokenPipeError(32, "Broken pipe")  # as a trial process's pipe would

    monkeypatch.setitem(cli._COMMANDS, "show", breaks)
    with pytest.raises(BrokenPipeError):
        cli.main(["show", "x.db"])
    assert capfd.readouterr().out == ""


def test_the_run_line_describes_this_process_s_run_not_a_worker_s_that_ended_later():
    import os

    study = realistic_study()
    settings = make_settings()
    record = {"jobs": 1, "launch": "warm", "training_seconds": 1.0, "overhead_fraction": 0.5, "stage": "search"}
    study.set_user_attr("runs", [
        {**record, "trials": 3, "wall_seconds": 10.0, "run_id": f"{os.getpid()}-1"},
        {**record, "trials": 1, "wall_seconds": 4.0, "run_id": f"{os.getpid()}-1", "stage": "confirm"},
        {**record, "trials": 2, "wall_seconds": 11.3, "run_id": None},  # a worker's, appended last
    ])
    recommended, baseline = recommendation(study, settings)
    ui = ConsoleUI()
    out = io.StringIO()
    ui.console = Console(file=out, width=200)
    ui.summary(study, settings, recommended, baseline, None)
    assert "this run: 4 trial(s) in 14.0 s of trials, its 1 confirmation run(s) included (its start-up and model inspection not counted" in out.getvalue()
    study.set_user_attr("runs", [{**record, "trials": 3, "wall_seconds": 10.0, "run_id": f"{os.getpid()}-2"}])  # --confirm 0
    out.seek(0)
    out.truncate()
    ui.summary(study, settings, recommended, baseline, None)
    assert "this run: 3 trial(s) in 10.0 s of trials, no confirmation run (its start-up" in out.getvalue()


def test_the_busy_machine_line_counts_this_run_s_trials_not_the_study_s():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True, attrs={"other_cpu_fraction": 0.6, "host_load": 4.0, "host_cpus": 2})  # an earlier run's
    add(study, 90.0, 1.0, batch_size=64, attrs={"other_cpu_fraction": 0.7, "host_load": 4.5, "host_cpus": 2})
    add(study, 120.0, 1.0, num_workers=2, attrs={"other_cpu_fraction": 0.05, "host_load": 1.0, "host_cpus": 2})  # this run's
    add(study, 130.0, 1.0, num_workers=1, attrs={"other_cpu_fraction": 0.3, "host_load": 2.6, "host_cpus": 2})
    settings = make_settings()
    record = {"jobs": 1, "launch": "warm", "training_seconds": 1.0, "overhead_fraction": 0.5, "stage": "search", "trials": 2, "wall_seconds": 5.0}
    study.set_user_attr("runs", [{**record, "run_id": "earlier-1", "numbers": [0, 1]}, {**record, "run_id": f"{os.getpid()}-1", "numbers": [2, 3]}])
    recommended, baseline = recommendation(study, settings)
    ui = ConsoleUI()
    out = io.StringIO()
    ui.console = Console(file=out, width=400)
    ui.summary(study, settings, recommended, baseline, None)
    assert "busy machine: 1 of this run's 2 trial(s) whose CPU share was measured (a very short run has no figure) ran while other processes took >= 25% of the CPU; the busiest, trial 3," in out.getvalue()
    # this run's trials all quiet: no line, whatever the earlier run met
    study.set_user_attr("runs", [{**record, "run_id": "earlier-1", "numbers": [0, 1]}, {**record, "run_id": f"{os.getpid()}-2", "numbers": [2]}])
    out.seek(0)
    out.truncate()
    ui.summary(study, settings, recommended, baseline, None)
    assert "this run: 2 trial(s)" in out.getvalue() and "busy machine" not in out.getvalue()
    # records from before 2026-12-07 list no trials: the study's, as it was
    study.set_user_attr("runs", [{**record, "run_id": f"{os.getpid()}-3"}])
    out.seek(0)
    out.truncate()
    ui.summary(study, settings, recommended, baseline, None)
    assert "busy machine: 3 of 4 trial(s) whose CPU share was measured" in out.getvalue()


def test_a_trial_that_did_not_complete_shows_its_samples_per_sec_in_parentheses():
    assert _cell("samples_per_sec", {"state": "FAIL", "samples_per_sec": 25429.4}) == "(25,429)"
    assert _cell("samples_per_sec", {"state": "COMPLETE", "samples_per_sec": 25429.4}) == "25,429"
    assert _cell("samples_per_sec", {"state": "FAIL", "samples_per_sec": None}) == ""


def test_time_to_target_reads_no_curve_when_the_baseline_had_no_loss_curve():
    from autotune.report import _to_target

    assert _to_target({}) is None  # not judged on a target at all
    assert _to_target({"target_reached": False, "time_to_target": None, "loss_target": None}) == "no curve"
    assert _to_target({"target_reached": False, "time_to_target": None, "loss_target": 0.5}) == "never"
    assert _to_target({"target_reached": True, "time_to_target": 4.91, "loss_target": 0.5}) == "4.91 s"
    assert _to_target({"target_reached": False, "time_to_target": 14.2, "loss_target": 0.5}) == "~14.2 s"


def test_a_study_copied_under_another_name_is_shown_and_exported_under_it(tmp_path):
    db = tmp_path / "c.db"
    source = realistic_study()  # its stored settings name the study "s"
    optuna.copy_study(from_study_name=source.study_name, from_storage=source._storage, to_storage=f"sqlite:///{db}", to_study_name="copy")
    _, settings = load_study("copy", f"sqlite:///{db}")
    assert settings.study_name == "copy"
    shown = run_cli(["show", "copy", "--storage", f"sqlite:///{db}"], cwd=tmp_path, env={"COLUMNS": "200"}, check_rc=0).stdout
    assert "study copy" in shown and "study s\n" not in shown and "study s:" not in shown


def test_a_searched_float_argument_is_shown_to_four_significant_digits():
    from autotune.report import other_knobs

    line = other_knobs({"model_args": {"dropout": 0.16983024598527907, "hidden": 64}, "data_args": {"augment": True}})
    assert line == "model.dropout=0.1698, model.hidden=64, data.augment=True"


@pytest.mark.parametrize(
    ("sources", "header"),
    [(["val_acc", "val_acc"], "val_acc"), (["autotune/train_loss"], "train_loss"), (["val_loss", "val_acc"], "loss")],
)
def test_the_loss_column_is_named_after_the_metric_every_row_holds(sources, header):
    rows = [
        {"number": i, "state": "COMPLETE", "batch_size": 32, "samples_per_sec": 100.0 + i, "loss": 0.5, "loss_source": source}
        for i, source in enumerate(sources)
    ]
    out = io.StringIO()
    render_rows(rows, "table", Console(file=out, width=250))
    head = next(line for line in out.getvalue().splitlines() if "samples/s" in line)
    assert [cell.strip() for cell in head.replace("┃", "│").split("│") if cell.strip()][-1] == header


def test_the_summary_table_ranks_the_feasible_trials_first_and_keeps_the_recommended_trial_and_the_baseline():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    for i in range(12):  # twelve faster configs, all infeasible (their loss is far worse)
        add(study, 1000.0 + i, 9.0, batch_size=32, num_workers=i % 5, lr=0.01 + i / 100)
    chosen = add(study, 150.0, 1.0, num_workers=2)
    settings = make_settings()
    recommended, baseline = recommendation(study, settings)
    assert recommended.number == chosen.number and baseline.number == 0
    ui, out = ConsoleUI(), io.StringIO()
    ui.console = Console(file=out, width=250)
    ui.summary(study, settings, recommended, baseline, None)
    text = out.getvalue()
    numbers = [int(line.split("│")[1]) for line in text.splitlines() if line.count("│") > 3 and line.split("│")[1].strip().isdigit()]
    # the two feasible ones head it (a faster config that failed the loss cannot be recommended), the infeasible follow
    assert len(numbers) == 10 and numbers[:2] == [chosen.number, 0] and "then the recommended trial and the baseline" not in text
    assert numbers[2:] == list(range(12, 4, -1))  # the fastest eight of the twelve infeasible ones
    # raced: the recommendation's baseline is its median paired run; the baseline trial itself is kept too
    (pair,) = race(study, chosen.number, [100.0], [150.0], samples=1024)
    recommended, baseline = recommendation(study, settings)
    assert baseline.number == pair[0].number
    out = io.StringIO()
    ui.console = Console(file=out, width=250)
    ui.summary(study, settings, recommended, baseline, None)
    text = out.getvalue()
    numbers = [int(line.split("│")[1]) for line in text.splitlines() if line.count("│") > 3 and line.split("│")[1].strip().isdigit()]
    assert {0, pair[0].number, recommended.number} <= set(numbers)


def test_a_paired_run_shorter_than_the_search_s_says_how_many_samples_it_trained():
    study = make_study()  # --samples 1024
    add(study, 100.0, 1.0, baseline=True)
    cand = add(study, 300.0, 1.0, num_workers=2)
    race(study, cand.number, [100.0, 101.0], [300.0, 302.0], samples=512)  # a same-math race on shorter runs
    race(study, cand.number, [100.0], [300.0], samples=1024)
    notes = [r["note"] for r in trial_rows(study) if "confirms" in r["note"]]
    assert notes[:2] == [f"confirms #0 (pair 0 of #{cand.number}, 512 samples)", f"confirms #{cand.number} (pair 0 of #{cand.number}, 512 samples)"]
    assert notes[-1] == f"confirms #{cand.number} (pair 0 of #{cand.number})"  # as long as the search's runs: no label


def test_a_paired_run_stopped_at_the_loss_target_says_how_many_samples_its_loss_is_from():
    from types import SimpleNamespace

    from autotune.study.publish import _trained

    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    cand = add(study, 300.0, 1.0, batch_size=64, lr=0.1)
    attrs = {"confirm_of": cand.number, "confirm_samples": 1024, "pair_of": cand.number, "pair_index": 0, "incumbent": 0,
             "pair_cap": 6, "stopped_at_target": True, "samples_seen": 1533}
    stopped = add(study, 310.0, 1.3, attrs=attrs, batch_size=64, lr=0.1)
    (row,) = [r for r in trial_rows(study) if r["number"] == stopped.number]
    assert "stopped at the loss target (1,533 samples)" in row["note"]
    settings = make_settings()
    assert _trained(stopped, settings) == "1533 training samples (its paired run stopped at the baseline's training loss)"
    assert _trained(SimpleNamespace(user_attrs={}), settings) == "1024 training samples"


def test_the_header_compares_whole_budget_losses_when_a_paired_run_stopped_at_the_loss_target():
    # a regression MLP's header read "val_loss 0.00312 vs baseline 0.003537": the baseline's paired run had
    # stopped at the target, 15,360 of 16,384 samples in; its search trial's loss was 0.003252
    from autotune.study.publish import _whole_runs

    study = make_study()
    base = add(study, 100.0, 0.003252, baseline=True)
    cand = add(study, 300.0, 0.00312, batch_size=64, lr=0.1)
    pair = {"confirm_samples": 16384, "pair_of": cand.number, "pair_index": 0, "incumbent": 0, "pair_cap": 6}
    b_run = add(study, 100.0, 0.003537, attrs={**pair, "confirm_of": base.number, "stopped_at_target": True, "samples_seen": 15360})
    c_run = add(study, 310.0, 0.00312, attrs={**pair, "confirm_of": cand.number}, batch_size=64, lr=0.1)
    every = study.get_trials(deepcopy=False)
    assert [t.number for t in _whole_runs(c_run, b_run, every)] == [cand.number, base.number]
    unstopped = add(study, 100.0, 0.0034, attrs={**pair, "confirm_of": base.number})
    every = study.get_trials(deepcopy=False)
    assert [t.number for t in _whole_runs(c_run, unstopped, every)] == [c_run.number, unstopped.number]  # both whole: as they are
    assert [t.number for t in _whole_runs(base, base, every)] == [base.number, base.number]  # no race won: the search trial


def test_a_paired_ratio_that_rounds_to_one_reads_as_fast_not_faster():
    from autotune.summary import ratio_text

    assert ratio_text(1.003, 0.99, 1.01, 2, "throughput").startswith("1.00x as fast [0.99x, 1.01x] over 2 pair(s) of runs")
    assert ratio_text(1.02, 0.99, 1.05, 2, "throughput").startswith("1.02x faster")
    assert ratio_text(0.94, 0.89, 0.99, 2, "throughput").startswith("0.94x as fast")


def test_a_baseline_recommended_without_paired_runs_is_worded_as_when_a_confirmation_kept_it():
    """A new user's two projects said it two ways: "(the baseline: no candidate was shown better in paired
    runs): 1.00x" and "9,911 samples/s vs baseline 9,911 samples/s (trial 0): speedup 1.00x"."""
    settings = make_settings()
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    add(study, 300.0, 2.0, batch_size=64)  # faster, but its loss is out of tolerance
    recommended, baseline = recommendation(study, settings)
    assert recommended.number == baseline.number == 0
    ui = ConsoleUI()
    out = io.StringIO()
    ui.console = Console(file=out, width=200)
    ui.summary(study, settings, recommended, baseline, None)
    assert "recommended: trial 0 (the baseline: no other trial was feasible and faster): 1.00x\n" in out.getvalue()
