"""The progress preview of a running trial: the file rank 0 writes while it trains, and its reader.

While a trial trains, its rank 0 rewrites a small JSON file about twice a second
(:class:`ProgressWriter`, from :mod:`autotune.callback`): batches done, samples seen, samples/s so far
after a provisional warm-up, and the recent training loss. The parent names the file in the
trial's environment (:data:`PROGRESS_FILE_ENV`) and reads it with :func:`read_progress`: the live
view (:mod:`autotune.report`) shows it, the pruning watcher (:mod:`autotune.study`) compares it at
milestones. The preview is only a preview: the trial's figures come from its rank reports
(:mod:`autotune.rank_report`).

The file is replaced atomically (written to ``<path>.tmp``, then renamed), so a reader sees a whole
preview or the previous one. Plain data only: importing this module loads neither torch nor Lightning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, TypedDict, cast

__all__ = ["PROGRESS_FILE_ENV", "Progress", "ProgressWriter", "read_progress", "write_progress"]

#: The environment variable that names a trial's progress file (unset: no preview is written).
PROGRESS_FILE_ENV = "AUTOTUNE_PROGRESS_FILE"


class _ProgressRequired(TypedDict):
    batches: int
    planned: int
    samples: int
    samples_per_sec: float | None


class Progress(_ProgressRequired, total=False):
    """The keys of a progress file.

    Attributes:
        batches: Training batches done on rank 0, >= 1.
        planned: Training batches the trial runs, >= ``batches`` unless Lightning runs more.
        samples: Training samples seen, all ranks together.
        samples_per_sec: Global samples/s since the provisional warm-up ended
            (:func:`autotune.measure.warmup_batches`; no device synchronisation), or ``None`` while
            warming up.
        loss: Mean training loss of the last (up to 8) batches, or ``None`` when none returned a
            loss tensor. Optional: absent from older previews.
    """

    loss: float | None


def write_progress(path: str, preview: Progress | Mapping[str, Any]) -> bool:
    """Replace the progress file at ``path`` with ``preview``, atomically.

    A preview that cannot be written is skipped: it must never fail the trial.

    Args:
        path: The progress file.
        preview: The preview to write.

    Returns:
        Whether the file was written.
    """
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(preview, f)
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def read_progress(path: str | None) -> Progress | None:
    """The latest progress preview at ``path``.

    Args:
        path: The progress file, or ``None``.

    Returns:
        The preview, or ``None`` when there is no path, no file yet (the trial is starting) or the file
        is not a JSON object.
    """
    if not path:
        return None
    try:
        with open(path) as f:
            preview = json.load(f)
    except (OSError, ValueError):
        return None
    return cast(Progress, preview) if isinstance(preview, dict) else None


class ProgressWriter:
    """Rank 0's writer of the progress file: at most one preview every ``every`` seconds, plus the last.

    Args:
        path: The progress file, or ``None`` to write nothing (a rank other than 0, or no reader).
        every: Seconds between two previews (> 0).
    """

    def __init__(self, path: str | None, every: float = 0.5):
        self.path = path
        self.every = every
        self._written_at = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProgressWriter:
        """A writer to the file named by :data:`PROGRESS_FILE_ENV` (none when it is unset)."""
        return cls((os.environ if environ is None else environ).get(PROGRESS_FILE_ENV))

    def due(self, now: float, last: bool = False) -> bool:
        """Whether a preview should be written now.

        Args:
            now: A monotonic clock reading, s (``time.perf_counter()``).
            last: This is the trial's last planned batch (always written).
        """
        return bool(self.path) and (now - self._written_at > self.every or last)

    def write(self, now: float, preview: Progress) -> None:
        """Write ``preview`` (see :func:`write_progress`) and remember ``now`` as the time of the last one."""
        self._written_at = now
        if self.path:
            write_progress(self.path, preview)
