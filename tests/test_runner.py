import signal

from autotune.runner import classify


def test_classify_precedence():
    assert classify(None, True, 30, [], 1)[0] == "timeout"
    error = {"rank": 1, "error": {"kind": "oom", "message": "out of memory: x"}}
    assert classify(1, False, 30, [{"rank": 0, "ok": True}, error], 2) == ("oom", "out of memory: x")
    kind, reason = classify(-signal.SIGKILL, False, 30, [], 1)
    assert kind == "killed" and "SIGKILL" in reason
    assert classify(3, False, 30, [], 1)[0] == "crashed"
    assert classify(0, False, 30, [{"rank": 0, "ok": True}], 2)[0] == "crashed"  # a rank never reported
    assert classify(0, False, 30, [{"rank": 0, "ok": True}, {"rank": 1, "ok": True}], 2) == (None, None)


def test_a_trial_never_inherits_a_cluster_launcher_s_rank_variables(monkeypatch):
    # under `srun autotune worker`, SLURM_NTASKS would make Lightning take the trial for part of the
    # SLURM job; a fixed MASTER_PORT would make parallel trials collide
    from autotune.runner import child_env

    for name, value in {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "77", "MASTER_PORT": "1234", "NODE_RANK": "3", "LOCAL_RANK": "1", "HOME": "/h"}.items():
        monkeypatch.setenv(name, value)
    env = child_env({"NODE_RANK": "1"})
    assert "SLURM_NTASKS" not in env and "MASTER_PORT" not in env and "LOCAL_RANK" not in env
    assert env["NODE_RANK"] == "1" and env["SLURM_JOB_ID"] == "77" and env["HOME"] == "/h"
