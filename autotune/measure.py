"""Measurement of one trial, in one Lightning callback, and the pure summary of what it recorded.

:class:`MeasureCallback` runs in each rank of a trial. Per training batch it records the host time
between the end of the previous batch and the start of this one (the data wait: fetching the batch
and copying it to the device), the time from the end of the previous batch to the end of this one
(the step interval), the batch's size and its loss. It also checks, on the first batch, that the
batch really has the trial's ``batch_size``, and raises on a non-finite loss.

Throughput is measured over the steady state: the first batches (the warm-up) are excluded, where
the step times say the warm-up ended (:func:`steady_state_start`, MSER-5), not after a fixed count.
On CUDA the device is synchronised every few optimizer steps (about 50 times per run) and at the
end, and the measured window starts at the first synchronised step after the warm-up, so it covers
finished work. Per-step intervals are host-side times.

:func:`summarize` turns the raw records into the figures stored on the trial; it is a pure function
of plain data.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import time
from typing import Any, Mapping, Sequence

__all__ = [
    "MeasureCallback",
    "measure_callback_class",
    "TrialFault",
    "warmup_batches",
    "steady_state_start",
    "summarize",
    "merge_ranks",
    "batch_length",
]

#: At most this many points of the loss curve are stored per trial.
MAX_CURVE_POINTS = 200


class TrialFault(Exception):
    """A trial failed for a reason autotune detected; ``kind`` is a short category.

    Kinds: ``batch_size_not_applied``, ``num_workers_not_applied``, ``precision_not_applied``,
    ``nonfinite_loss``, ``monitor_missing``.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


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
    steps = [sum(intervals[i:i + k]) for i in range(0, n_batches - n_batches % k, k)]
    block = 5 if len(steps) >= 50 else 1
    x = [statistics.fmean(steps[i:i + block]) for i in range(0, len(steps) - len(steps) % block, block)]
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
    if len(points) <= limit:
        return points
    stride = len(points) / limit
    picked = [points[int(i * stride)] for i in range(limit - 1)]
    return picked + [points[-1]]


def summarize(record: Mapping[str, Any]) -> dict[str, Any]:
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
    tail = [l for _, l in curve[-max(1, len(curve) // 10):]]
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


def merge_ranks(ranks: Sequence[Mapping[str, Any]], peak_memory_kind: str) -> dict[str, Any]:
    """Trial figures from every rank's :func:`summarize` output plus its memory (pure).

    Global throughput is the slowest rank's steady-state rate (its samples over its window) times
    the number of ranks: the ranks of a DDP step wait for each other, so the slowest one sets the
    pace (each rank finds its own warm-up cut, so the windows may differ slightly). Step times are the slowest
    rank's; the loss curve is rank 0's; validation metrics are averaged over ranks.

    Args:
        ranks: Per-rank dicts: :func:`summarize` keys plus ``peak_memory_gib`` and ``metrics``.
        peak_memory_kind: ``"cuda_max_allocated"`` (per device; the maximum over ranks is kept) or
            ``"cpu_rss"`` (peak RSS of each rank and its workers; summed over ranks).

    Returns:
        ``samples_per_sec`` (global), ``device/samples_per_sec`` (per device), step times, data
        wait fraction, ``peak_memory_gib``, ``loss_curve``, ``train_loss_final``, ``metrics``.
    """
    def rate(r: Mapping[str, Any]) -> float:
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
        "flops_per_sample": _mean_or_none([r.get("flops_per_sample") for r in ranks]),
        "peak_flops": rank0.get("peak_flops"),
        "peak_flops_source": rank0.get("peak_flops_source"),
    }


def _mean_or_none(values: Sequence[Any]) -> float | None:
    got = [float(v) for v in values if v]
    return statistics.fmean(got) if got else None


def _merge_noise(reports: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
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
    """
    import os
    import traceback
    from pathlib import Path

    if isinstance(error, TrialFault):
        return error.kind, str(error)
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", "interrupted"
    first_line = str(error).splitlines()[0] if str(error) else ""
    try:
        import torch
        from lightning.pytorch.utilities.memory import is_oom_error

        if is_oom_error(error) or isinstance(error, getattr(torch, "OutOfMemoryError", ())):
            return "oom", f"out of memory: {first_line or type(error).__name__}"
    except ImportError:  # pragma: no cover - torch and lightning are dependencies
        pass
    where = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = frame.filename.replace(os.sep, "/")
        if "site-packages" not in path and "/autotune/" not in path:
            where = f" at {Path(frame.filename).name}:{frame.lineno}"
            break
    return "exception", f"exception in user code: {type(error).__name__}: {first_line}{where}"


def write_rank_report(out_dir: str, rank: int, report: Mapping[str, Any], overwrite: bool = True) -> bool:
    """Write ``out_dir/rank<rank>.json``; with ``overwrite=False`` keep a report already there.

    Returns:
        Whether the file was written.
    """
    import json
    from pathlib import Path

    path = Path(out_dir) / f"rank{rank}.json"
    if not overwrite and path.exists():
        return False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, default=_json_default))
    tmp.replace(path)
    return True


def _json_default(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def peak_rss_gib() -> float:
    """Peak resident memory of this process plus its largest finished child, in GiB (Linux KiB units)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 2**20


_CALLBACK_CLASSES: dict[str, type] = {}


def measure_callback_class(pl: Any = None) -> type:
    """The :class:`MeasureCallback` class for a Lightning package (``lightning.pytorch`` by default,
    or ``pytorch_lightning``, whose Trainer accepts only its own callbacks). Built lazily so that
    importing this module does not import Lightning."""
    if pl is None:
        import lightning.pytorch as pl
    if pl.__name__ not in _CALLBACK_CLASSES:
        _CALLBACK_CLASSES[pl.__name__] = _make_callback_class(pl)
    return _CALLBACK_CLASSES[pl.__name__]


def applied_knobs(loader: Any, module: Any) -> dict[str, Any]:
    """What a rank really trains with, read from the objects (for the extended space's knobs):
    the train DataLoader's ``pin_memory``/``prefetch_factor``, the float32 matmul precision, whether
    the module is compiled (Lightning's ``_compiler_ctx``) and in channels-last format (its first 4-D
    parameter), and its parameter count (changed by searched constructor arguments)."""
    import torch

    # a 4-D weight whose channels-last and contiguous layouts differ (1 input channel or a 1x1 kernel are both)
    weights = [p for p in module.parameters() if p.dim() == 4 and p.size(1) > 1 and p.size(2) * p.size(3) > 1]
    return {
        "pin_memory": getattr(loader, "pin_memory", None),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "compiled": getattr(module, "_compiler_ctx", None) is not None,
        "channels_last": bool(weights) and weights[0].is_contiguous(memory_format=torch.channels_last) and not weights[0].is_contiguous(),
        "parameters": sum(p.numel() for p in module.parameters()),
    }


def _make_callback_class(pl: Any) -> type:
    import torch

    from autotune.noise import mean_terms, noise_terms

    class MeasureCallback(pl.Callback):
        """Records per-batch timing, size and loss of one rank (see the module docstring).

        Each rank writes its own report, ``out_dir/rank<R>.json``, when ``fit`` ends (after the
        final validation) or when it raises, so the reports are the same whichever launcher started
        the ranks (Lightning's subprocess re-execution, or forked ranks).

        Args:
            batch_size: The trial's per-device batch size; the first batch must have it.
            num_workers: The trial's DataLoader workers, checked on the train DataLoader, or ``None``.
            total_batches: Training batches the trial will run (for the warm-up length).
            accumulate_grad_batches: Batches per optimizer step (losses are unscaled by it).
            out_dir: Folder of the rank reports.
            static: Entries copied into every report (the config the rank saw, ...).
            check_every: Batches between non-finite loss checks (each check syncs the device once).
        """

        def __init__(
            self,
            batch_size: int,
            num_workers: int | None,
            total_batches: int,
            accumulate_grad_batches: int,
            out_dir: str = ".",
            static: Mapping[str, Any] | None = None,
            check_every: int = 16,
        ):
            self.out_dir = out_dir
            self.static = dict(static or {})
            self.total_batches = total_batches
            self._window_end: float | None = None
            self.batch_size = batch_size
            self.num_workers = num_workers
            self.accumulate = accumulate_grad_batches
            # provisional (the live preview); replaced by steady_state_start() when training ends
            self.warmup = warmup_batches(total_batches, accumulate_grad_batches)
            k = max(1, accumulate_grad_batches)
            self.sync_every = max(1, math.ceil(total_batches / 50 / k)) * k
            self.ends: list[float] = []
            self.synced: list[bool] = []
            self._train_start: float | None = None
            self.check_every = check_every
            self.intervals: list[float] = []
            self.waits: list[float] = []
            self.sizes: list[int] = []
            self._losses: list[Any] = []
            self._last_end: float | None = None
            self._window_start: float | None = None
            self.window_seconds: float | None = None
            self.world_size = 1
            self.first_batch_time: float | None = None
            self.train_end_time: float | None = None
            self.lr_ran: float | None = None
            self.cuda = False
            # rank 0 writes a progress preview here about twice a second (autotune's live view reads it)
            self.progress_file = os.environ.get("AUTOTUNE_PROGRESS_FILE")
            self._progress_at = 0.0
            # gradient noise scale (autotune.noise): measured on about 16 optimizer steps spread over the run
            self.noise_every = max(1, total_batches // k // 16)
            self.noise_method: str | None = None
            self._opt_steps = 0
            self._noise: list[tuple[Any, Any]] = []
            self._pair: list[Any] | None = None
            self._pair_sq: Any = None
            self._micro_sq: list[Any] = []
            self._micro_prev: list[Any] | None = None
            self._local_sq: Any = None
            # FLOPs of the first batch (warm-up, outside the measured window), for MFU (autotune.flops)
            self._flop_counter: Any = None
            self.first_batch_flops: int | None = None
            self.precision = str((static or {}).get("config", {}).get("precision", "32-true"))

        def _sync(self) -> None:
            if self.cuda:
                torch.cuda.synchronize()

        def on_train_start(self, trainer, pl_module) -> None:
            self.world_size = trainer.world_size
            self.cuda = trainer.strategy.root_device.type == "cuda"
            loader = trainer.train_dataloader
            workers = getattr(loader, "num_workers", None)
            if self.num_workers is not None and workers is not None and workers != self.num_workers:
                raise TrialFault("num_workers_not_applied", f"num_workers not applied: the train DataLoader has {workers}, the trial asked for {self.num_workers}")
            if trainer.optimizers:
                self.lr_ran = float(trainer.optimizers[0].param_groups[0]["lr"])
            self.static["applied"] = applied_knobs(loader, pl_module)
            self._start_noise(trainer)
            self._sync()
            self._last_end = time.perf_counter()
            self._train_start = self._window_start = self._last_end  # moved to the warm-up's end when training ends

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            now = time.perf_counter()
            n = batch_length(batch)
            if not self.sizes:
                self.first_batch_time = time.time()  # epoch seconds: start-up ends here
            if not self.sizes and n is not None and n != self.batch_size:
                try:
                    small = n < self.batch_size and n == len(trainer.train_dataloader.dataset)
                except (AttributeError, TypeError):  # iterable datasets have no length
                    small = False
                hint = " (is the training set smaller than the batch?)" if small else ""
                raise TrialFault(
                    "batch_size_not_applied",
                    f"batch_size not applied: the first training batch had {n} samples, the trial asked for {self.batch_size}{hint}",
                )
            self.waits.append(now - self._last_end if self._last_end is not None else 0.0)
            self.sizes.append(n or 0)
            if len(self.sizes) == 1:
                self._start_flop_count()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            index = len(self.intervals)
            if index == 0:
                self._stop_flop_count()
            edge = (index + 1) % self.sync_every == 0 or index + 1 == self.total_batches
            if edge:
                self._sync()
            now = time.perf_counter()
            self.intervals.append(now - self._last_end)
            self.ends.append(now)
            self.synced.append(edge or not self.cuda)
            self._last_end = now
            if index + 1 == self.total_batches:
                self._window_end = now
                self.train_end_time = time.time()
                trainer.should_stop = True  # the sample budget is spent; the final validation follows
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if isinstance(loss, torch.Tensor):
                self._losses.append(loss.detach().float() * self.accumulate)
            else:
                self._losses.append(None)
            if (index + 1) % self.check_every == 0:
                self._check_finite()
            if self.progress_file and trainer.global_rank == 0 and (now - self._progress_at > 0.5 or index + 1 == self.total_batches):
                self._progress_at = now
                self._write_progress(index + 1, now)

        def _write_progress(self, batches: int, now: float) -> None:
            """A preview for the live view: batches done, samples seen, samples/s so far after the warm-up
            (no device synchronisation: the trial's figures come from :func:`summarize` only)."""
            steady = batches > self.warmup and len(self.ends) >= self.warmup > 0 and now > self.ends[self.warmup - 1]
            rate = sum(self.sizes[self.warmup:batches]) * self.world_size / (now - self.ends[self.warmup - 1]) if steady else None
            recent = [float(l) for l in self._losses[-8:] if l is not None]  # the recent training loss (for pruning)
            preview = {"batches": batches, "planned": self.total_batches, "samples": sum(self.sizes) * self.world_size, "samples_per_sec": rate,
                       "loss": statistics.fmean(recent) if recent else None}
            tmp = f"{self.progress_file}.tmp"
            try:
                with open(tmp, "w") as f:
                    json.dump(preview, f)
                os.replace(tmp, self.progress_file)
            except OSError:
                pass

        def _check_finite(self) -> None:
            pending = [(i, l) for i, l in enumerate(self._losses) if isinstance(l, torch.Tensor)]
            if not pending:
                return
            stacked = torch.stack([l for _, l in pending])
            bad = ~torch.isfinite(stacked)
            if bool(bad.any()):
                first = pending[int(bad.nonzero()[0])][0]
                seen = sum(self.sizes[: first + 1]) * self.world_size
                raise TrialFault("nonfinite_loss", f"non-finite loss ({float(stacked[bad][0])}) at batch {first} after {seen} samples")

        def _start_flop_count(self) -> None:
            try:
                from torch.utils.flop_counter import FlopCounterMode

                self._flop_counter = FlopCounterMode(display=False)
                self._flop_counter.__enter__()
            except Exception:  # FLOPs are a figure, never a reason for the trial to fail
                self._flop_counter = None

        def _stop_flop_count(self) -> None:
            counter, self._flop_counter = self._flop_counter, None
            if counter is None:
                return
            try:
                counter.__exit__(None, None, None)
                self.first_batch_flops = int(counter.get_total_flops())
            except Exception:
                self.first_batch_flops = None

        def _flops_report(self, trainer) -> dict[str, Any]:
            """FLOPs per sample of this rank's first batch; the device's peak (rank 0 only)."""
            from autotune.flops import peak_flops

            out: dict[str, Any] = {"flops_per_sample": None, "peak_flops": None, "peak_flops_source": None}
            if self.first_batch_flops and self.sizes and self.sizes[0]:
                out["flops_per_sample"] = self.first_batch_flops / self.sizes[0]
            if trainer.global_rank == 0 and out["flops_per_sample"]:
                try:
                    precision = str(getattr(trainer, "precision", None) or self.precision)
                    out["peak_flops"], out["peak_flops_source"] = peak_flops(trainer.strategy.root_device, precision)
                except Exception:
                    pass
            return out

        # --- gradient noise scale: small batches against the combined one (see autotune.noise) ---

        def _start_noise(self, trainer) -> None:
            if getattr(trainer.lightning_module, "automatic_optimization", True) is False:
                return  # manual optimization: no hook sees the combined gradient
            if self.world_size > 1:
                model = trainer.strategy.model
                if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
                        allreduce_hook,
                    )

                    def hook(state, bucket):
                        # this rank's own gradient, before the all-reduce averages it with the others
                        if self._measuring():
                            local = bucket.buffer().float().pow(2).sum()
                            self._local_sq = local if self._local_sq is None else self._local_sq + local
                        return allreduce_hook(None, bucket)

                    model.register_comm_hook(None, hook)
                    self.noise_method = "ddp_ranks"
            elif self.accumulate > 1:
                self.noise_method = "micro_batches"
            else:
                self.noise_method = "consecutive_steps"

        def _measuring(self) -> bool:
            return self._opt_steps >= 1 and self._opt_steps % self.noise_every == 0

        @staticmethod
        def _grads(pl_module) -> list:
            return [p.grad.detach() for p in pl_module.parameters() if p.grad is not None]

        @staticmethod
        def _sq(tensors) -> Any:
            if not tensors:
                return torch.zeros(())
            return torch.stack([n.float() for n in torch._foreach_norm([t.float() for t in tensors])]).pow(2).sum()

        @staticmethod
        def _amp_scale(trainer) -> float:
            scaler = getattr(trainer.precision_plugin, "scaler", None)
            return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0

        def on_after_backward(self, trainer, pl_module) -> None:
            if self.noise_method != "micro_batches" or not self._measuring():
                return
            current = self._grads(pl_module)  # the sum over micro-batches so far, each scaled by 1/accumulate
            factor = self.accumulate / self._amp_scale(trainer)
            micro = current if self._micro_prev is None else torch._foreach_sub(current, self._micro_prev)
            self._micro_sq.append(self._sq(micro) * factor**2)
            self._micro_prev = [g.clone() for g in current]

        def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
            try:
                if self.noise_method is None:
                    return
                measuring = self._measuring()
                per_rank = self.batch_size * self.accumulate
                if self.noise_method == "consecutive_steps":
                    if self._pair is None and not measuring:
                        return  # most steps: nothing to read (the finally block still counts the step)
                    grads = self._grads(pl_module)
                    if self._pair is not None:  # the second step of a pair: two batches against their mean
                        sq_small = (self._pair_sq + self._sq(grads)) / 2
                        sq_big = self._sq(torch._foreach_add(self._pair, grads)) / 4
                        self._noise.append(noise_terms(sq_small, self.batch_size, sq_big, 2 * self.batch_size))
                        self._pair = None
                    elif measuring:
                        self._pair = [g.clone() for g in grads]
                        self._pair_sq = self._sq(self._pair)
                elif measuring and self.noise_method == "micro_batches" and len(self._micro_sq) == self.accumulate:
                    sq_small = torch.stack(self._micro_sq).mean()
                    self._noise.append(noise_terms(sq_small, self.batch_size, self._sq(self._grads(pl_module)), per_rank))
                elif measuring and self.noise_method == "ddp_ranks" and self._local_sq is not None:
                    sq_small = self._local_sq / self._amp_scale(trainer) ** 2
                    self._noise.append(noise_terms(sq_small, per_rank, self._sq(self._grads(pl_module)), per_rank * self.world_size))
            finally:
                self._micro_sq, self._micro_prev, self._local_sq = [], None, None
                self._opt_steps += 1

        def noise_report(self) -> dict[str, Any] | None:
            """Step-averaged ``grad_sq`` and ``trace`` (finite measurements only), or ``None``."""
            pairs = [(float(g), float(t)) for g, t in self._noise]
            pairs = [(g, t) for g, t in pairs if math.isfinite(g) and math.isfinite(t)]
            if not pairs:
                return None
            grad_sq, trace = mean_terms(pairs)
            return {"grad_sq": grad_sq, "trace": trace, "measurements": len(pairs), "method": self.noise_method}

        def on_train_end(self, trainer, pl_module) -> None:
            if self._window_end is None:  # stopped before the planned last batch
                self._sync()
                self._window_end = time.perf_counter()
                self.train_end_time = time.time()
            self._check_finite()
            self.warmup = steady_state_start(self.intervals, self.accumulate)
            # on CUDA the window starts at a synchronised step: the first one at or after the cut
            while self.warmup > 0 and self.warmup < len(self.synced) and not self.synced[self.warmup - 1]:
                self.warmup += 1
            if self.warmup >= len(self.intervals):
                self.warmup = 0
            self._window_start = self.ends[self.warmup - 1] if self.warmup > 0 else self._train_start
            if self._window_start is not None:
                self.window_seconds = self._window_end - self._window_start

        def on_fit_end(self, trainer, pl_module) -> None:
            record = self.record()
            report = {**self.static, "rank": trainer.global_rank, "ok": True, **summarize(record)}
            report["lr_ran"] = record["lr_ran"]
            report["first_batch_time"] = self.first_batch_time
            report["train_end_time"] = self.train_end_time
            report["first_batch_size"] = record["sizes"][0] if record["sizes"] else None
            report["noise"] = self.noise_report()
            report.update(self._flops_report(trainer))
            report["metrics"] = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
            if self.cuda:
                report["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
                report["peak_memory_kind"] = "cuda_max_allocated"
            else:
                report["peak_memory_gib"] = peak_rss_gib()
                report["peak_memory_kind"] = "cpu_rss"
            write_rank_report(self.out_dir, trainer.global_rank, report)

        def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
            self._stop_flop_count()
            kind, message = classify_exception(exception)
            report = {**self.static, "rank": trainer.global_rank, "ok": False, "error": {"kind": kind, "message": message}}
            write_rank_report(self.out_dir, trainer.global_rank, report)

        def record(self) -> dict[str, Any]:
            """Raw record for :func:`summarize`."""
            losses = [float(l) if isinstance(l, torch.Tensor) else None for l in self._losses]
            return {
                "intervals": self.intervals,
                "waits": self.waits,
                "sizes": self.sizes,
                "losses": losses,
                "warmup": self.warmup,
                "window_seconds": self.window_seconds,
                "world_size": self.world_size,
                "lr_ran": self.lr_ran,
            }

    return MeasureCallback


def __getattr__(name: str):
    if name == "MeasureCallback":
        return measure_callback_class()
    raise AttributeError(name)
