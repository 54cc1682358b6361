"""The FLOP probe: counts the FLOPs of one rank's first training batch, for MFU (:mod:`autotune.flops`).

PyTorch's ``FlopCounterMode`` is entered when the first training batch starts and left when it ends,
so it counts that batch's forward and backward. The first batch is always warm-up, outside the
measured window, so counting costs the measurement nothing. A count that fails leaves the figure
empty: FLOPs are a figure, never a reason for the trial to fail.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["FlopProbe", "FlopReport"]


class FlopReport(TypedDict):
    """The FLOP figures of a rank report (see :class:`autotune.rank_report.RankReport`)."""

    flops_per_sample: float | None
    peak_flops: float | None
    peak_flops_source: str | None


class FlopProbe:
    """Counts the FLOPs of the first training batch (see the module docstring).

    Attributes:
        first_batch_flops: FLOPs of the first batch on this rank (forward and backward), or ``None``.
    """

    def __init__(self) -> None:
        self._counter: Any = None
        self.first_batch_flops: int | None = None

    def start(self) -> None:
        """Start counting (when the first training batch starts)."""
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
        except Exception:  # FLOPs are a figure, never a reason for the trial to fail
            self._counter = None

    def stop(self) -> None:
        """Stop counting and keep the count (when the first batch ends, or on an error); idempotent."""
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            counter.__exit__(None, None, None)
            self.first_batch_flops = int(counter.get_total_flops())
        except Exception:
            self.first_batch_flops = None

    def report(self, trainer: Any, first_batch_size: int | None, precision: str) -> FlopReport:
        """FLOPs per sample of the first batch; on rank 0 also the device's peak (:func:`autotune.flops.peak_flops`).

        Args:
            trainer: The Lightning Trainer (its ``global_rank``, ``precision`` and root device).
            first_batch_size: Samples in the first batch on this rank, or ``None``.
            precision: The trial's precision, used when the Trainer does not say.
        """
        from autotune.flops import peak_flops

        out: FlopReport = {"flops_per_sample": None, "peak_flops": None, "peak_flops_source": None}
        if self.first_batch_flops and first_batch_size:
            out["flops_per_sample"] = self.first_batch_flops / first_batch_size
        if trainer.global_rank == 0 and out["flops_per_sample"]:
            try:
                ran = str(getattr(trainer, "precision", None) or precision)
                out["peak_flops"], out["peak_flops_source"] = peak_flops(trainer.strategy.root_device, ran)
            except Exception:
                pass
        return out
