import signal

from autotune.runner import classify


def test_classify_precedence():
    assert classify(None, True, 30, [], 1)[0] == "timeout"
    error = {"rank": 1, "error": {"kind": "oom", "message": "out of memory: x"}}
    assert classify(1, False, 30, [{"rank": 0, "ok": True}, error], 2) == ("oom", "out of memory: x (rank 1)")
    kind, reason = classify(-signal.SIGKILL, False, 30, [], 1)
    assert kind == "killed" and "SIGKILL" in reason
    assert classify(3, False, 30, [], 1)[0] == "crashed"
    assert classify(0, False, 30, [{"rank": 0, "ok": True}], 2)[0] == "crashed"  # a rank never reported
    assert classify(0, False, 30, [{"rank": 0, "ok": True}, {"rank": 1, "ok": True}], 2) == (None, None)


def test_the_rank_that_failed_first_names_the_failure_of_a_ddp_trial():
    # rank 1 raised; rank 0 then failed in a broken collective, later (cold trials: each rank reports)
    cause = {"rank": 1, "ok": False, "error": {"kind": "exception", "message": "exception in user code: ValueError: boom", "time": 10.0}}
    effect = {"rank": 0, "ok": False, "error": {"kind": "exception", "message": "RuntimeError: Connection closed by peer", "time": 10.4}}
    assert classify(1, False, 30, [effect, cause], 2) == ("exception", "exception in user code: ValueError: boom (rank 1)")
    # a report without a time (a failure before fit) comes after timed ones; one rank: no rank named
    early = {"rank": 0, "ok": False, "error": {"kind": "oom", "message": "out of memory: x"}}
    assert classify(1, False, 30, [early, cause], 2)[1].endswith("ValueError: boom (rank 1)")
    assert classify(1, False, 30, [early], 1) == ("oom", "out of memory: x")
    # a kind no FailKind names is an exception, not a crash of the search
    usage = {"rank": 0, "ok": False, "error": {"kind": "usage", "message": "model.py: no LightningModule"}}
    assert classify(1, False, 30, [usage], 1) == ("exception", "model.py: no LightningModule")


def test_a_trial_never_inherits_a_cluster_launcher_s_rank_variables(monkeypatch):
    # under `srun autotune worker`, SLURM_NTASKS would make Lightning take the trial for part of the
    # SLURM job; a fixed MASTER_PORT would make parallel trials collide
    from autotune.runner import child_env

    for name, value in {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "77", "MASTER_PORT": "1234", "NODE_RANK": "3", "LOCAL_RANK": "1", "HOME": "/h"}.items():
        monkeypatch.setenv(name, value)
    env = child_env({"NODE_RANK": "1"})
    assert "SLURM_NTASKS" not in env and "MASTER_PORT" not in env and "LOCAL_RANK" not in env
    assert env["NODE_RANK"] == "1" and env["SLURM_JOB_ID"] == "77" and env["HOME"] == "/h"
