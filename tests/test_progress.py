"""What a user watches while a search runs: the live view on a terminal, lines elsewhere."""

import io
import json
import re

import optuna
from rich.console import Console
from study.helpers import make_settings  # tests/study/helpers.py

from autotune.config import TrialConfig
from autotune.live import LiveUI
from autotune.report import ConsoleUI, make_ui

SETTINGS = make_settings(space={"batch_size": {"choices": [16, 32]}, "lr": {"low": 0.01, "high": 0.1, "log": True}})


def _config(batch_size):
    return TrialConfig(batch_size=batch_size, precision="32-true", accumulate_grad_batches=1, num_workers=0, lr=0.05)


def _trial(number, sps, loss, feasible=True, fail=None, baseline=False):
    attrs = {"config": _config(16 * (number + 1)).to_dict(), "baseline": baseline}
    if fail:
        frozen = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={**attrs, "fail_kind": "oom", "fail_reason": fail})
    else:
        attrs.update(samples_per_sec=sps, loss=loss, feasible=feasible, loss_source="val_loss", step_time_median=0.01, data_wait_fraction=0.1)
        frozen = optuna.trial.create_trial(value=sps, user_attrs=attrs)
    frozen.number = number
    return frozen


def _plain(text):
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text)


def test_the_live_view_shows_progress_the_running_trial_and_the_best_so_far(tmp_path):
    out = io.StringIO()
    ui = LiveUI(Console(file=out, force_terminal=True, width=200, color_system="standard"))
    ui.search_started(SETTINGS, 4)
    finished = [_trial(0, 1000.0, 0.5, baseline=True), _trial(1, 3000.0, 0.51), _trial(2, 5000.0, 0.9, feasible=False)]
    for t in finished:
        ui.trial_started(t.number, _config(16), False)
        ui.trial_finished(t)
    ui.trial_started(3, _config(64), False)
    progress = tmp_path / "progress-3.json"
    progress.write_text(json.dumps({"batches": 40, "planned": 64, "samples": 2560, "samples_per_sec": 4321.0}))
    ui.trial_progress(3, str(progress))
    ui.live.refresh()
    frame = _plain(out.getvalue())
    assert "3/4" in frame and "elapsed" in frame and "ETA" in frame
    assert "trial 3: batch_size=64" in frame and "4,321 samples/s so far, batch 40/64" in frame
    assert "best so far" in frame and "infeasible: beyond the loss tolerance" in frame
    best_line = [line for line in out.getvalue().splitlines() if "best so far" in line][-1]
    assert "\x1b[1;32m" in best_line and "3,000" in best_line  # the fastest feasible trial, bold green (not the infeasible 5,000)
    ui.trial_finished(_trial(3, 0.0, 0.0, fail="oom: CUDA out of memory"))
    ui.stop()
    assert "FAIL: oom: CUDA out of memory" in _plain(out.getvalue()) and ui.live is None


def test_without_a_terminal_each_trial_is_one_line_start_and_one_line_end(capsys):
    ui = make_ui(quiet=False)  # pytest captures stdout: not a terminal
    assert type(ui) is ConsoleUI
    ui.search_started(SETTINGS, 2)
    for t in (_trial(0, 1000.0, 0.5, baseline=True), _trial(1, 0, 0, fail="oom: CUDA out of memory")):
        ui.trial_started(t.number, _config(16), t.number == 0)
        ui.trial_finished(t)
    lines = capsys.readouterr().out.splitlines()
    assert "trial 0 (baseline): batch_size=16 precision=32-true accumulate_grad_batches=1 num_workers=0 lr=0.05" in lines
    assert any(line.startswith("  -> 1,000 samples/s, val_loss 0.5") for line in lines)
    assert "trial 1: batch_size=16 precision=32-true accumulate_grad_batches=1 num_workers=0 lr=0.05" in lines
    assert "  -> FAIL: oom: CUDA out of memory" in lines
    duplicate = _trial(2, 1000.0, 0.5)
    duplicate.user_attrs["duplicate_of"] = 0  # a config trial 0 measured: not trained again
    ui.trial_finished(duplicate)
    assert capsys.readouterr().out.splitlines()[-1].endswith(" [not run: trial 0's figures, the same config]")
    quiet = make_ui(quiet=True)
    quiet.trial_started(0, _config(16), True)
    assert capsys.readouterr().out == ""
    quiet.trial_finished(_trial(1, 1000.0, 0.5))  # a finished trial: nothing
    quiet.trial_finished(_trial(5, 0, 0, fail="oom: CUDA out of memory"))  # no "trial 5:" line came before it
    assert capsys.readouterr().out.splitlines() == ["trial 5 -> FAIL: oom: CUDA out of memory"]
    # a trial on a busy machine: its own warning line, but not with --quiet (helper-34: eight such lines), whose
    # summary counts the busy trials in one line instead
    busy = _trial(6, 1000.0, 0.5)
    busy.user_attrs.update(host_load=3.9, host_cpus=2, other_cpu_fraction=0.6, steal_fraction=0.0)
    ui.trial_finished(busy)
    captured = capsys.readouterr()
    assert "trial 6 ran while other processes took 60% of the CPU" in captured.out + captured.err
    quiet.trial_finished(busy)
    captured = capsys.readouterr()
    assert captured.out + captured.err == ""
