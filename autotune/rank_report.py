"""The rank report: the JSON file ``rank<R>.json`` each rank of a trial writes, and its reader.

Every rank writes its own report into the trial's folder (:func:`write_rank_report`): the
measurement callback (:mod:`autotune.callback`) when ``fit`` ends or raises, and
:func:`autotune.target.run_trial` when the rank fails before ``fit``. The parent reads them all
(:func:`read_rank_reports`, in :mod:`autotune.runner`) and merges the ranks' figures
(:func:`autotune.measure.merge_ranks`). The keys are described by :class:`RankReport`.

Plain data only: importing this module loads neither torch nor Lightning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from autotune.host_load import HostLoad

__all__ = ["NoiseReport", "RankError", "RankReport", "RankSummary", "read_rank_reports", "write_rank_report"]


class RankSummary(TypedDict):
    """One rank's figures, as :func:`autotune.measure.summarize` computes them from its raw record.

    Attributes:
        samples: Samples of the steady-state window on this rank.
        seconds: Length of the steady-state window, s (synchronised on CUDA).
        step_time_median: Median seconds per training batch in the window.
        step_time_p90: 90th percentile of the seconds per training batch in the window.
        data_wait_fraction: Share of the window spent waiting for data, 0..1.
        loss_curve: ``[samples_seen_global, loss]`` points, at most
            :data:`autotune.measure.MAX_CURVE_POINTS`.
        train_loss_final: Mean training loss of the last tenth of the curve.
        batches: Training batches run.
        warmup_batches: Leading batches excluded as warm-up.
        samples_seen: Training samples seen, all ranks together.
    """

    samples: int
    seconds: float
    step_time_median: float
    step_time_p90: float
    data_wait_fraction: float
    loss_curve: list[list[float]]
    train_loss_final: float
    batches: int
    warmup_batches: int
    samples_seen: int


class NoiseReport(TypedDict):
    """A rank's gradient noise estimates (see :mod:`autotune.noise` and :mod:`autotune.noise_probe`).

    Attributes:
        grad_sq: Step-averaged estimate of ``|G|^2``.
        trace: Step-averaged estimate of ``tr(Sigma)``.
        measurements: Finite measurements averaged (>= 1).
        method: ``"ddp_ranks"``, ``"micro_batches"`` or ``"consecutive_steps"``.
    """

    grad_sq: float
    trace: float
    measurements: int
    method: str


class _RankErrorKeys(TypedDict):
    kind: str
    message: str
    epoch_samples: NotRequired[int]


class RankError(_RankErrorKeys, total=False):
    """Why a rank failed: ``kind`` is a failure kind of :data:`autotune.errors.FAIL_KINDS`, ``message``
    the one-line reason, ``time`` when the rank failed (epoch seconds; absent for a failure before
    ``fit``), ``epoch_samples`` the samples in one epoch on this rank, when its first batch showed the
    data ran out before the batch was full (``batch_size_not_applied``; see :mod:`autotune.study.bounds`)."""

    time: float


class RankReport(RankSummary, total=False):
    """What one rank wrote to ``rank<R>.json``.

    A rank that finished (``ok`` true) has every key of :class:`RankSummary` and the ones below
    except ``error``; a failed rank has ``rank``, ``ok`` (false), ``error`` and what it knew by then
    (``config``, ``precision_ran``, ``applied``, ``host`` when training had started).

    Attributes:
        rank: The rank's global rank (``trainer.global_rank``), >= 0.
        ok: Whether ``fit`` returned.
        error: Why the rank failed.
        config: The trial config the rank saw (:meth:`autotune.config.TrialConfig.to_dict`).
        precision_ran: The precision Lightning ran (``str(trainer.precision)``).
        applied: What the rank really trained with (:func:`autotune.callback.applied_knobs`).
        lr_ran: The first optimizer's first param group's ``lr`` at the start of training.
        optimizer_ran: The first optimizer's class path (``torch.optim.adamw.AdamW``), or ``None``.
        stopped_at_target: Training stopped at the loss target before its budget (``stop_at_loss``
            of :class:`autotune.callback.MeasureCallback`).
        stopped_early: Training ended before its planned batches, not at the loss target (a callback or
            the module set ``trainer.should_stop``, or the data ran out first).
        planned_batches: Training batches the rank was to run (its budget).
        first_batch_time: When the first training batch started, epoch seconds.
        train_end_time: When the last training batch ended, epoch seconds.
        first_batch_size: Samples in the first training batch.
        noise: Gradient noise estimates, or ``None`` when none was measured.
        flops_per_sample: FLOPs per training sample (forward and backward), or ``None``.
        peak_flops: The device's peak, FLOP/s (rank 0 only), or ``None``.
        peak_flops_source: ``"lightning"``, ``"measured"`` or ``"cached"``, or ``None`` (the trial's
            figures may say ``"achieved"``: :func:`autotune.measure.merge_ranks`).
        metrics: The scalar ``trainer.callback_metrics`` at the end of ``fit``.
        peak_memory_gib: Peak memory, GiB.
        peak_memory_kind: ``"cuda_max_allocated"`` (per device) or ``"cpu_rss"`` (the process's).
        host: How busy the host was over the measured window (:class:`autotune.host_load.HostLoad`;
            a failed rank's from the start of training to its failure), or ``None`` (not measured).
    """

    rank: int
    ok: bool
    error: RankError
    config: dict[str, Any]
    precision_ran: str
    applied: dict[str, Any]
    lr_ran: float | None
    optimizer_ran: str | None
    stopped_at_target: bool
    stopped_early: bool
    planned_batches: int
    first_batch_time: float | None
    train_end_time: float | None
    first_batch_size: int | None
    noise: NoiseReport | None
    flops_per_sample: float | None
    peak_flops: float | None
    peak_flops_source: str | None
    metrics: dict[str, float]
    peak_memory_gib: float
    peak_memory_kind: str
    host: HostLoad | None


def write_rank_report(out_dir: str, rank: int, report: RankReport | Mapping[str, Any], overwrite: bool = True) -> bool:
    """Write ``out_dir/rank<rank>.json`` atomically; with ``overwrite=False`` keep a report already there.

    Values JSON cannot hold are written as floats (0-d tensors, numpy numbers) or else as strings.

    Args:
        out_dir: The trial's folder.
        rank: The rank's global rank, >= 0.
        report: The rank's report.
        overwrite: Replace a report the rank already wrote.

    Returns:
        Whether the file was written.

    Raises:
        OSError: The folder cannot be written.
    """
    path = Path(out_dir) / f"rank{rank}.json"
    if not overwrite and path.exists():
        return False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, default=_json_default))
    tmp.replace(path)
    return True


def read_rank_reports(folder: str | Path) -> list[RankReport]:
    """Every ``rank*.json`` report in ``folder``, by file name; unreadable or partial files are skipped.

    Args:
        folder: The trial's folder.

    Returns:
        The reports found (possibly none).
    """
    reports: list[RankReport] = []
    for path in sorted(Path(folder).glob("rank*.json")):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return reports


def _json_default(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
