"""The pure step-time maths of one trial: warm-up cut, per-rank summary, merge of the ranks.

The Lightning callback that records the raw data in each rank lives in :mod:`autotune.callback`
(built from :mod:`autotune.step_timer`, :mod:`autotune.noise_probe`, :mod:`autotune.flop_probe` and
:mod:`autotune.progress`); each rank's report is written by :mod:`autotune.rank_report`. Everything
here is a function of plain data, tested without Lightning, and importing it loads neither torch nor
Lightning.

Throughput is measured over the steady state: the first batches (the warm-up) are excluded, where
the step times say the warm-up ended (:func:`steady_state_start`, MSER-5), not after a fixed count.
:func:`summarize` turns one rank's raw record into the figures stored on the trial, and
:func:`merge_ranks` combines the ranks' figures.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.rank_report import NoiseReport, RankReport, RankSummary

__all__ = [
    "TrialFault",
    "batch_length",
    "classify_exception",
    "classify_traceback",
    "forked_rank_index",
    "merge_ranks",
    "steady_state_start",
    "summarize",
    "warmup_batches",
]

#: At most this many points of the loss curve are stored per trial.
MAX_CURVE_POINTS = 200


#: Start of the note a :class:`TrialFault` carries, so that its kind survives as text in the
#: traceback a forked DDP rank sends to the launching process (see :func:`classify_traceback`).
FAULT_NOTE = "autotune fail kind: "


class TrialFault(Exception):
    """A trial failed for a reason autotune detected; ``kind`` is a short category.

    Kinds: ``batch_size_not_applied``, ``num_workers_not_applied``, ``precision_not_applied``,
    ``nonfinite_loss``, ``monitor_missing``. The kind is also a note of the exception
    (:data:`FAULT_NOTE`), which formatted tracebacks include.

    Attributes:
        kind: The category.
        details: Figures the rank report's ``error`` carries besides kind and message (e.g.
            ``epoch_samples``, see :class:`autotune.rank_report.RankError`).
    """

    def __init__(self, kind: str, message: str, **details: Any):
        super().__init__(message)
        self.kind = kind
        self.details = details
        if sys.version_info >= (3, 11):  # formatted tracebacks show notes from Python 3.11 on
            self.add_note(f"{FAULT_NOTE}{kind}")


def batch_length(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (nested lists/tuples/dicts ok)."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = batch_length(item)
            if n is not None:
                return n
    return None


def steady_state_start(intervals: Sequence[float], accumulate_grad_batches: int = 1, min_steady: int = 3) -> int:
    """Batches to discard as warm-up, found from the step times themselves (MSER-5).

    The first steps of a run are slow for reasons that have nothing to do with the config's speed
    (allocator growth, cuDNN autotuning, ``torch.compile``, DataLoader workers starting). The cut is
    chosen by the Marginal Standard Error Rule (White 1997, "An effective truncation heuristic for
    bias reduction in simulation output", Simulation 69(6); MSER-5 as in White, Cobb & Spratt 2000):
    the optimizer-step times are averaged in blocks of 5 (of 1 when there are fewer than 50 steps),
    and the cut ``d`` (in blocks, at most half of them) minimises
    ``sum((x_i - mean(x[d:]))**2 for i >= d) / (n - d)**2``, the squared standard error of the mean
    of what is kept. At least the first optimizer step is always discarded (it includes the
    DataLoader's start), unless that would leave fewer than ``min_steady`` batches: a run of a single
    optimizer step is then measured whole (a pessimistic figure; 0 is returned and recorded).

    Args:
        intervals: Seconds per training batch, in order (``>= 0``).
        accumulate_grad_batches: Batches per optimizer step (``>= 1``); the cut falls on a step boundary.
        min_steady: Batches always kept (the cut never leaves fewer, except that it is 0 for runs of
            ``min_steady`` batches or fewer).

    Returns:
        Leading batches to exclude, a multiple of ``accumulate_grad_batches`` (up to the run's end),
        ``0 <= w <= max(0, len(intervals) - min_steady)``.
    """
    k = max(1, accumulate_grad_batches)
    n_batches = len(intervals)
    limit = max(0, n_batches - min_steady)
    steps = [sum(intervals[i : i + k]) for i in range(0, n_batches - n_batches % k, k)]
    block = 5 if len(steps) >= 50 else 1
    x = [statistics.fmean(steps[i : i + block]) for i in range(0, len(steps) - len(steps) % block, block)]
    best_d, best = 0, math.inf
    if x:
        centre = statistics.fmean(x)  # centred values: the sums below lose no precision
        x = [v - centre for v in x]
    total = total_sq = 0.0  # suffix sums: each cut is scored in O(1)
    suffix = []
    for v in reversed(x):
        total += v
        total_sq += v * v
        suffix.append((total, total_sq))
    suffix.reverse()
    for d in range(0, len(x) // 2 + 1):
        kept = len(x) - d
        if kept < 2:
            break
        s1, s2 = suffix[d]
        score = max(0.0, s2 - s1 * s1 / kept) / kept**2
        if score < best:
            best_d, best = d, score
    w = max(1, best_d * block) * k
    if w > limit:
        w = (limit // k) * k
    return w


def warmup_batches(total_batches: int, accumulate_grad_batches: int) -> int:
    """A provisional warm-up length, used only for the live preview while a trial runs.

    A tenth of the run, at least 2 batches, rounded up to a whole optimizer step; when that would
    leave fewer than 3 batches, the most whole optimizer steps that leave 3 (0 for short runs). The
    trial's figures use :func:`steady_state_start` on the measured step times instead.

    Args:
        total_batches: Training batches the trial runs (>= 0).
        accumulate_grad_batches: Batches per optimizer step (>= 1).

    Returns:
        Number of leading batches, ``0 <= w <= max(0, total_batches - 3)``.
    """
    k = max(1, accumulate_grad_batches)
    w = math.ceil(max(2, math.ceil(0.1 * total_batches)) / k) * k
    limit = max(0, total_batches - 3)
    if w > limit:
        w = (limit // k) * k
    return w


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _thin(points: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """At most ``limit`` points: ``limit`` consecutive blocks, each its mean loss at its last sample count.

    Block means, not every k-th point: a window mean over the thinned curve (the smoothing of
    :func:`autotune.objective.time_to_target`) then stays the raw curve's. Picked points kept one
    batch's loss in 41 of a batch-1 run of 8,192 batches: its window of 819 samples averaged 20 single
    losses instead of 819, and the curve crossed the loss target 2.7x too early by chance (the zoo's demo
    ``BoringModel``: 1,903 samples against 5,152 on the whole curve).
    """
    if len(points) <= limit:
        return points
    n = len(points)
    blocks = (points[i * n // limit : (i + 1) * n // limit] for i in range(limit))
    return [(block[-1][0], statistics.fmean(loss for _, loss in block)) for block in blocks]


def summarize(record: Mapping[str, Any]) -> RankSummary:
    """Figures of one rank from its raw record (pure).

    Args:
        record: ``intervals`` (s, per batch), ``waits`` (s, per batch; the first may be 0),
            ``sizes`` (samples per batch on this rank), ``losses`` (per batch, unscaled),
            ``warmup`` (batches excluded), ``window_seconds`` (s, synchronised steady-state window,
            optional), ``world_size``.

    Returns:
        ``samples`` and ``seconds`` of the steady-state window on this rank, ``step_time_median`` and
        ``step_time_p90`` (s), ``data_wait_fraction`` (0..1), ``loss_curve`` (list of
        ``[samples_seen_global, loss]``), ``train_loss_final`` (mean loss of the last tenth),
        ``batches``, ``warmup_batches``, ``samples_seen`` (all training samples, all ranks).
    """
    intervals = list(record["intervals"])
    waits = list(record["waits"])
    sizes = list(record["sizes"])
    losses = list(record["losses"])
    warmup = int(record["warmup"])
    world = int(record.get("world_size", 1))
    steady = slice(warmup, None)
    steady_intervals = intervals[steady]
    seconds = record.get("window_seconds") or sum(steady_intervals)
    samples = sum(sizes[steady])
    curve: list[tuple[int, float]] = []
    seen = 0
    for size, loss in zip(sizes, losses):
        seen += size * world
        if loss is not None:
            curve.append((seen, loss))
    tail = [value for _, value in curve[-max(1, len(curve) // 10) :]]
    total_interval = sum(steady_intervals)
    return {
        "samples": samples,
        "seconds": seconds,
        "step_time_median": statistics.median(steady_intervals) if steady_intervals else float("nan"),
        "step_time_p90": _percentile(steady_intervals, 0.9),
        "data_wait_fraction": (sum(waits[steady]) / total_interval) if total_interval > 0 else 0.0,
        "loss_curve": [list(p) for p in _thin(curve, MAX_CURVE_POINTS)],
        "train_loss_final": statistics.fmean(tail) if tail else float("nan"),
        "batches": len(intervals),
        "warmup_batches": warmup,
        "samples_seen": sum(sizes) * world,
    }


def merge_ranks(ranks: Sequence[RankReport], peak_memory_kind: str) -> dict[str, Any]:
    """Trial figures from every rank's :func:`summarize` output plus its memory (pure).

    Global throughput is the slowest rank's steady-state rate (its samples over its window) times
    the number of ranks: the ranks of a DDP step wait for each other, so the slowest one sets the
    pace (each rank finds its own warm-up cut, so the windows may differ slightly). Step times are the slowest
    rank's; the loss curve is rank 0's; validation metrics are averaged over ranks.

    Args:
        ranks: Per-rank dicts: :func:`summarize` keys plus ``peak_memory_gib`` and ``metrics``.
        peak_memory_kind: ``"cuda_max_allocated"`` (per device; the maximum over ranks is kept) or
            ``"cpu_rss"`` (peak RSS of each rank and its workers; summed over ranks).

    The device's peak FLOP/s (rank 0's) is never below what the trial achieved per device
    (``flops_per_sample x device/samples_per_sec``): a lower peak (a cached figure measured on a busy
    machine) is raised to it, with ``peak_flops_source`` ``"achieved"``, so MFU stays at most 100%.

    Returns:
        ``samples_per_sec`` (global), ``device/samples_per_sec`` (per device), step times, data
        wait fraction, ``peak_memory_gib``, ``loss_curve``, ``train_loss_final``, ``metrics``,
        ``flops_per_sample``, ``peak_flops`` and ``peak_flops_source``.
    """

    def rate(r: RankReport) -> float:
        return r["samples"] / r["seconds"] if r["seconds"] and r["seconds"] > 0 else float("nan")

    slowest = min(ranks, key=lambda r: (not math.isnan(rate(r)), rate(r)))
    sps = rate(slowest) * len(ranks)
    metrics: dict[str, float] = {}
    names = set().union(*(r.get("metrics", {}).keys() for r in ranks))
    for name in names:
        values = [r["metrics"][name] for r in ranks if name in r.get("metrics", {})]
        metrics[name] = statistics.fmean(values)
    memory = [r.get("peak_memory_gib", 0.0) for r in ranks]
    rank0 = min(ranks, key=lambda r: r.get("rank", 0))
    flops_per_sample = _mean_or_none([r.get("flops_per_sample") for r in ranks])
    peak, peak_source = rank0.get("peak_flops"), rank0.get("peak_flops_source")
    achieved = flops_per_sample * sps / len(ranks) if flops_per_sample and math.isfinite(sps) else None
    if peak and achieved and achieved > peak:
        peak, peak_source = achieved, "achieved"
    return {
        "samples_per_sec": sps,
        "device/samples_per_sec": sps / len(ranks) if ranks else float("nan"),
        "step_time_median": slowest["step_time_median"],
        "step_time_p90": slowest["step_time_p90"],
        "data_wait_fraction": max(r["data_wait_fraction"] for r in ranks),
        "peak_memory_gib": sum(memory) if peak_memory_kind == "cpu_rss" else max(memory),
        "peak_memory_kind": peak_memory_kind,
        "loss_curve": rank0["loss_curve"],
        "train_loss_final": rank0["train_loss_final"],
        "metrics": metrics,
        "batches": rank0["batches"],
        "warmup_batches": rank0["warmup_batches"],
        "samples_seen": rank0["samples_seen"],
        "noise": _merge_noise([r.get("noise") for r in ranks]),
        "flops_per_sample": flops_per_sample,
        "peak_flops": peak,
        "peak_flops_source": peak_source,
    }


def _mean_or_none(values: Sequence[Any]) -> float | None:
    got = [float(v) for v in values if v]
    return statistics.fmean(got) if got else None


def _merge_noise(reports: Sequence[NoiseReport | None]) -> NoiseReport | None:
    """Average the ranks' ``grad_sq`` and ``trace`` estimates (each rank measured its own local gradient)."""
    got = [r for r in reports if r]
    if not got:
        return None
    return {
        "grad_sq": statistics.fmean(r["grad_sq"] for r in got),
        "trace": statistics.fmean(r["trace"] for r in got),
        "measurements": sum(r["measurements"] for r in got),
        "method": got[0]["method"],
    }


def classify_exception(error: BaseException) -> tuple[str, str]:
    """Failure kind and one-line reason of an exception raised in a trial.

    Kinds: a :class:`TrialFault`'s own kind; ``oom`` for ``torch.OutOfMemoryError`` or what
    Lightning's ``is_oom_error`` recognises; ``interrupted``; else ``exception`` with the type, the
    message's first line and the innermost frame outside site-packages and autotune (file:line).
    A forked DDP rank's failure, which reaches the launching process as torch's
    ``ProcessRaisedException`` (the rank's traceback as text) or ``ProcessExitedException``, is
    classified from what the rank raised (:func:`classify_traceback`), or as ``killed``/``crashed``.
    A DataLoader worker's exception, which torch re-raises as ``Caught OSError in DataLoader worker
    process 0.`` with the worker's traceback as text, is classified from that traceback, the worker named.
    """
    import traceback

    if isinstance(error, TrialFault):
        return error.kind, str(error)
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", "interrupted"
    first_line = str(error).splitlines()[0] if str(error) else ""
    try:
        import torch
        from lightning.pytorch.utilities.memory import is_oom_error
        from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

        if isinstance(error, ProcessRaisedException):
            return classify_traceback(str(error))
        if isinstance(error, ProcessExitedException):
            if error.signal_name:
                return "killed", f"killed: DDP rank process {error.error_index} was killed by {error.signal_name}"
            return "crashed", f"crashed: DDP rank process {error.error_index} exited with code {error.exit_code}"
        if is_oom_error(error) or isinstance(error, getattr(torch, "OutOfMemoryError", ())):
            return "oom", f"out of memory: {first_line or type(error).__name__}"
    except ImportError:  # pragma: no cover - torch and lightning are dependencies
        pass
    worker = _LOADER_WORKER.match(first_line)
    if worker and "\nOriginal Traceback" in str(error):  # a DataLoader worker's: what it raised, not torch's wrapper
        kind, reason = classify_traceback(str(error).split("\nOriginal ", 1)[1])
        return kind, f"{reason} (in DataLoader worker process {worker['index']})"
    frames = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)]
    return "exception", f"exception in user code: {type(error).__name__}: {first_line}{_user_frame(frames)}"


#: The first line of what torch re-raises in the main process for a DataLoader worker's exception
#: (``torch._utils.ExceptionWrapper``: the worker's traceback follows as ``Original Traceback ...``).
_LOADER_WORKER = re.compile(r"^Caught \w+ in DataLoader worker process (?P<index>\d+)\.$")


def forked_rank_index(error: BaseException) -> int | None:
    """The process index (local rank) of the forked DDP rank whose failure ``error`` reports in the
    launching process (torch's ``ProcessRaisedException`` or ``ProcessExitedException``), else ``None``."""
    if type(error).__name__ not in ("ProcessRaisedException", "ProcessExitedException"):
        return None
    index = getattr(error, "error_index", None)
    return index if isinstance(index, int) else None


def _user_frame(frames: Sequence[tuple[str, int | None]]) -> str:
    """``" at FILE:LINE"`` of the innermost frame outside site-packages and autotune, or ``""``."""
    import os
    from pathlib import Path

    for filename, lineno in reversed(frames):
        path = filename.replace(os.sep, "/")
        if "site-packages" not in path and "/autotune/" not in path and not path.startswith("<"):
            return f" at {Path(filename).name}:{lineno}"
    return ""


#: A frame line of a formatted traceback: ``  File "PATH", line N, in NAME``.
_FRAME_LINE = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')

#: The exception line that ends a formatted traceback: ``module.Type: message`` or ``Type``.
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


def classify_traceback(text: str) -> tuple[str, str]:
    """Failure kind and one-line reason from a formatted traceback (pure).

    A forked DDP rank's exception reaches the launching process only as this text (torch's
    ``ProcessRaisedException``), so the kinds of :func:`classify_exception` are read from it: the
    last traceback of the text (the exception that ended the rank), its exception line (type and
    message), a :class:`TrialFault`'s kind from its note (:data:`FAULT_NOTE`), out of memory from
    the type or Lightning's OOM messages, and the innermost frame outside site-packages and autotune.

    Args:
        text: The text, from ``traceback.format_exc()`` (torch prefixes a line naming the process).

    Returns:
        ``(kind, reason)`` as :func:`classify_exception` returns them.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    block = lines[starts[-1] + 1 :] if starts else lines
    frames: list[tuple[str, int | None]] = []
    after = 0
    for i, line in enumerate(block):
        match = _FRAME_LINE.match(line)
        if match:
            frames.append((match["file"], int(match["line"])))
            after = i + 1
    tail = [line for line in block[after:] if line and not line[0].isspace()]
    note = next((line[len(FAULT_NOTE) :].strip() for line in tail if line.startswith(FAULT_NOTE)), None)
    match = _EXCEPTION_LINE.match(tail[0]) if starts and tail else None
    if match is None:  # not a traceback: keep the text's first line
        first = next((line.strip() for line in lines if line.strip()), "")
        return "exception", f"exception in a DDP rank: {first}"
    name, message = match["type"].rsplit(".", 1)[-1], (match["message"] or "").strip()
    if note:
        return note, message
    if name == "KeyboardInterrupt":
        return "interrupted", "interrupted"
    oom = name == "OutOfMemoryError"
    if not oom and name == "RuntimeError":
        try:
            from lightning.pytorch.utilities.memory import is_oom_error

            oom = is_oom_error(RuntimeError(message))
        except ImportError:  # pragma: no cover - lightning is a dependency
            pass
    if oom:
        return "oom", f"out of memory: {message or name}"
    return "exception", f"exception in user code: {name}: {message}{_user_frame(frames)}"


#: Names that moved out of this module, still importable from it (lazily: they may load Lightning).
_MOVED = {
    "MeasureCallback": "autotune.callback",
    "measure_callback_class": "autotune.callback",
    "applied_knobs": "autotune.callback",
    "peak_rss_gib": "autotune.callback",
    "write_rank_report": "autotune.rank_report",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
