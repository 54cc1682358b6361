"""Contention: the busy-machine lines on stored figures, and a real search with a CPU hog started mid-run."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from conftest import MODELS, ROOT, load

from autotune.contention import BUSY_OTHER_CPU_FRACTION, busy_run_line, busy_trial_line, host_load_line, is_busy
from autotune.host_load import parse_proc_stat
from autotune.summary import speedup_line, unpaired_text


def _trial(number, other, load=3.1, cpus=2, steal=0.0, gpu=None, state="COMPLETE", **attrs):
    host = {"host_load": load, "host_cpus": cpus, "other_cpu_fraction": other, "steal_fraction": steal, "gpu_other_processes": gpu}
    if state == "COMPLETE":
        attrs.setdefault("samples_per_sec", 1000.0)
    trial = optuna.trial.create_trial(
        state=getattr(optuna.trial.TrialState, state), values=[1000.0] if state == "COMPLETE" else None, user_attrs={**host, **attrs}
    )
    trial.number = number
    return trial


def test_a_trial_on_a_busy_machine_gets_one_line_with_its_figures():
    assert busy_trial_line(_trial(7, 0.46)) == (
        "trial 7 ran while other processes took 46% of the CPU (load average 3.1 on 2 cores): its samples/s understate this config"
    )
    assert busy_trial_line(_trial(7, 0.46, steal=0.05)).startswith(
        "trial 7 ran while other processes took 46% of the CPU (load average 3.1 on 2 cores; 5% stolen by the hypervisor):"
    )
    assert busy_trial_line(_trial(3, 0.9, state="FAIL", fail_reason="timeout")).endswith(": they may have slowed it")
    # below the threshold, unmeasured, or not run (a duplicate): no line
    assert busy_trial_line(_trial(1, BUSY_OTHER_CPU_FRACTION - 0.01)) is None
    assert busy_trial_line(_trial(1, None)) is None
    assert not is_busy(_trial(2, 0.9, duplicate_of=1).user_attrs) and is_busy(_trial(2, BUSY_OTHER_CPU_FRACTION).user_attrs)


def test_the_run_gets_one_line_naming_the_busiest_trial_and_the_count():
    trials = [_trial(0, 0.05), _trial(1, 0.3), _trial(2, 0.71, load=4.25), _trial(3, None), _trial(4, 0.95, duplicate_of=2)]
    line = busy_run_line(trials)
    assert line == (
        "busy machine: 2 of 3 trial(s) whose CPU share was measured (a very short run has no figure) ran while other processes took >= 25% of the CPU; the busiest, trial 2, ran while "
        "other processes took 71% of the CPU (load average 4.2 on 2 cores): their samples/s understate their configs "
        "(a core that other work keeps busy can be left out of the trials with $AUTOTUNE_BUSY_CORES, docs/report.md)"
    )
    assert "\n" not in line
    assert busy_run_line(trials[:1] + trials[3:4]) is None  # quiet: no line


def test_an_unpaired_speedup_says_it_is_unconfirmed_and_distrusts_a_busy_baseline():
    quiet_base, busy_base = _trial(0, 0.05, samples_per_sec=500.0), _trial(0, 0.6, samples_per_sec=500.0)
    fast = _trial(4, 0.02, samples_per_sec=4250.0)
    assert unpaired_text(fast, quiet_base) == (
        "4,250 samples/s vs baseline 500 samples/s (trial 0): speedup 8.50x in single unpaired runs (not confirmed)"
    )
    # the baseline slowed by other work: every ratio over it is inflated, and the line says so with the figure
    line = speedup_line(None, fast, busy_base)
    assert line.startswith("measured: 4,250 samples/s vs baseline 500 samples/s (trial 0): speedup 8.50x in single unpaired runs")
    assert "the baseline trial ran while other processes took 60% of the CPU" in line and "--confirm 3" in line
    # a busy candidate only understates itself: no warning; the baseline recommended is just 1.00x
    assert "overstates" not in unpaired_text(_trial(4, 0.9, samples_per_sec=900.0), quiet_base)
    assert unpaired_text(busy_base, busy_base) == "1.00x: no other trial was feasible and faster (the baseline is recommended; 500 samples/s)"


def test_an_unpaired_speedup_of_other_math_adds_its_time_to_the_baseline_s_loss():
    # helper-32: "speedup 1.20x in single unpaired runs" for a larger batch at a larger lr that reached the
    # baseline's loss 1.01x sooner; the time to the loss is what a race would judge such a config on
    from autotune.summary import quality_line

    base_config = {"batch_size": 32, "lr": 0.01}
    base = _trial(0, 0.05, samples_per_sec=1000.0, config=base_config, time_to_target=0.962, target_reached=True, loss_target=0.5)
    bigger = _trial(4, 0.05, samples_per_sec=1200.0, config={"batch_size": 64, "lr": 0.0141}, time_to_target=0.951, target_reached=True,
                    loss_target=0.5)
    assert unpaired_text(bigger, base) == (
        "1,200 samples/s vs baseline 1,000 samples/s (trial 0): speedup 1.20x in single unpaired runs (not confirmed); "
        "1.01x sooner to the baseline's training loss, the figure that counts for a config of other math"
    )
    workers = _trial(5, 0.05, samples_per_sec=1200.0, config={**base_config, "num_workers": 2}, time_to_target=0.8, target_reached=True,
                     loss_target=0.5)
    assert "sooner" not in unpaired_text(workers, base)  # the same math: samples/s is its speed
    # the time-to-loss line over a busy baseline's single run says it likely overstates, as the speed-up does
    busy = _trial(0, 0.63, samples_per_sec=1000.0, config=base_config, time_to_target=13.3, target_reached=True, loss_target=0.5)
    line = quality_line(_trial(6, 0.05, config={"batch_size": 64, "lr": 0.0141}, time_to_target=1.29, target_reached=True,
                               loss_target=0.5), busy)
    assert line.endswith("= 10.31x faster (single unpaired runs; the baseline trial ran while other processes took 63% of the CPU, "
                         "so this likely overstates it)"), line
    assert "overstates" not in quality_line(workers, base)


def test_show_line_gives_every_figure():
    assert host_load_line(_trial(4, 0.12, load=0.5, cpus=16, gpu=1)) == (
        "host while trial 4 trained: other processes 12% of the CPU, steal 0%, load average 0.5 on 16 cores (its own processes included), "
        "other GPU processes 1"
    )
    assert host_load_line(_trial(4, 0.5)).endswith("(busy: >= 25%, its samples/s understate this config)")
    assert host_load_line(_trial(4, None, load=None)) is None
    assert host_load_line(_trial(4, 0.5, duplicate_of=1)) is None


def _hog(seconds, cpu):
    """A bounded busy loop pinned to ``cpu``, in a session of its own (outside every trial's)."""
    code = (
        "import os, sys, time\n"
        "os.sched_setaffinity(0, {int(sys.argv[2])})\n"
        "end = time.monotonic() + float(sys.argv[1])\n"
        "while time.monotonic() < end: pass\n"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(seconds), str(cpu)], start_new_session=True)


class _CpuClock(threading.Thread):
    """Every 50 ms, with the epoch time: the CPU jiffies (utime + stime) of some processes, and the idle
    jiffies (idle + iowait) of some CPUs."""

    def __init__(self, cpus):
        super().__init__(daemon=True)
        self.cpus, self.pids, self.samples, self.done = cpus, [], [], threading.Event()

    def run(self):
        while not self.done.wait(0.05):
            used = 0
            for pid in list(self.pids):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                used += int(fields[11]) + int(fields[12])
            cpu = parse_proc_stat(Path("/proc/stat").read_text(), self.cpus)
            self.samples.append((time.time(), used, cpu.total - cpu.busy))

    def shares(self, start, end):
        """``(their CPU time, the CPUs' idle time)`` between two epoch times, each over ``(end - start) x cpus``, 0..1."""
        at = lambda t: min(self.samples, key=lambda s: abs(s[0] - t))
        (t0, used0, idle0), (t1, used1, idle1) = at(start), at(end)
        span = (t1 - t0) * os.sysconf("SC_CLK_TCK") * len(self.cpus)
        return (used1 - used0) / span, (idle1 - idle0) / span


def _window(trial):
    """The epoch times of a trial's first training batch and the end of its training."""
    first = trial.user_attrs["launch_time"] + trial.user_attrs["startup_seconds"]
    return first, first + trial.user_attrs["training_seconds"]


@pytest.mark.slow
@pytest.mark.skipif(not (sys.platform.startswith("linux") and hasattr(os, "sched_setaffinity")), reason="pins the hog with sched_setaffinity (Linux)")
def test_a_cpu_hog_during_a_trial_shows_in_its_figures_and_in_one_line(tmp_path):
    """Trial 0 runs without the hog, trials 1 and 2 (the same training, another lr) with a busy loop on each CPU
    the trials may use; trial 2 fails.

    The machine the tests run on may be busy with other work already (a shared CI runner): the quiet trial then
    measures it, and the hog can only take the CPU that was left idle. So the hog's trial is compared with the quiet
    one by the idle share this test measured over the quiet trial's window, and its figure with what the hog itself
    used over its window (the hog's own /proc counters).
    """
    db, space = tmp_path / "c.db", tmp_path / "lr.yaml"
    space.write_text("lr: {choices: [0.04, 0.03]}\n")  # with the baseline's 0.05: three configs that train alike
    cpus = sorted(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "COLUMNS", "LINES")}
    env.update({"TINY_SAMPLE_SLEEP": "0.005", "TINY_FAULTS": "2:raise", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)})
    args = ["search", str(MODELS / "tiny.py"), "--trials", "3", "--samples", "512", "--confirm", "0", "--space", str(space),
            "--sampler", "grid", "--storage", f"sqlite:///{db}"]
    search = subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    clock, hogs, lines = _CpuClock(cpus), [], []
    clock.start()
    try:
        for line in search.stdout:
            lines.append(line)
            if line.startswith("  -> ") and not hogs:  # trial 0 ended: the hog starts, one loop per usable CPU
                hogs = [_hog(90, cpu) for cpu in cpus]
                clock.pids = [h.pid for h in hogs]
        search.wait(timeout=120)
    finally:
        clock.done.set()
        for process in (search, *hogs):
            process.kill()
            process.wait()
    out = "".join(lines)
    assert search.returncode == 0 and hogs, out
    quiet, hogged, failed = load(db, "tiny").trials
    assert quiet.params["lr"] == 0.05 and hogged.state == optuna.trial.TrialState.COMPLETE
    assert failed.state == optuna.trial.TrialState.FAIL and failed.user_attrs["host_cpus"] == os.cpu_count(), failed.user_attrs
    assert "host_load" in failed.user_attrs and "other_cpu_fraction" in failed.user_attrs  # a failed trial keeps what was measured

    q, h = quiet.user_attrs["other_cpu_fraction"], hogged.user_attrs["other_cpu_fraction"]
    _, idle = clock.shares(*_window(quiet))
    hog_share, _ = clock.shares(*_window(hogged))
    print(f"\nother_cpu_fraction: quiet trial {q:.3f} (idle {idle:.3f}), trial with the hog {h:.3f} (the hog alone used "
          f"{hog_share:.3f} of the CPUs); load average {quiet.user_attrs['host_load']:.2f} -> {hogged.user_attrs['host_load']:.2f} "
          f"on {hogged.user_attrs['host_cpus']} cores")
    assert hog_share >= 0.2, hog_share  # the hog did run during the trial (a meaningful test)
    # everything the hog took is other work, however busy the machine was besides (counters are read to a tick)
    assert h >= hog_share - 0.1, (h, hog_share)
    # paired: the hog took at least half of the CPU the quiet trial's window left idle
    assert h >= BUSY_OTHER_CPU_FRACTION and h - q >= idle / 2 - 0.05, (q, h, idle)
    assert f"trial 1 ran while other processes took {h:.0%} of the CPU" in out
    assert "busy machine:" in out and "of this run's 3 trial(s) whose CPU share was measured (a very short run has no figure) ran while other processes took >= 25% of the CPU" in out
    assert out.count("busy machine:") == 1
