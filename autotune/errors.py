"""Exceptions raised by autotune.

Everything autotune raises on purpose derives from :class:`AutotuneError`. :class:`UsageError` and
its subclasses are mistakes in what the user gave (a file, a flag, a YAML); the CLI prints their
message on one line and exits with code 2. Other errors are faults of the run itself (exit code 1).
"""

from __future__ import annotations

__all__ = [
    "AutotuneError",
    "UsageError",
    "ModelFileError",
    "SpaceError",
    "StorageError",
    "StudyMismatchError",
    "BaselineFailedError",
    "Interrupted",
]


class AutotuneError(Exception):
    """Root of every exception autotune raises on purpose."""


class UsageError(AutotuneError):
    """Bad input from the user: the message names the bad value and the fix (CLI exit code 2)."""


class ModelFileError(UsageError):
    """The model file cannot be loaded, or does not define what autotune needs."""


class SpaceError(UsageError):
    """A search space YAML is invalid: the message names the file, the key and the bad value."""


class StorageError(UsageError):
    """A storage URL or study database cannot be used."""


class StudyMismatchError(UsageError):
    """An existing study was created with settings that differ from the ones given now."""


class BaselineFailedError(AutotuneError):
    """The baseline trial (the model's own config) failed, so no trial can be judged against it."""


#: Every ``fail_kind`` a trial can store, with what it means and what to do about it
#: (docs/troubleshooting.md explains each; a test keeps the two and the code in step).
FAIL_KINDS: dict[str, tuple[str, str]] = {
    "exception": ("your code raised an exception (type, message, file:line)", "read log_tail; fix the code, or narrow the space"),
    "oom": ("out of memory (CUDA OOM, or Lightning's out-of-memory detection)", "expected for large batches; lower the batch_size range if every large one fails"),
    "nonfinite_loss": ("the training loss or the final monitored metric became NaN or inf", "lower the lr range, or try 32-true precision"),
    "timeout": ("the trial ran past --trial-timeout; its whole process group was killed", "raise --trial-timeout, or lower --samples"),
    "killed": ("the trial process was killed by a signal (e.g. the kernel's OOM killer: SIGKILL)", "read log_tail and the system log; give the trials more host memory"),
    "crashed": ("the trial process exited without a report (or not every rank reported)", "read log_tail"),
    "batch_size_not_applied": ("the first training batch did not have the trial's batch_size", "make the DataLoader read the batch_size constructor argument"),
    "num_workers_not_applied": ("the train DataLoader did not have the trial's num_workers", "make the DataLoader read the num_workers constructor argument"),
    "precision_not_applied": ("Lightning ran another precision than the trial asked for", "do not hard-code precision in the model; set it in the Trainer only"),
    "monitor_missing": ("the --monitor metric was never logged", "log it with self.log(...), or give --monitor the name you log"),
    "no_measurement": ("too few steps after the warm-up to measure throughput", "raise --samples"),
    "no_loss_curve": ("--objective time-to-quality, and training_step returned no loss tensor to build the curve from", "return the loss from training_step, or use --objective throughput"),
    "no_noise_scale": ("--objective goodput, and no optimizer step measured the gradient noise scale", "raise --samples (at least 4 optimizer steps per trial)"),
    "predicted_oom": ("not run (PRUNED): an earlier trial ran out of memory at a batch as large or larger, same devices, a dtype as narrow", "nothing to do; autotune show lists the OOM frontier"),
    "pruned": ("stopped early (PRUNED): clearly worse than the completed trials at the same point (--pruner)", "nothing to do; --pruner none runs every trial to its end"),
    "interrupted": ("Ctrl-C stopped the trial", "resume with the command autotune printed"),
    "node_lost": ("another node of a multi-node trial sent no report", "check that every node of the group runs autotune worker --node-rank K"),
}


class Interrupted(AutotuneError):
    """The user pressed Ctrl-C; ``resume`` is the command that continues the study."""

    def __init__(self, resume: str):
        super().__init__(f"interrupted; finished trials are kept. Resume with:\n  {resume}" if resume else "interrupted; finished trials are kept")
        self.resume = resume
