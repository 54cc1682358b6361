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
