"""Exceptions raised by autotune.

Everything autotune raises on purpose derives from :class:`AutotuneError`. :class:`UsageError` and
its subclasses are mistakes in what the user gave (a file, a flag, a YAML); the CLI prints their
message on one line and exits with code 2. Other errors are faults of the run itself (exit code 1).
"""

from __future__ import annotations

import contextlib
import enum
from pathlib import Path
from typing import IO, Any

__all__ = [
    "FAIL_KINDS",
    "AutotuneError",
    "BaselineFailedError",
    "FailKind",
    "Interrupted",
    "ModelFileError",
    "MonitorMissingError",
    "SpaceError",
    "StorageError",
    "StudyMismatchError",
    "UsageError",
    "did_you_mean",
]


class AutotuneError(Exception):
    """Root of every exception autotune raises on purpose.

    Attributes:
        detail: What ``--debug`` prints besides this process's traceback: the traceback of the
            child process the error came from (the model inspection), or ``None``.
    """

    detail: str | None = None


class UsageError(AutotuneError):
    """Bad input from the user: the message names the bad value and the fix (CLI exit code 2)."""


class ModelFileError(UsageError):
    """The model file cannot be loaded, or does not define what autotune needs."""


class SpaceError(UsageError):
    """A search space YAML is invalid: the message names the file, the key and the bad value."""


class StorageError(UsageError):
    """A storage URL or study database cannot be used."""


class StorageUnreachableError(AutotuneError):
    """The study's database stayed unreachable longer than ``$AUTOTUNE_STORAGE_RETRY`` seconds."""


class StudyNotFoundError(StorageError):
    """The storage holds no such study yet (or, for SQLite, the database file does not exist)."""


class StudyMismatchError(UsageError):
    """An existing study was created with settings that differ from the ones given now."""


class BaselineFailedError(AutotuneError):
    """The baseline trial (the model's own config) failed, so no trial can be judged against it."""


class MonitorMissingError(BaselineFailedError, UsageError):
    """The baseline trial never logged the metric ``--monitor`` names (a mistyped name): bad input, exit code 2."""


class FailKind(str, enum.Enum):
    """Why a trial failed or was stopped: the ``fail_kind`` user attribute of a FAIL or PRUNED trial.

    A ``str`` enum: it is stored, compared and printed as its value (``"oom"``); :data:`FAIL_KINDS`
    says what each means and what to do (docs/troubleshooting.md has a section per kind).
    """

    EXCEPTION = "exception"
    OOM = "oom"
    NONFINITE_LOSS = "nonfinite_loss"
    TIMEOUT = "timeout"
    KILLED = "killed"
    CRASHED = "crashed"
    BATCH_SIZE_NOT_APPLIED = "batch_size_not_applied"
    NUM_WORKERS_NOT_APPLIED = "num_workers_not_applied"
    WORKERS_DUPLICATE_DATA = "workers_duplicate_data"
    PRECISION_NOT_APPLIED = "precision_not_applied"
    MONITOR_MISSING = "monitor_missing"
    NO_MEASUREMENT = "no_measurement"
    NO_LOSS_CURVE = "no_loss_curve"
    STOPPED_EARLY = "stopped_early"
    NO_NOISE_SCALE = "no_noise_scale"
    PREDICTED_OOM = "predicted_oom"
    BATCH_ABOVE_EPOCH = "batch_above_epoch"
    FAILED_CLASS = "failed_class"
    PRUNED = "pruned"
    INTERRUPTED = "interrupted"
    NODE_LOST = "node_lost"

    def __str__(self) -> str:
        return str(self.value)


#: Every ``fail_kind`` a trial can store, with what it means and what to do about it
#: (docs/troubleshooting.md explains each; a test keeps the two and the code in step).
FAIL_KINDS: dict[FailKind, tuple[str, str]] = {
    FailKind.EXCEPTION: (
        "your code raised an exception (type, message, file:line; in DDP, the rank that raised first)",
        "read log_tail; fix the code, or narrow the space",
    ),
    FailKind.OOM: (
        "out of memory (CUDA OOM, or Lightning's out-of-memory detection)",
        "expected for large batches; lower the batch_size range if every large one fails",
    ),
    FailKind.NONFINITE_LOSS: (
        "the training loss or the final monitored metric became NaN or inf",
        "lower the lr range, or try 32-true precision",
    ),
    FailKind.TIMEOUT: (
        "the trial ran past --trial-timeout; its whole process group was killed",
        "raise --trial-timeout, or lower --samples",
    ),
    FailKind.KILLED: (
        "the trial process was killed by a signal (e.g. the kernel's OOM killer: SIGKILL)",
        "read log_tail and the system log; give the trials more host memory",
    ),
    FailKind.CRASHED: ("the trial process exited without a report (or not every rank reported)", "read log_tail"),
    FailKind.BATCH_SIZE_NOT_APPLIED: (
        "the first training batch did not have the trial's batch_size (or the data ran out before it was full)",
        "make the DataLoader read the batch_size constructor argument; an epoch smaller than the batch removes that batch size",
    ),
    FailKind.NUM_WORKERS_NOT_APPLIED: (
        "the train DataLoader did not have the trial's num_workers",
        "make the DataLoader read the num_workers constructor argument",
    ),
    FailKind.WORKERS_DUPLICATE_DATA: (
        "the training IterableDataset gave the same first batch in two DataLoader worker processes: every worker reads all of it",
        "shard it per worker with torch.utils.data.get_worker_info(), or search num_workers: {choices: [0]}",
    ),
    FailKind.PRECISION_NOT_APPLIED: (
        "Lightning ran another precision than the trial asked for",
        "do not hard-code precision in the model; set it in the Trainer only",
    ),
    FailKind.MONITOR_MISSING: (
        "the judged metric was never logged: --monitor named it, or training_step returns no loss to judge instead",
        "log it with self.log(...), or give --monitor a metric the module logs (the reason lists them)",
    ),
    FailKind.NO_MEASUREMENT: ("too few steps after the warm-up to measure throughput", "raise --samples"),
    FailKind.NO_LOSS_CURVE: (
        "--objective time-to-quality, and training_step returned no loss tensor to build the curve from",
        "return the loss from training_step, or use --objective throughput",
    ),
    FailKind.STOPPED_EARLY: (
        "training ended before the trial's budget of batches: a callback or the module set trainer.should_stop, "
        "or the data ran out; its loss covers fewer samples than the baseline's, so it is not compared",
        "skip that stop when AUTOTUNE_TRIAL_NUMBER is set (trials already leave out EarlyStopping)",
    ),
    FailKind.NO_NOISE_SCALE: (
        "--objective goodput, and no optimizer step measured the gradient noise scale",
        "raise --samples (at least 4 optimizer steps per trial)",
    ),
    FailKind.PREDICTED_OOM: (
        "not run (PRUNED): an earlier trial ran out of memory at a batch as large or larger, same devices, a dtype as narrow",
        "nothing to do; autotune show lists the OOM frontier",
    ),
    FailKind.BATCH_ABOVE_EPOCH: (
        "not run (PRUNED): its per-device batch is larger than an epoch, as an earlier trial's first batch showed",
        "nothing to do; larger batches need a training set with more samples per epoch",
    ),
    FailKind.FAILED_CLASS: (
        "not run (PRUNED): a --search staged stage-2 config with as many or fewer optimizer steps (same or larger "
        "effective batch, same or larger lr multiplier, same precision) than a trial that failed the loss at full budget",
        "nothing to do; the reason names the trial that failed",
    ),
    FailKind.PRUNED: (
        "stopped early (PRUNED): clearly worse than the completed trials at the same point (--pruner)",
        "nothing to do; --pruner none runs every trial to its end",
    ),
    FailKind.INTERRUPTED: ("Ctrl-C or SIGTERM stopped the trial", "resume with the command autotune printed"),
    FailKind.NODE_LOST: (
        "another node of a multi-node trial sent no report",
        "check that every node of the group runs autotune worker --node-rank K",
    ),
}


#: What stops this process when a ``KeyboardInterrupt`` arrives: ``"Ctrl-C"``, or ``"SIGTERM"``
#: once :func:`autotune.cli.main`'s handler turned a SIGTERM (``kill``, a SLURM time limit, a
#: Kubernetes eviction) into one, or :data:`CLOSED_OUTPUT` (:func:`stop_for_closed_output`).
#: Read through :func:`stopped_by`.
_STOPPED_BY = ["Ctrl-C"]
#: :func:`stopped_by` when the reader of standard output went away (``autotune search ... | head``).
CLOSED_OUTPUT = "a closed output pipe"
#: Whether a closed standard output stops this process as Ctrl-C does (``search``, ``worker``).
_STOP_ON_CLOSED_OUTPUT = [False]


def stopped_by() -> str:
    """``"Ctrl-C"``, ``"SIGTERM"`` or :data:`CLOSED_OUTPUT`: what interrupts this process (see :data:`_STOPPED_BY`)."""
    return _STOPPED_BY[0]


def stop_on_closed_output() -> None:
    """Make a closed standard output (``| head`` exited) stop this process as Ctrl-C does (see
    :func:`stop_for_closed_output`): a search's or worker's running trials are then stored as
    interrupted and retried by the next run, instead of staying RUNNING until they go stale."""
    _STOP_ON_CLOSED_OUTPUT[0] = True


def stop_for_closed_output() -> bool:
    """Called when a write to standard output found its reader gone. Returns ``False`` when this
    process does not stop for it (a read command: the broken pipe ends it, exit 141). Else standard
    output is pointed at ``/dev/null`` (later lines are dropped, not failed on) and a
    ``KeyboardInterrupt`` is raised in the main thread: here, or by a SIGINT sent to the main thread
    from another thread (which returns ``True`` and carries on until the main thread stops it; a real
    signal, unlike ``_thread.interrupt_main``, also wakes a main thread blocked waiting for the jobs)."""
    import os
    import signal
    import sys
    import threading

    if not _STOP_ON_CLOSED_OUTPUT[0]:
        return False
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if _STOPPED_BY[0] == CLOSED_OUTPUT:  # said once
        return True
    _STOPPED_BY[0] = CLOSED_OUTPUT
    if threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    return True


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has closed it (:func:`reader_gone`)."""
    import sys

    return reader_gone(sys.stdout)


def reader_gone(stream: IO[Any]) -> bool:
    """Whether ``stream`` is a pipe (or socket) whose reader has closed it: poll(2) reports an error or
    a hang-up on its end. Without poll (Windows), a broken pipe is taken to be this stream."""
    import select

    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def stop_on_sigterm() -> None:
    """Make SIGTERM stop this process as Ctrl-C does: a ``KeyboardInterrupt`` in the main thread, so
    running trials are stored as interrupted and the resume command is printed; :func:`stopped_by`
    then says ``SIGTERM``. A second SIGTERM ends the process at once (the default action)."""
    import signal

    def handler(signum, frame) -> None:
        _STOPPED_BY[0] = "SIGTERM"
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class Interrupted(AutotuneError):
    """Ctrl-C, SIGTERM or a closed output stopped the run; ``resume`` is the command that continues the study.

    ``finished``, when given, replaces the text after the first word: the run had finished its work
    (``"while printing the summary: the search had finished; ..."``) and there is nothing to resume.
    """

    def __init__(self, resume: str, finished: str = ""):
        what = "interrupted" if stopped_by() == "Ctrl-C" else f"stopped by {stopped_by()}"
        if finished:
            super().__init__(f"{what} {finished}")
        else:
            super().__init__(
                f"{what}; finished trials are kept. Resume with:\n  {resume}" if resume else f"{what}; finished trials are kept"
            )
        self.resume = resume


def did_you_mean(value: str, choices: Any) -> str:
    """``"; did you mean 'tpe'?"``: the closest of ``choices`` to a mistyped ``value``, case aside
    (:func:`difflib.get_close_matches`), or ``""`` when none is close."""
    import difflib

    names = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(value).lower(), list(names), n=1, cutoff=0.5)
    return f"; did you mean {names[close[0]]!r}?" if close else ""


def nearest_file(path: Path, suffix: str | None = None) -> Path | None:
    """The file beside ``path`` (a :class:`pathlib.Path` that does not exist) with the same suffix (or
    ``suffix``, for a path given without one: ``studies/proj`` for ``studies/proj.db``) whose name is
    closest to its name, the suffix left out of the comparison (every candidate shares it: with it,
    ``lm.db`` read as 60% like ``ae.db``; :func:`difflib.get_close_matches`), or ``None``."""
    import difflib

    suffix = path.suffix or suffix or ""
    try:
        found = sorted(p for p in path.parent.glob(f"*{suffix}") if p.is_file() and p != path) if path.parent.is_dir() else []
    except OSError:
        return None
    stems = {p.name[: len(p.name) - len(suffix)] if suffix else p.stem: p for p in found}
    close = difflib.get_close_matches(path.name[: len(path.name) - len(path.suffix)] if path.suffix else path.name, list(stems), n=1)
    return stems[close[0]] if close else None


def file_hint(path: Path, suffix: str | None = None) -> str:
    """``"; did you mean 'model.py'?"`` for :func:`nearest_file`, else ``""``."""
    near = nearest_file(path, suffix)
    return f"; did you mean {str(near)!r}?" if near else ""
