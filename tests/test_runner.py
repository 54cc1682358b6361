import json
import signal

from autotune.runner import _LOG_KEEP_JSON_BYTES, LOG_KEEP_BYTES, classify, kept_log


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


def test_a_trial_keeps_its_whole_output_when_short_and_its_last_32_kib_from_a_whole_line_when_long(tmp_path):
    short = tmp_path / "short.log"
    short.write_text("hello from training_step\nsecond line\n")
    assert kept_log(short) == "hello from training_step\nsecond line\n"
    assert kept_log(tmp_path / "missing.log") == ""
    long = tmp_path / "long.log"
    lines = [f"line {i:06d} " + "x" * 50 for i in range(2000)]  # 62 bytes a line, 124,000 bytes in all
    long.write_text("\n".join(lines) + "\n")
    kept = kept_log(long)
    header, body = kept.split("\n", 1)
    assert len(body.encode()) <= LOG_KEEP_BYTES and body.startswith("line ") and body.endswith(lines[-1] + "\n")
    assert header == (f"[autotune: the first {long.stat().st_size - len(body.encode()):,} of {long.stat().st_size:,} bytes "
                      f"of this trial's output are not kept (at most its last {LOG_KEEP_BYTES:,} are)]")
    assert lines[0] not in kept
    # control characters and broken UTF-8 take up to 6 bytes each as JSON: fewer are kept, under the column's limit
    binary = tmp_path / "binary.log"
    binary.write_bytes((b"\x01\xff" * 30 + b"\n") * 500 + b"last line\n")  # 30,510 bytes: under the byte bound
    assert len(json.dumps(binary.read_bytes().decode(errors="replace"))) > _LOG_KEEP_JSON_BYTES
    kept = kept_log(binary)
    assert kept.startswith("[autotune: the first ") and kept.endswith("\x01\ufffd\nlast line\n")
    assert len(json.dumps(kept.split("\n", 1)[1])) <= _LOG_KEEP_JSON_BYTES
