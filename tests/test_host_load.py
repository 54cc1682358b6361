"""The host's load over a trial's window: /proc arithmetic on fixed snapshots, a real other process, the merge."""

import json
import os
import subprocess
import sys
import time

import pytest

from autotune.host_load import (
    HOST_LOAD_KEYS,
    MIN_WINDOW_JIFFIES,
    CpuTimes,
    HostLoadProbe,
    HostSample,
    gpu_other_processes,
    host_load_figures,
    merge_host_load,
    other_gpu_process_count,
    parse_proc_stat,
    session_jiffies,
)

LINUX = sys.platform.startswith("linux") and os.path.exists("/proc/stat")

# /proc/stat of a 2-CPU virtual machine, 2 s apart (USER_HZ = 100): user nice system idle iowait irq softirq steal guest guest_nice
STAT_START = """\
cpu  10000 500 2000 50000 300 0 100 200 40 0
cpu0 5000 250 1000 25000 150 0 50 100 40 0
cpu1 5000 250 1000 25000 150 0 50 100 0 0
intr 123456 0 0
ctxt 987654
btime 1700000000
"""
STAT_END = """\
cpu  10260 500 2040 50040 315 0 115 230 60 0
cpu0 5150 250 1020 25010 160 0 55 105 60 0
cpu1 5110 250 1020 25030 155 0 60 125 0 0
intr 123999 0 0
ctxt 988000
"""


def test_proc_stat_snapshots_give_the_other_processes_share_and_the_steal():
    start, end = parse_proc_stat(STAT_START), parse_proc_stat(STAT_END)
    # busy = user + nice + system + irq + softirq + steal (guest is inside user; iowait is idle)
    assert start == CpuTimes(busy=10000 + 500 + 2000 + 100 + 200, steal=200, total=10000 + 500 + 2000 + 50000 + 300 + 100 + 200)
    assert end.total - start.total == 400  # 2 s x 2 CPUs x 100 Hz
    assert end.busy - start.busy == (150 + 20 + 5 + 5) + (110 + 20 + 10 + 25)  # 345 jiffies busy
    # the trial's session used 90 jiffies: other work took 345 - 90 = 255 of 400
    figures = host_load_figures(HostSample(start, own=1000), HostSample(end, own=1090))
    assert figures["other_cpu_fraction"] == pytest.approx(255 / 400)
    assert figures["steal_fraction"] == pytest.approx(30 / 400)
    # per-CPU lines: only the CPUs the trial may use count (cpu1: 165 busy of 200, steal 25)
    one0, one1 = parse_proc_stat(STAT_START, {1, 7}), parse_proc_stat(STAT_END, {1, 7})  # cpu7 is offline: skipped
    assert (one1.total - one0.total, one1.busy - one0.busy, one1.steal - one0.steal) == (200, 165, 25)
    alone = host_load_figures(HostSample(one0, own=0), HostSample(one1, own=0))
    assert alone["other_cpu_fraction"] == pytest.approx(165 / 200) and alone["steal_fraction"] == pytest.approx(25 / 200)


def test_fractions_are_clipped_and_a_window_too_short_gives_none():
    start = HostSample(CpuTimes(busy=100, steal=0, total=1000), own=0)
    # the session's counters read a tick more than /proc/stat saw: not below 0
    assert host_load_figures(start, HostSample(CpuTimes(busy=150, steal=0, total=1100), own=52))["other_cpu_fraction"] == 0.0
    short = HostSample(CpuTimes(busy=130, steal=0, total=1000 + MIN_WINDOW_JIFFIES - 1), own=0)
    assert host_load_figures(start, short) == {"other_cpu_fraction": None, "steal_fraction": None}
    with pytest.raises(ValueError, match="no line for CPUs"):
        parse_proc_stat(STAT_START, {5})


def test_session_jiffies_adds_up_the_session_and_reads_names_with_parentheses(tmp_path):
    def proc(pid, name, session, utime, stime, cutime, cstime):
        (tmp_path / str(pid)).mkdir()
        # fields 3..17 of proc(5): state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
        rest = f"S 1 {session} {session} 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0 100"
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {rest}\n")

    proc(40, "python", 40, 100, 20, 7, 3)
    proc(41, "pt_data_worker) 1 (x", 40, 50, 5, 0, 0)  # a command name may hold ") " itself
    proc(42, "other", 99, 1000, 1000, 0, 0)
    (tmp_path / "self").mkdir()
    assert session_jiffies(40, str(tmp_path)) == 130 + 55
    assert session_jiffies(7, str(tmp_path)) == 0


#: A busy loop on one CPU: ``python -c BUSY_LOOP SECONDS CPU`` (started in a session of its own).
BUSY_LOOP = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[2])})\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end: pass\n"
)


@pytest.mark.skipif(not LINUX, reason="reads /proc (Linux)")
def test_a_busy_process_outside_the_session_is_other_work_and_the_session_own_work_is_not():
    # The probe runs in a session of its own, as a trial process does: this test's session holds the whole
    # test run, whose other processes (another xdist worker waiting for a trial process) would add a
    # child's minutes of CPU time to "own" inside the window.
    code = (
        "import json, os, subprocess, sys, time\n"
        "from autotune.host_load import HostLoadProbe\n"
        "probe = HostLoadProbe()\n"
        "hogs = [subprocess.Popen([sys.executable, '-c', sys.argv[1], '30', str(cpu)], start_new_session=True)\n"
        "        for cpu in sorted(os.sched_getaffinity(0))]\n"
        "try:\n"
        "    time.sleep(0.5)  # the loops have started\n"
        "    probe.start()\n"
        "    time.sleep(1.0)\n"
        "    probe.stop()  # before they end: a child this process waits for adds its time to its session's (cutime)\n"
        "finally:\n"
        "    for hog in hogs:\n"
        "        hog.kill()\n"
        "        hog.wait()\n"
        "print(json.dumps(probe.report()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, BUSY_LOOP], capture_output=True, text=True, timeout=60, start_new_session=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) == set(HOST_LOAD_KEYS)
    # each hog kept one usable CPU busy for most of the window (shared with whatever else runs here)
    assert report["other_cpu_fraction"] >= 0.5, report
    assert report["host_cpus"] == os.cpu_count() and report["host_load"] >= 0 and report["gpu_other_processes"] is None
    assert 0.0 <= report["steal_fraction"] <= report["other_cpu_fraction"]

    # this process's own busy loop is its own session's time, not other work
    session = os.getsid(0)
    before, start = session_jiffies(session), time.process_time()
    while time.process_time() - start < 0.5:  # half a CPU-second of this process's own
        pass
    assert session_jiffies(session) - before >= 0.5 * os.sysconf("SC_CLK_TCK") - 2  # read to a tick


def test_without_procfs_the_cpu_figures_are_none_not_an_error(tmp_path):
    probe = HostLoadProbe(proc=str(tmp_path / "missing"))
    assert probe.report() is None
    probe.stop()  # before start: nothing
    assert probe.report() is None
    probe.start()
    probe.stop()
    report = probe.report()
    assert report["other_cpu_fraction"] is None and report["steal_fraction"] is None
    probe.stop()  # a second stop keeps the first end
    assert probe.report() == report


def test_merge_keeps_the_busiest_rank_and_the_most_gpu_processes():
    ranks = [
        {"rank": 0, "ok": True, "host": {"host_load": 1.0, "host_cpus": 8, "other_cpu_fraction": 0.1, "steal_fraction": 0.0, "gpu_other_processes": 2}},
        {"rank": 1, "ok": False, "host": {"host_load": 3.5, "host_cpus": 8, "other_cpu_fraction": 0.6, "steal_fraction": 0.1, "gpu_other_processes": 0}},
        {"rank": 2, "ok": True, "host": None},
    ]
    assert merge_host_load(ranks) == {"host_load": 3.5, "host_cpus": 8, "other_cpu_fraction": 0.6, "steal_fraction": 0.1, "gpu_other_processes": 2}
    assert merge_host_load([{"rank": 0, "ok": False}]) == {}  # failed before training: nothing stored
    unmeasured = {"host_load": 0.5, "host_cpus": 2, "other_cpu_fraction": None, "steal_fraction": None, "gpu_other_processes": None}
    assert merge_host_load([{"host": unmeasured}]) == unmeasured


def test_other_gpu_processes_leave_out_the_trial_own_and_need_nvml():
    assert other_gpu_process_count([10, 11, 500], own_pids={10, 11, 12}) == 1
    # a container's PID namespace: NVML's host pids match none of ours, one of them is the rank itself
    assert other_gpu_process_count([70001, 70002], own_pids={10}) == 1
    assert other_gpu_process_count([], own_pids={10}) == 0
    # on this CPU machine NVML has no driver (or pynvml is not installed): not measured
    import torch

    if not torch.cuda.is_available():
        assert gpu_other_processes(0, os.getsid(0)) is None


def test_per_core_shares_from_two_readings_of_proc_stat():
    from autotune.host_load import core_busy_fractions

    # cpu0: 230 busy of 240 jiffies; cpu1: 165 of 200; cpu7 has no line (offline): left out
    shares = core_busy_fractions(STAT_START, STAT_END, [0, 1, 7])
    assert set(shares) == {0, 1}
    assert shares[0] == pytest.approx((150 + 20 + 5 + 5) / (150 + 20 + 10 + 10 + 5 + 5))
    assert shares[1] == pytest.approx(165 / 200)
    assert core_busy_fractions(STAT_START, STAT_START, [0]) == {}  # no jiffy counted: nothing to say


@pytest.mark.skipif(not LINUX, reason="reads /proc/stat")
def test_a_core_kept_busy_by_another_process_is_found_and_an_idle_one_is_not():
    from autotune.host_load import busy_cores

    cpus = sorted(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, "20", str(cpus[-1])], start_new_session=True)
    try:
        time.sleep(0.5)  # the loop has started
        found = busy_cores(cpus, window=0.5)
    finally:
        hog.kill()
        hog.wait()
    assert cpus[-1] in found and found[cpus[-1]] >= 0.75, found
