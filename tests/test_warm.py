"""Warm trial processes: forked from a preloaded zygote, isolated like cold ones."""

import shutil

import optuna
import pytest
from conftest import MODELS, load

from autotune.runner import child_env, inspect_process, run_trial_process
from autotune.warm import WarmPool

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_copy(tmp_path):
    path = tmp_path / "tinycopy.py"
    shutil.copy(MODELS / "tiny.py", path)
    return path


def _spec(model_file, targets, **config):
    return {"model_file": str(model_file), "targets": targets, "samples": 512, "seed": 0, "config": {"batch_size": 16, "lr": 0.05, **config}}


def test_zygote_is_cuda_free_survives_a_crash_and_notices_a_changed_file(tmp_path, tiny_copy, monkeypatch):
    targets = inspect_process({"model_file": str(tiny_copy)})["targets"]
    with WarmPool(tiny_copy, child_env({}), tmp_path / "warm.log") as pool:
        ready = pool.start()
        assert ready["cuda_initialized"] is False
        monkeypatch.setenv("TINY_FAULTS", "1:kill")  # read by the trial at run time, passed through the request env
        killed = run_trial_process(_spec(tiny_copy, targets), timeout=60, trial_number=1, expected_ranks=1, devices=1, pool=pool,
                                   slot_env={"TINY_FAULTS": "1:kill"})
        assert killed.fail_kind == "killed" and "SIGKILL" in killed.fail_reason
        ok = run_trial_process(_spec(tiny_copy, targets), timeout=60, trial_number=2, expected_ranks=1, devices=1, pool=pool)
        assert ok.ok, ok.fail_reason
        assert ok.ranks[0]["config"]["batch_size"] == 16
        assert pool.alive and not pool.stale()
        tiny_copy.write_text(tiny_copy.read_text() + "\n# edited\n")
        assert pool.stale()


def test_the_model_is_inspected_in_the_warm_process_spawned_ahead_and_cold_without_one(tmp_path, tiny_copy):
    """A search's inspection forks from the warm process it spawned ahead (one import of torch, not two),
    reports what a cold one does, refuses the same bad input, and leaves the warm process to the trials."""
    from autotune.errors import UsageError

    spec = {"model_file": str(tiny_copy)}
    cold = inspect_process(spec)
    assert cold["launch"] == "cold"
    same = ("model_class", "data_class", "targets", "baseline", "init_args", "train_samples")
    with WarmPool(tiny_copy, child_env({}), tmp_path / "warm.log") as pool:
        pool.spawn()  # as jobs.prestart does: the inspection waits for it to be ready
        warm = inspect_process(spec, pool=pool)
        assert warm["launch"] == "warm" and {k: warm[k] for k in same} == {k: cold[k] for k in same}
        with pytest.raises(UsageError, match="NoSuchModel"):
            inspect_process({**spec, "model_class": "NoSuchModel"}, pool=pool)
        assert pool.alive and pool.wait_ready()["ready"]  # still there for the trials, its ready message kept
        pool.close()
        assert inspect_process(spec, pool=pool)["launch"] == "cold"  # a warm process gone: a cold one inspects


def test_warm_and_cold_trials_give_the_same_config_and_results(tmp_path, cli):
    losses = {}
    for mode in ("warm", "cold"):
        db = tmp_path / f"{mode}.db"
        extra = ["--cold"] if mode == "cold" else []
        cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 512, "--storage", f"sqlite:///{db}", *extra, check_rc=0)
        trials = load(db, "tiny").trials
        assert all(t.user_attrs["launch"] == mode for t in trials)
        losses[mode] = [(t.params, t.user_attrs.get("loss"), t.user_attrs.get("batches")) for t in trials]
    for (p_warm, l_warm, b_warm), (p_cold, l_cold, b_cold) in zip(losses["warm"], losses["cold"]):
        assert p_warm == p_cold and b_warm == b_cold
        assert l_warm == pytest.approx(l_cold, rel=1e-5)


def test_warm_two_rank_ddp_and_start_up_accounting(tmp_path, cli):
    db = tmp_path / "ddp.db"
    cli("search", MODELS / "tiny.py", "--trials", 2, "--devices", 2, "--samples", 512, "--storage", f"sqlite:///{db}", check_rc=0)
    study = load(db, "tiny")
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE, t.user_attrs.get("fail_reason")
        assert [r["rank"] for r in t.user_attrs["ranks"]] == [0, 1]
        assert all(r["config"] == t.user_attrs["config"] for r in t.user_attrs["ranks"])
        assert 0 < t.user_attrs["startup_seconds"] < t.user_attrs["wall_seconds"]
        assert t.user_attrs["training_seconds"] > 0 and t.user_attrs["teardown_seconds"] >= 0
    (run,) = study.user_attrs["runs"]
    assert run["trials"] == 2 and run["launch"] == "warm" and 0 < run["overhead_fraction"] < 1


def test_two_jobs_run_at_once_on_disjoint_cores(tmp_path, cli):
    db = tmp_path / "jobs.db"
    r = cli("search", MODELS / "tiny.py", "--trials", 5, "--jobs", 2, "--samples", 20000, "--storage", f"sqlite:///{db}", check_rc=0)
    assert "job 0: cores 0" in r.stdout and "job 1: cores 1" in r.stdout
    trials = load(db, "tiny").trials
    assert len(trials) == 5 and all(t.state.name == "COMPLETE" for t in trials)
    assert all(t.user_attrs["shared_host"] for t in trials)
    parallel = [t for t in trials[1:]]
    assert {t.user_attrs["slot"] for t in parallel} == {"job 0: cores 0", "job 1: cores 1"}
    overlap = any(
        a.user_attrs["launch_time"] < b.user_attrs["exit_time"] and b.user_attrs["launch_time"] < a.user_attrs["exit_time"]
        for i, a in enumerate(parallel) for b in parallel[i + 1:]
    )
    assert overlap, [(t.user_attrs["launch_time"], t.user_attrs["exit_time"]) for t in parallel]


def test_slot_pools_rebuild_the_warm_process_when_the_model_file_changes(tmp_path, tiny_copy):
    from autotune.jobs import Slot, SlotPools

    pools = SlotPools(str(tiny_copy), cold=False, log_dir=str(tmp_path))
    try:
        slot = Slot(0)
        first = pools.get(slot)
        assert pools.get(slot) is first  # unchanged file: the same warm process
        first_pid = first.proc.pid
        tiny_copy.write_text(tiny_copy.read_text() + "\nEDITED = True\n")
        second = pools.get(slot)
        assert second is not first and second.proc.pid != first_pid and second.alive
        assert first.proc is None  # the old one was closed
    finally:
        pools.close()
    assert SlotPools(str(tiny_copy), cold=True, log_dir=str(tmp_path)).get(Slot(0)) is None


def test_a_prestarted_warm_process_is_adopted_once_and_ends_with_its_process(tmp_path):
    """``prestart`` spawns slot 0's warm process ahead of the run; the run's pools take that one
    (no second import), a second ``prestart`` spawns nothing, and one never adopted ends at exit."""
    import subprocess
    import sys
    import time

    from autotune import jobs

    model = tmp_path / "tiny.py"
    shutil.copy(MODELS / "tiny.py", model)
    jobs.prestart(model)
    ahead = jobs._AHEAD[str(model.resolve())]
    jobs.prestart(model)
    assert jobs._AHEAD[str(model.resolve())] is ahead  # spawned once
    pools = jobs.SlotPools(str(model), cold=False, log_dir=str(tmp_path))
    try:
        pools.start_all([jobs.Slot(0, {}, "one job")])
        assert pools.get(jobs.Slot(0, {}, "one job")) is ahead and ahead.ready  # adopted, and imported
        assert str(model.resolve()) not in jobs._AHEAD
    finally:
        pools.close()
    assert not ahead.alive
    code = (
        "import sys; from autotune import jobs; jobs.prestart(sys.argv[1]); "
        "print(next(iter(jobs._AHEAD.values())).proc.pid, flush=True)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=120, check=True)
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.2)
    assert not _running(pid), "a warm process never adopted outlived its process"


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
