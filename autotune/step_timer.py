"""Per-batch timing of one rank: step intervals, data waits, batch sizes and the steady-state window.

The measurement callback (:mod:`autotune.callback`) feeds a :class:`StepTimer` the host clock
(``time.perf_counter()``) at the start of training and at the start and end of each training batch.
For each batch the timer keeps the data wait (end of the previous batch to start of this one:
fetching the batch and copying it to the device), the step interval (end of the previous batch to
end of this one) and the batch's size.

On CUDA the caller synchronises the device every :attr:`StepTimer.sync_every` batches (about 50
times per run, on optimizer-step boundaries; :meth:`StepTimer.sync_due`) and at the end, and the
measured window starts at the first synchronised step at or after the warm-up cut
(:func:`autotune.measure.steady_state_start`), so it covers finished work. Per-step intervals stay
host-side times. The timer itself is pure: it never reads a clock except ``wall_clock`` for the
two epoch times used in start-up accounting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from autotune.measure import steady_state_start, warmup_batches

__all__ = ["StepTimer"]

#: Device synchronisations per run, about (see :attr:`StepTimer.sync_every`).
SYNCS_PER_RUN = 50


class StepTimer:
    """Step times of one rank's training batches (see the module docstring).

    Args:
        total_batches: Training batches the trial will run (>= 0).
        accumulate_grad_batches: Batches per optimizer step (>= 1).
        wall_clock: Epoch seconds, for :attr:`first_batch_time` and :attr:`train_end_time`.

    Attributes:
        warmup: Leading batches excluded; provisional (:func:`autotune.measure.warmup_batches`, for the
            live preview) until :meth:`cut_warmup` finds it from the step times.
        sync_every: Batches between device synchronisations, a multiple of ``accumulate_grad_batches``.
        intervals: Seconds per training batch, end of the previous batch to end of this one.
        waits: Seconds per training batch spent before it started (0 for the first).
        sizes: Samples per training batch on this rank (0 when unknown).
        ends: Host clock at the end of each batch, s.
        synced: Whether each batch ended on a synchronised device.
        window_seconds: Length of the steady-state window, s, once :meth:`cut_warmup` ran.
        first_batch_time: When the first batch started, epoch seconds.
        train_end_time: When training ended, epoch seconds.
    """

    def __init__(self, total_batches: int, accumulate_grad_batches: int, wall_clock: Callable[[], float] = time.time):
        self.total_batches = total_batches
        self.accumulate = accumulate_grad_batches
        self.wall_clock = wall_clock
        self.warmup = warmup_batches(total_batches, accumulate_grad_batches)
        k = max(1, accumulate_grad_batches)
        self.sync_every = max(1, math.ceil(total_batches / SYNCS_PER_RUN / k)) * k
        self.intervals: list[float] = []
        self.waits: list[float] = []
        self.sizes: list[int] = []
        self.ends: list[float] = []
        self.synced: list[bool] = []
        self.window_seconds: float | None = None
        self.first_batch_time: float | None = None
        self.train_end_time: float | None = None
        self._train_start: float | None = None
        self._last_end: float | None = None
        self._window_end: float | None = None

    @property
    def ended(self) -> bool:
        """Whether the measured window has its end (the last planned batch ended, or :meth:`end` ran)."""
        return self._window_end is not None

    def start(self, now: float) -> None:
        """Training starts (after a device synchronisation); ``now`` is the host clock, s."""
        self._last_end = self._train_start = now

    def batch_start(self, now: float, size: int | None) -> None:
        """A training batch of ``size`` samples (``None``: unknown) starts at host clock ``now``, s."""
        if not self.sizes:
            self.first_batch_time = self.wall_clock()  # start-up ends here
        self.waits.append(now - self._last_end if self._last_end is not None else 0.0)
        self.sizes.append(size or 0)

    def sync_due(self) -> bool:
        """Whether the batch now ending should end on a synchronised device (a step boundary, or the last)."""
        done = len(self.intervals) + 1
        return done % self.sync_every == 0 or done == self.total_batches

    def batch_end(self, now: float, synced: bool) -> bool:
        """The current batch ends at host clock ``now``, s.

        Args:
            now: Host clock, s, read after any device synchronisation.
            synced: The device was synchronised before ``now`` was read (or work is never asynchronous).

        Returns:
            Whether this was the last planned batch (the sample budget is spent; the window ends here).
        """
        assert self._last_end is not None, "batch_end before start"
        self.intervals.append(now - self._last_end)
        self.ends.append(now)
        self.synced.append(synced)
        self._last_end = now
        last = len(self.intervals) == self.total_batches
        if last:
            self.end(now)
        return last

    def end(self, now: float) -> None:
        """Training ends at host clock ``now``, s (read after a device synchronisation)."""
        self._window_end = now
        self.train_end_time = self.wall_clock()

    def cut_warmup(self) -> None:
        """Find the warm-up from the step times and the steady-state window (after :meth:`end`).

        The cut is :func:`autotune.measure.steady_state_start`, moved on to the first synchronised
        batch end at or after it; a cut that would leave nothing measures the whole run.
        """
        self.warmup = _synced_cut(steady_state_start(self.intervals, self.accumulate), self.synced, len(self.intervals))
        window_start = self.ends[self.warmup - 1] if self.warmup > 0 else self._train_start
        if window_start is not None and self._window_end is not None:
            self.window_seconds = self._window_end - window_start

    def steady_rate(self, batches: int, now: float, world_size: int) -> float | None:
        """Global samples/s of batches ``warmup..batches`` up to host clock ``now``, for the live preview.

        No device synchronisation: an estimate. ``None`` until the provisional warm-up has ended.
        """
        w = self.warmup
        if not (batches > w and len(self.ends) >= w > 0 and now > self.ends[w - 1]):
            return None
        return sum(self.sizes[w:batches]) * world_size / (now - self.ends[w - 1])


def _synced_cut(cut: int, synced: Sequence[bool], batches: int) -> int:
    """The first cut at or after ``cut`` whose previous batch ended synchronised; 0 when none is left."""
    while 0 < cut < len(synced) and not synced[cut - 1]:
        cut += 1
    return 0 if cut >= batches else cut
