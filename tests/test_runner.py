import json
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
