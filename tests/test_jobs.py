import os

import pytest

from autotune.errors import UsageError
from autotune.hardware import Hardware
from autotune.jobs import ENV_BUSY_CORES, keep_allotment, machine_slots, plan_slots

CPU8 = Hardware("cpu", 0, "cpu", 8, True, 16.0)
GPU4 = Hardware("gpu", 4, "H200", 16, True, 139.0)


def test_one_job_has_the_whole_machine():
    (slot,) = plan_slots(CPU8, 1, 1, list(range(8)))
    assert slot.env == {}


def test_cpu_jobs_get_disjoint_cores():
    slots = plan_slots(CPU8, 2, 3, list(range(8)))
    cores = [set(map(int, s.env["AUTOTUNE_CPUS"].split(","))) for s in slots]
    assert cores == [{0, 1}, {2, 3}, {4, 5}]
    assert slots[0].description == "job 0: cores 0-1"


def test_gpu_jobs_get_disjoint_device_groups():
    slots = plan_slots(GPU4, 2, 2, list(range(16)))
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    assert [s.env["AUTOTUNE_CPUS"] for s in slots] == [",".join(map(str, range(8))), ",".join(map(str, range(8, 16)))]


@pytest.mark.parametrize("hardware, devices, jobs, match", [
    (GPU4, 2, 3, r"--jobs 3 with --devices 2 needs 6 GPUs; this machine has 4 \(at most --jobs 2\)"),
    (CPU8, 2, 5, r"--jobs 5 with --devices 2 needs 10 CPU cores"),
    (CPU8, 1, 0, r"--jobs must be >= 1"),
])
def test_too_many_jobs(hardware, devices, jobs, match):
    with pytest.raises(UsageError, match=match):
        plan_slots(hardware, devices, jobs, list(range(hardware.cpu_count)))


CPU2 = Hardware("cpu", 0, "cpu", 2, True, 16.0)


def test_one_job_on_a_cpu_needs_a_core_per_device():
    # one rule for --jobs and --devices: jobs x devices trial processes, one core each
    with pytest.raises(UsageError, match=r"--jobs 1 with --devices 4 needs 4 CPU cores .*give --devices 2 or fewer, or set AUTOTUNE_OVERSUBSCRIBE=1"):
        plan_slots(CPU2, 4, 1, [0, 1])
    (slot,) = plan_slots(CPU2, 2, 1, [0, 1])  # DDP over both cores, as the tests run it
    assert slot.env == {}


def test_oversubscribing_shares_the_cores_in_turn():
    slots = plan_slots(CPU2, 1, 5, [0, 1], oversubscribe=True)
    assert [s.env["AUTOTUNE_CPUS"] for s in slots] == ["0", "1", "0", "1", "0"]
    (slot,) = plan_slots(CPU2, 4, 1, [0, 1], oversubscribe=True)
    assert slot.env == {}


def test_gpu_jobs_are_not_limited_by_the_cores():
    slots = plan_slots(GPU4, 1, 4, [0, 1])
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "2", "3"]


@pytest.mark.parametrize("value, allowed", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_oversubscribe_reads_its_variable(monkeypatch, value, allowed):
    from autotune.jobs import ENV_OVERSUBSCRIBE, oversubscribe

    if value is None:
        monkeypatch.delenv(ENV_OVERSUBSCRIBE, raising=False)
    else:
        monkeypatch.setenv(ENV_OVERSUBSCRIBE, value)
    assert oversubscribe() is allowed


def test_a_one_job_cpu_run_leaves_out_the_cores_other_work_keeps_busy():
    cpu2 = Hardware("cpu", 0, "cpu", 2, True, 16.0)
    (slot,) = plan_slots(cpu2, 1, 1, [0, 1], busy={1: 0.98})
    assert slot.env == {"AUTOTUNE_CPUS": "0"}
    assert slot.description == "one job: core 0 (core 1 busy with other work: 98%)"
    # too few cores left for the devices, every core busy, or a GPU machine: the whole machine, as before
    assert plan_slots(cpu2, 2, 1, [0, 1], busy={1: 0.98})[0].env == {}
    assert plan_slots(cpu2, 1, 1, [0, 1], busy={0: 0.9, 1: 0.98})[0].env == {}
    assert plan_slots(GPU4, 1, 1, list(range(16)), busy={3: 1.0})[0].env == {}
    # parallel jobs split the cores as they did (busy or not)
    assert [s.env["AUTOTUNE_CPUS"] for s in plan_slots(CPU8, 1, 2, list(range(8)), busy={7: 1.0})] == ["0,1,2,3", "4,5,6,7"]


def test_a_resumed_study_runs_its_trials_on_as_many_cores_as_its_earlier_ones(monkeypatch):
    """helper-31: a study's first run put its trials on core 1 beside a busy core 0; resumed on a quiet
    machine, its trials took both cores, and the study compared 1-core and 2-core samples/s unsaid."""
    from study.helpers import make_study

    import autotune.jobs as jobs
    from autotune.jobs import ALLOTMENT_ATTR, study_allotment

    cpu2 = Hardware("cpu", 0, "cpu", 2, True, 16.0)
    monkeypatch.setattr(jobs, "usable_cpus", lambda: [0, 1])
    monkeypatch.delenv(ENV_BUSY_CORES, raising=False)
    monkeypatch.setattr(jobs, "_BUSY", {0: 0.89})  # the first run: core 0 busy
    study, said = make_study(), []
    ui = type("UI", (), {"info": lambda self, m: said.append(("info", m)), "warn": lambda self, m: said.append(("warn", m))})()
    study_allotment(study, make_settings_cpu2(), 1, ui)
    assert study.user_attrs[ALLOTMENT_ATTR] == [1] and said == []  # recorded, nothing to say
    monkeypatch.setattr(jobs, "_BUSY", {})  # resumed on a quiet machine: kept on one core
    study_allotment(study, make_settings_cpu2(), 1, ui)
    assert said[0][0] == "info" and said[0][1].startswith("resumed study: trials run on core 1, with 1 torch thread(s) a device, as its earlier")
    (slot,) = machine_slots(cpu2, 1, 1)
    assert slot.env == {"AUTOTUNE_CPUS": "1"} and slot.description == "one job: core 1 (core 0 left out: as this study's earlier trials ran)"
    # a study that ran on both cores, resumed beside a busy core: it cannot keep them, and says so
    monkeypatch.setattr(jobs, "_BUSY", {1: 0.97})
    kind, line = keep_allotment(cpu2, 1, [0, 1])
    assert kind == "warn" and line.startswith("resumed study: its earlier trials ran on cores 0-1, this run's on core 0 (other work keeps")
    assert "AUTOTUNE_BUSY_CORES=none runs on every core" in line
    assert keep_allotment(cpu2, 1, [0]) is None  # as many cores as before (another one): nothing to do
    monkeypatch.setattr(jobs, "_BUSY", {})
    kind, line = keep_allotment(cpu2, 1, [7])  # a core this process may not use (another machine)
    assert kind == "warn" and line.startswith("resumed study: its earlier trials ran on core 7, which this process may not use;")
    monkeypatch.setenv(ENV_BUSY_CORES, "none")  # the user's word rules
    monkeypatch.setattr(jobs, "_BUSY", {})
    assert keep_allotment(cpu2, 1, [1]) is None and jobs._BUSY == {}
    assert keep_allotment(GPU4, 1, [1]) is None


def make_settings_cpu2():
    from study.helpers import make_settings

    return make_settings(hardware=Hardware("cpu", 0, "cpu", 2, True, 16.0).to_dict())


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a core to leave out")
def test_a_run_on_a_busy_host_says_so_and_its_trials_run_on_the_other_cores(tmp_path):
    from conftest import MODELS, load, run_cli

    cores = sorted(os.sched_getaffinity(0))
    db = tmp_path / "busy.db"
    done = run_cli(
        ["search", MODELS / "tiny.py", "--trials", 1, "--samples", 256, "--storage", f"sqlite:///{db}", "--out", tmp_path / "best.yaml"],
        cwd=tmp_path,
        env={"AUTOTUNE_BUSY_CORES": str(cores[-1])},
        check_rc=0,
    )
    assert f"busy host: trials run on core{'s' if len(cores) > 2 else ''} " in done.stderr + done.stdout
    assert f"(core {cores[-1]} busy with other work: given in $AUTOTUNE_BUSY_CORES)" in done.stderr + done.stdout
    (trial,) = load(db, "tiny").trials
    applied = trial.user_attrs["applied"]
    assert applied["cpu_cores"] == len(cores) - 1 and applied["torch_threads"] == len(cores) - 1
    # the export says what its figures were measured on
    assert f"measured on {len(cores) - 1} of {len(cores)} cores ({len(cores) - 1} torch thread(s))" in (tmp_path / "best.yaml").read_text()
    # "none" uses every core whatever the load; a bad value is one line and exit code 2, before any study
    done = run_cli(["search", MODELS / "tiny.py", "--trials", 1, "--samples", 256, "--storage", f"sqlite:///{tmp_path / 'all.db'}"],
                   cwd=tmp_path, env={"AUTOTUNE_BUSY_CORES": "none"}, check_rc=0)
    assert "busy host" not in done.stderr + done.stdout
    assert load(tmp_path / "all.db", "tiny").trials[0].user_attrs["applied"]["cpu_cores"] == len(cores)
    bad = run_cli(["search", MODELS / "tiny.py", "--storage", f"sqlite:///{tmp_path / 'bad.db'}"], cwd=tmp_path,
                  env={"AUTOTUNE_BUSY_CORES": "last"}, check_rc=2)
    assert bad.stderr.strip().splitlines() == ["autotune: error: AUTOTUNE_BUSY_CORES='last': give core numbers separated by commas (2,3), or none"]
    bad = run_cli(["search", MODELS / "tiny.py", "--storage", f"sqlite:///{tmp_path / 'bad.db'}"], cwd=tmp_path,
                  env={"AUTOTUNE_BUSY_CORES": "4096"}, check_rc=2)
    assert "AUTOTUNE_BUSY_CORES='4096': this process runs on cores" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    every = ",".join(map(str, cores))  # every core: nothing would be left out, which the user did not mean
    bad = run_cli(["search", MODELS / "tiny.py", "--storage", f"sqlite:///{tmp_path / 'bad.db'}"], cwd=tmp_path,
                  env={"AUTOTUNE_BUSY_CORES": every}, check_rc=2)
    assert bad.stderr.strip().splitlines() == [
        f"autotune: error: AUTOTUNE_BUSY_CORES={every!r} names every core this process runs on; leave at least one free, or give none"]
    assert not (tmp_path / "bad.db").exists()
