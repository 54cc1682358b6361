"""Running trial processes from the CLI process: isolation, timeouts, kill, and the outcome.

Each trial runs ``python -m autotune.target`` in a new session (its own process group). Whatever
happens (normal end, a crash, a timeout, Ctrl-C in the CLI), the whole group is killed afterwards, so
no DDP rank or DataLoader worker outlives its trial. The outcome is classified by the pure function
:func:`classify` from the exit status and the per-rank JSON files the ranks wrote
(:mod:`autotune.rank_report`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, FailKind, UsageError
from autotune.rank_report import RankReport, read_rank_reports

__all__ = ["TrialOutcome", "classify", "inspect_process", "kept_log", "kill_group", "run_trial_process", "trial_spec"]

#: Lines of a failed trial's log kept on the trial (``log_tail``, shown with its reason).
LOG_TAIL_LINES = 20

#: Bytes of every trial's output (stdout and stderr together, all ranks) kept on the trial (user
#: attribute ``log``, ``autotune show STUDY N --log``): its last 32 KiB, in the study's storage so that
#: a PostgreSQL study shared by many machines has it too.
LOG_KEEP_BYTES = 32 * 1024

#: Most bytes the kept output may take as the JSON Optuna stores (its escapes of control and non-ASCII
#: characters included): under MySQL's 65,535-byte TEXT, the smallest column an Optuna storage gives it.
_LOG_KEEP_JSON_BYTES = 60_000


@dataclass
class TrialOutcome:
    """What one trial process produced.

    Attributes:
        ok: Every rank finished and reported.
        fail_kind: Short failure category (``timeout``, ``oom``, ``nonfinite_loss``, ``exception``,
            ``killed``, ``crashed``, ``batch_size_not_applied``, ...), or ``None``.
        fail_reason: One-line reason stored on the trial, or ``None``.
        ranks: The rank reports (see :class:`autotune.rank_report.RankReport`).
        wall_seconds: Process start to exit, s.
        log_tail: Last lines of the trial's combined stdout/stderr (a failed trial's).
        log: The end of that output, at most :data:`LOG_KEEP_BYTES` (see :func:`kept_log`).
        process_group: The process group id the trial ran in.
    """

    ok: bool
    fail_kind: str | None = None
    fail_reason: str | None = None
    ranks: list[RankReport] = field(default_factory=list)
    wall_seconds: float = 0.0
    log_tail: str = ""
    log: str = ""
    process_group: int | None = None
    timing: dict[str, float] = field(default_factory=dict)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``).

    A trial lives in a session of its own, so without this a worker killed with SIGKILL would leave
    its trial running. A no-op where ``prctl`` is not available.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def end_group_on_sigterm() -> None:
    """In a trial process (a process group leader): on SIGTERM, SIGKILL the whole group.

    With :func:`die_with_parent` (``SIGTERM``), a trial whose worker dies takes its ranks and
    DataLoader workers with it.
    """
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))


def _trial_preexec() -> None:
    die_with_parent(signal.SIGTERM)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of a process group; a group already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def classify(
    returncode: int | None,
    timed_out: bool,
    timeout: float,
    ranks: Sequence[RankReport],
    expected_ranks: int,
) -> tuple[str | None, str | None]:
    """Failure kind and reason of a trial, or ``(None, None)`` when it succeeded (pure).

    Precedence: a timeout; then the rank that reported an error first (by the error's time; the
    other ranks of a DDP trial then fail too, with a broken collective; by rank without times),
    named in the reason of a multi-rank trial; then a missing rank report or a non-zero exit
    (killed by a signal, or crashed).

    Args:
        returncode: The trial process's exit status (negative: killed by that signal).
        timed_out: The process was killed at ``timeout``.
        timeout: The wall-clock cap, s.
        ranks: Rank reports found.
        expected_ranks: ``devices * num_nodes``.
    """
    if timed_out:
        return FailKind.TIMEOUT, f"timeout: the trial ran longer than {timeout:g} s (--trial-timeout) and was killed"
    failed = [r for r in ranks if r.get("error")]
    if failed:
        first = min(failed, key=lambda r: (r["error"].get("time") is None, r["error"].get("time") or 0.0, r.get("rank", 0)))
        error = first["error"]
        kind = FailKind(error["kind"]) if error["kind"] in {k.value for k in FailKind} else FailKind.EXCEPTION  # e.g. "usage"
        return kind, error["message"] + (f" (rank {first.get('rank', 0)})" if expected_ranks > 1 else "")
    if returncode is None:
        return FailKind.CRASHED, "crashed: the warm trial process went away before the trial ended"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return FailKind.KILLED, f"killed: the trial process was killed by {name}"
    if returncode:
        return FailKind.CRASHED, f"crashed: the trial process exited with code {returncode} without a report"
    if len([r for r in ranks if r.get("ok")]) < expected_ranks:
        return FailKind.CRASHED, f"crashed: {len(ranks)} of {expected_ranks} ranks reported"
    return None, None


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def kept_log(path: Path, limit: int = LOG_KEEP_BYTES) -> str:
    """The end of a trial's output that is stored on the trial: its last ``limit`` bytes (>= 1), from the
    first whole line in them, decoded as UTF-8 (bad bytes replaced), and fewer when as JSON they would
    pass :data:`_LOG_KEEP_JSON_BYTES`. Output cut at the front starts with one line that says how much
    was left out. ``""`` when the file is missing or empty.

    Args:
        path: The trial's log file.
        limit: Bytes kept at most (:data:`LOG_KEEP_BYTES`).
    """
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - limit))
            data = log.read(limit)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    trimmed = size > len(data)
    if trimmed:
        text = _from_a_line(text)
    while len(json.dumps(text)) > _LOG_KEEP_JSON_BYTES:
        text, trimmed = _from_a_line(text[len(text) // 2 :]), True
    if trimmed:
        left_out = size - len(text.encode("utf-8", errors="replace"))
        text = f"[autotune: the first {left_out:,} of {size:,} bytes of this trial's output are not kept (at most its last {limit:,} are)]\n{text}"
    return text


def _from_a_line(text: str) -> str:
    """``text`` from its first whole line on (all of it when it has no line break before its end)."""
    newline = text.find("\n")
    return text[newline + 1 :] if 0 <= newline < len(text) - 1 else text


#: Variables by which Lightning would take a trial for part of a bigger job (SLURM, torchrun, a fixed
#: rendezvous); a trial's ranks and rendezvous are autotune's to set (see :mod:`autotune.nodes`).
CLUSTER_VARIABLES = (
    "SLURM_NTASKS",
    "TORCHELASTIC_RUN_ID",
    "NODE_RANK",
    "GROUP_RANK",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


#: Variables a trial process is not given: the study's storage URL, which may hold the database's
#: password (the user's model code runs in the trial process and needs no access to the study).
SECRET_VARIABLES = ("AUTOTUNE_STORAGE",)


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a trial process: this one's, less :data:`CLUSTER_VARIABLES` and
    :data:`SECRET_VARIABLES`, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES and k not in SECRET_VARIABLES}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    # the trial imports autotune from wherever this process did
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else package_root
    return env


def _run(
    args: list[str], log_path: Path, timeout: float, env: Mapping[str, str], on_start: Any = None
) -> tuple[int | None, bool, float, int]:
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.target", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env),
            preexec_fn=_trial_preexec,
        )
        timed_out = False
        try:
            if on_start is not None:
                on_start(proc.pid)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(proc.pid)  # ranks and loader workers too, whatever happened
            proc.wait()
    return proc.returncode, timed_out, time.monotonic() - start, proc.pid


def _warm_inspection(pool: Any, spec_path: Path, out_path: Path, log_path: Path, timeout: float) -> tuple[int | None, bool]:
    """The inspection forked from a warm process: ``(exit status, timed out)``; ``(None, False)`` when
    there is no warm process or it did not start (the caller then runs a cold one)."""
    if pool is None:
        return None, False
    from autotune.errors import AutotuneError

    start = time.monotonic()
    try:
        pool.wait_ready()
        pid = pool.launch(str(spec_path), str(out_path), str(log_path), {}, command="inspect")
    except AutotuneError:
        return None, False
    try:
        returncode = pool.wait(pid, max(1.0, timeout - (time.monotonic() - start)))
    finally:
        kill_group(pid)  # whatever it started (DataLoader workers), whatever happened
    if returncode is None and not pool.alive:  # the warm process itself went: a cold one runs it
        return None, False
    return returncode, returncode is None


def trial_spec(source: Mapping[str, Any], config: Mapping[str, Any], samples: int, seed: int) -> dict[str, Any]:
    """The spec a trial process reads (see :func:`autotune.target.run_trial`).

    Args:
        source: Where the model comes from: a study's settings or a model inspection's report (keys
            ``model_file``, ``model_class``, ``data_class``, ``config_file``, ``user_config``, ``targets``,
            ``cli``; ``monitor``, where given: the metric that makes the loss curve when
            ``training_step`` returns no loss).
        config: The trial's config (:meth:`autotune.config.TrialConfig.to_dict`).
        samples: Training samples of the trial (>= 1).
        seed: Seed of ``seed_everything`` in every rank.
    """
    return {
        "model_file": source["model_file"],
        "model_class": source["model_class"],
        "data_class": source["data_class"],
        "config_file": source.get("config_file"),
        "user_config": source.get("user_config"),
        "targets": source["targets"],
        "cli": source.get("cli"),
        "train_samples": source.get("train_samples"),
        "monitor": source.get("monitor"),
        "baseline_batch_size": (source.get("baseline_config") or {}).get("batch_size"),
        "config": dict(config),
        "samples": int(samples),
        "seed": seed,
    }


def run_trial_process(
    spec: Mapping[str, Any],
    *,
    timeout: float,
    trial_number: int,
    expected_ranks: int,
    devices: int,
    pool: Any = None,
    slot_env: Mapping[str, str] | None = None,
    on_start: Any = None,
) -> TrialOutcome:
    """Run one trial in a fresh process group and classify what happened.

    Args:
        spec: The trial spec (see :func:`autotune.target.run_trial`).
        timeout: Wall-clock cap for the whole trial, s (> 0).
        trial_number: Optuna trial number, exported to the trial as ``AUTOTUNE_TRIAL_NUMBER``.
        expected_ranks: Rank reports a successful trial writes.
        devices: Devices per node (for rank numbering before Lightning sets it).
        pool: A started :class:`autotune.warm.WarmPool` to fork the trial from, or ``None`` to
            start a cold ``python -m autotune.target`` process.
        slot_env: Extra environment of this job slot (``AUTOTUNE_CPUS``, ``CUDA_VISIBLE_DEVICES``).
        on_start: Called with the trial's process group id once it runs (to kill it on Ctrl-C).

    Returns:
        The :class:`TrialOutcome`, with ``launch_time`` and ``exit_time`` (epoch seconds) in
        ``timing``. The temporary folder of the trial is removed.
    """
    with tempfile.TemporaryDirectory(prefix=f"autotune-trial{trial_number}-") as tmp:
        folder = Path(tmp)
        spec_path = folder / "spec.json"
        log_path = folder / "trial.log"
        trial_env = {"AUTOTUNE_TRIAL_NUMBER": str(trial_number), "AUTOTUNE_DEVICES": str(devices), **(slot_env or {})}
        launch_time = time.time()
        spec = {**spec, "launch_time": launch_time}
        start = time.monotonic()
        if pool is None:
            spec_path.write_text(json.dumps(spec))
            returncode, timed_out, _, pgid = _run(
                ["run", str(spec_path), str(folder)], log_path, timeout, child_env(trial_env), on_start=on_start
            )
        else:
            spec["start_method"] = "fork"  # DDP ranks are forked from the warm trial process too
            spec_path.write_text(json.dumps(spec))
            pgid = pool.launch(str(spec_path), str(folder), str(log_path), trial_env)
            try:
                if on_start is not None:
                    on_start(pgid)
                returncode = pool.wait(pgid, timeout)
                timed_out = returncode is None and pool.alive
            finally:
                kill_group(pgid)
        wall = time.monotonic() - start
        ranks = read_rank_reports(folder)
        kind, reason = classify(returncode, timed_out, timeout, ranks, expected_ranks)
        return TrialOutcome(
            ok=kind is None,
            fail_kind=kind,
            fail_reason=reason,
            ranks=ranks,
            wall_seconds=wall,
            log_tail=_tail(log_path) if kind else "",
            log=kept_log(log_path),
            process_group=pgid,
            timing={"launch_time": launch_time, "exit_time": launch_time + wall},
        )


def inspect_process(spec: Mapping[str, Any], timeout: float = 600.0, pool: Any = None) -> dict[str, Any]:
    """Run ``autotune.target inspect`` in a child process and return its report.

    Args:
        spec: ``model_file``, ``model_class``, ``data_class``, ``config_file`` (see
            :func:`autotune.inspection.inspect_model`).
        timeout: Seconds before the child is killed.
        pool: A :class:`autotune.warm.WarmPool` of the same model file spawned ahead of the run
            (:func:`autotune.jobs.prestart`), or ``None``. The inspection is then forked from it, in a
            session of its own like a trial, instead of importing torch and Lightning once more (the
            CPU time of one such import: seconds on a small machine); when the warm process does not
            start, a cold child runs it.

    Returns:
        The report of :func:`autotune.inspection.inspect_model`, with ``launch``: ``"warm"`` or ``"cold"``.

    Raises:
        UsageError: The model file, its classes or the config are unusable (message from the child).
        AutotuneError: The child crashed or timed out; the message holds the end of its log.
    """
    with tempfile.TemporaryDirectory(prefix="autotune-inspect-") as tmp:
        folder = Path(tmp)
        spec_path, out_path, log_path = folder / "spec.json", folder / "out.json", folder / "inspect.log"
        spec_path.write_text(json.dumps(spec))
        returncode, timed_out = _warm_inspection(pool, spec_path, out_path, log_path, timeout)
        launch = "warm"
        if returncode is None and not timed_out:  # no warm process: a cold one
            launch = "cold"
            returncode, timed_out, _, _ = _run(["inspect", str(spec_path), str(out_path)], log_path, timeout, child_env({}))
        if timed_out:
            raise AutotuneError(f"inspecting the model took longer than {timeout:g} s; log:\n{_tail(log_path)}")
        try:
            report = json.loads(out_path.read_text())
        except (OSError, ValueError):
            raise AutotuneError(f"inspecting the model failed (exit code {returncode}); log:\n{_tail(log_path)}") from None
        if not report.get("ok"):
            if report.get("usage"):
                error = UsageError(report["message"])
                error.detail = report.get("traceback")  # printed with --debug
                raise error
            raise AutotuneError(f"inspecting the model failed: {report['message']}\n{_tail(log_path)}")
        report["launch"] = launch
        return report
