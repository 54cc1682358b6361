"""Warm trial processes: fork each trial from a process that has already imported everything.

A cold trial process pays for importing torch, Lightning and the user's model file (about 3.5 s on
a small CPU machine) before its first step. A :class:`WarmPool` starts one long-lived *zygote*
(``python -m autotune.warm MODEL_FILE``) that imports torch, Lightning, autotune's trial code and the
model file once, and then forks one child per trial. Isolation stays: each child calls ``setsid``
(its own session and process group, killed whole when the trial ends, exactly like a cold trial),
runs :func:`autotune.target.run_trial`, and its memory goes back to the system when it exits. The
ranks of a multi-device trial are forked from the trial child too (Lightning's
``DDPStrategy(start_method="fork")``), so they start warm as well.

The zygote never initialises CUDA (it reports ``torch.cuda.is_initialized()`` when ready), so forked
children can. It is the same idea as Python's ``forkserver`` with preloaded modules, done by hand
because a trial must run in a new session and report its pid before it starts.

Protocol (JSON lines): the zygote prints ``{"ready": ...}`` once; each request
``{"spec": PATH, "out": DIR, "log": PATH, "env": {...}, "command": "run"}`` on its stdin (``"inspect"``:
the model's inspection, ``out`` its report file, as ``python -m autotune.target inspect``) is answered by
``{"pid": PID}``, and ``{"exit": PID, "returncode": CODE}`` follows when that child ends (negative:
killed by that signal). The CLI rebuilds the zygote when the model file's contents change.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError

__all__ = ["WarmPool", "file_digest", "zygote_main"]

#: Seconds the CLI waits for a zygote to import everything.
READY_TIMEOUT = 300.0


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's contents (how a change of the model file is noticed)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class WarmPool:
    """One zygote process for one model file, used by one trial at a time.

    Args:
        model_file: The user's model file (preloaded by the zygote).
        env: Environment of the zygote and so of its trials (``autotune.runner`` builds it).
        log_path: File that receives the zygote's own output.

    Raises:
        AutotuneError: The zygote did not become ready (the message holds the end of its log).
    """

    def __init__(self, model_file: str | Path, env: Mapping[str, str], log_path: str | Path):
        self.model_file = str(model_file)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.digest = ""
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] = {}
        self._buffer = b""
        self._exits: dict[int, int] = {}

    def start(self) -> dict[str, Any]:
        """Start the zygote and wait until it has imported everything. Returns its ready message."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the zygote without waiting (see :meth:`wait_ready`); lets several import at once."""
        self.digest = file_digest(self.model_file)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the zygote writes to it for its whole life; closed in close()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.warm", self.model_file],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                env=self.env,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    def wait_ready(self) -> dict[str, Any]:
        """Wait until the spawned zygote has imported everything. Returns its ready message.

        Raises:
            AutotuneError: It exited or did not become ready within :data:`READY_TIMEOUT` s.
        """
        if self.ready:  # waited for already (the model's inspection ran in it before the run adopted it)
            return self.ready
        message = self._read(timeout=READY_TIMEOUT)
        if message is None or "ready" not in message:
            tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            self.close()
            raise AutotuneError(f"the warm trial process did not start (use --cold to run without it); log:\n{tail}")
        self.ready = message
        return message

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stale(self) -> bool:
        """Whether the model file changed since the zygote imported it (or the zygote died)."""
        try:
            return not self.alive or file_digest(self.model_file) != self.digest
        except OSError:
            return True

    def launch(self, spec_path: str, out_dir: str, log_path: str, env: Mapping[str, str], command: str = "run") -> int:
        """Fork one trial (``command="run"``), or the model's inspection (``"inspect"``: ``out_dir`` is
        then its report file, see :func:`autotune.target.main`); returns its pid, which is also its
        process group id.

        Raises:
            AutotuneError: The zygote is gone or did not answer.
        """
        if not self.alive:
            raise AutotuneError("the warm trial process is not running")
        request = {"spec": spec_path, "out": out_dir, "log": log_path, "env": dict(env), "command": command}
        proc = self.proc
        assert proc is not None and proc.stdin is not None  # alive, and start() opened stdin=PIPE
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = self._read(timeout=deadline - time.monotonic())
            if message is None:
                break
            if "pid" in message:
                return int(message["pid"])
        raise AutotuneError("the warm trial process did not start the trial")

    def wait(self, pid: int, timeout: float) -> int | None:
        """The trial's exit status (negative: killed by that signal), or ``None`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits:
            left = deadline - time.monotonic()
            if left <= 0 or (not self.alive and not self._buffer):
                break
            self._read(timeout=min(left, 1.0))
        return self._exits.pop(pid, None)

    def _read(self, timeout: float) -> dict[str, Any] | None:
        """Read one message (exit notices are recorded, then the next message is returned)."""
        deadline = time.monotonic() + max(0.0, timeout)
        assert self.proc is not None and self.proc.stdout is not None, "the warm trial process is closed"  # start() opened stdout=PIPE
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["returncode"])
                    return message
                return message
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the zygote exited
                return None
            self._buffer += chunk

    def close(self) -> None:
        """Stop the zygote (its running trials are separate sessions, killed by their runner)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]  # start() opened both with PIPE: never None
            except OSError:
                pass
        self.proc = None

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _die_with_parent() -> None:
    from autotune.runner import die_with_parent

    die_with_parent()


def _child(request: Mapping[str, Any]) -> None:
    """In the forked child: new session, own output, the trial's environment; never returns."""
    code = 1
    try:
        os.setsid()
        import signal

        from autotune.runner import die_with_parent, end_group_on_sigterm

        end_group_on_sigterm()
        die_with_parent(signal.SIGTERM)  # the trial (its whole group) ends with its warm process
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the trial's stdout for the rest of the process
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.update(request["env"])
        command = request.get("command", "run")
        sys.argv = [sys.argv[0], command, request["spec"], request["out"]]
        from autotune.target import main as target_main

        code = target_main([command, request["spec"], request["out"]])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def zygote_main(model_file: str) -> int:
    """Import everything once, then fork a trial child per request (see the module docstring)."""
    start = time.perf_counter()
    import lightning.pytorch  # noqa: F401
    import torch

    from autotune import callback, target
    from autotune.loader import load_user_module

    target._quiet()
    callback.measure_callback_class()
    try:
        load_user_module(model_file)
    except Exception as e:  # the trials will report it; stay useful for the others
        print(f"preloading {model_file} failed: {e}", file=sys.stderr)
    out = sys.stdout.buffer

    def send(message: Mapping[str, Any]) -> None:
        out.write((json.dumps(message) + "\n").encode())
        out.flush()

    send({"ready": True, "preload_seconds": time.perf_counter() - start, "cuda_initialized": bool(torch.cuda.is_initialized())})
    stdin = sys.stdin.buffer.raw  # type: ignore[union-attr]  # a BufferedReader at run time; typeshed says BinaryIO
    buffer = b""
    children: set[int] = set()
    open_input = True
    while open_input or children:
        if open_input:
            ready, _, _ = select.select([stdin], [], [], 0.05)
            if ready:
                chunk = os.read(stdin.fileno(), 65536)
                if not chunk:
                    open_input = False
                buffer += chunk
        else:
            time.sleep(0.05)
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request)
            children.add(pid)
            send({"pid": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                send({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})
    return 0


if __name__ == "__main__":
    sys.exit(zygote_main(sys.argv[1]))
