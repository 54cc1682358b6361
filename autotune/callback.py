"""The measurement callback: what each rank of a trial records while Lightning trains it.

:class:`MeasureCallback` runs in each rank of a trial and composes one collaborator per concern:

- :class:`autotune.step_timer.StepTimer`: per-batch data wait, step interval and size, the device
  synchronisations and the steady-state window (warm-up cut by :func:`autotune.measure.steady_state_start`);
- :class:`LossLog`: per-batch training loss, unscaled by ``accumulate_grad_batches``, and the
  non-finite loss check (every ``check_every`` batches and at the end);
- :class:`autotune.noise_probe.GradientNoiseProbe`: the gradient noise estimates (:mod:`autotune.noise`);
- :class:`autotune.flop_probe.FlopProbe`: FLOPs of the first batch, for MFU (:mod:`autotune.flops`);
- :class:`autotune.progress.ProgressWriter`: rank 0's live preview, read by the parent;
- :class:`autotune.host_load.HostLoadProbe`: how busy the host was over the measured window (other
  processes' CPU time, steal, load average, other processes on the GPU).

It also checks, when training starts, that the train DataLoader has the trial's ``num_workers`` and,
on the first batch, that the batch has the trial's ``batch_size`` (:class:`autotune.measure.TrialFault`
otherwise). When ``fit`` ends (after the final validation) or raises, each rank writes its own report,
``out_dir/rank<R>.json`` (:class:`autotune.rank_report.RankReport`), so the reports are the same
whichever launcher started the ranks (Lightning's subprocess re-execution, or forked ranks).

``MeasureCallback`` must subclass the ``Callback`` of the Lightning package the model uses
(``lightning.pytorch`` or ``pytorch_lightning``, whose Trainer accepts only its own callbacks), so it
is built by :func:`measure_callback_class`; ``autotune.callback.MeasureCallback`` is the
``lightning.pytorch`` one. Importing this module loads neither torch nor Lightning.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.flop_probe import FlopProbe
from autotune.host_load import HostLoadProbe
from autotune.measure import TrialFault, batch_length, classify_exception, forked_rank_index, summarize
from autotune.noise_probe import GradientNoiseProbe
from autotune.progress import Progress, ProgressWriter
from autotune.rank_report import write_rank_report
from autotune.step_timer import StepTimer
from autotune.worker_shards import DuplicateWorkers

if TYPE_CHECKING:
    from autotune.rank_report import RankReport

__all__ = ["LossLog", "applied_knobs", "check_batch_size", "check_num_workers", "measure_callback_class", "peak_rss_gib"]


#: Metric name prefixes never read as a per-batch training loss (:class:`LossLog`).
_NOT_PER_BATCH = ("val", "valid", "test", "predict")


class LossLog:
    """One rank's training loss per batch, kept on the device until read, and the non-finite check.

    Args:
        accumulate_grad_batches: Batches per optimizer step (>= 1); Lightning's returned loss is
            divided by it, so it is multiplied back.
        check_every: Batches between two non-finite checks (>= 1; each check syncs the device once).
    """

    def __init__(self, accumulate_grad_batches: int, check_every: int = 16, logged_name: str | None = None):
        self.accumulate = accumulate_grad_batches
        self.check_every = check_every
        # a training metric's name (the study's --monitor) read from the logged metrics when
        # training_step returns no loss; a validation or test metric is never read per batch
        self.logged_name = logged_name if logged_name and not logged_name.startswith(_NOT_PER_BATCH) else None
        self._last_logged: Any = None  # the logged tensor last kept (a stale one is not kept again)
        self._losses: list[Any] = []  # floats once checked, 0-d float tensors before, None for a batch that returned no loss
        self._checked = 0  # batches whose losses check_finite has read (and turned into floats)

    def add(self, outputs: Any, logged: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Keep the loss of a batch from what ``training_step`` returned (a tensor, or a dict with ``loss``).

        When it returned none (manual optimization often logs its losses and returns nothing), the
        value of ``logged_name`` in ``logged`` (the trainer's ``callback_metrics``: as
        ``logged_name`` or ``logged_name + "_step"``) is kept instead, when it is a new tensor since
        the last batch. Lightning recomputes ``callback_metrics`` from its logged results when read,
        so in ``on_train_batch_end`` that value is the one this batch logged; a metric logged only
        per epoch gives no per-batch value (the batch keeps ``None``). ``logged`` may be a function
        that returns them: it is called only then (reading ``callback_metrics`` costs a pass over the
        logged results, kept off the per-batch path of a ``training_step`` that returns its loss).
        """
        import torch

        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach().float() * self.accumulate)
            return
        value = None
        if self.logged_name is not None and logged is not None:
            metrics = logged() if callable(logged) else logged
            value = metrics.get(f"{self.logged_name}_step", metrics.get(self.logged_name))
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value is not self._last_logged:
            self._last_logged = value
            self._losses.append(value.detach().float().reshape(()))
        else:
            self._losses.append(None)

    def check_due(self, batches: int) -> bool:
        """Whether to run :meth:`check_finite` after ``batches`` batches."""
        return batches % self.check_every == 0

    def check_finite(self, sizes: list[int], world_size: int) -> None:
        """Raise on the first non-finite loss so far.

        Args:
            sizes: Samples per batch on this rank (for the message).
            world_size: Ranks of the trial (for the message).

        Raises:
            TrialFault: ``nonfinite_loss``, naming the batch and the samples seen by then.
        """
        import torch

        start, self._checked = self._checked, len(self._losses)
        pending = [(i, loss) for i, loss in enumerate(self._losses[start:], start) if isinstance(loss, torch.Tensor)]
        if not pending:
            return
        # only the batches since the last check, read once and kept as floats: every check reading the whole
        # run was quadratic in its batches, and its seconds were charged to the config's steps (a small batch's most)
        floats = torch.stack([loss for _, loss in pending]).tolist()
        for (i, _), value in zip(pending, floats):
            self._losses[i] = value
        bad = next(((i, v) for (i, _), v in zip(pending, floats) if not math.isfinite(v)), None)
        if bad is not None:
            first, value = bad
            seen = sum(sizes[: first + 1]) * world_size
            raise TrialFault("nonfinite_loss", f"non-finite loss ({value}) at batch {first} after {seen} samples")

    def recent(self, batches: int = 8) -> float | None:
        """Mean loss of the last ``batches`` batches that returned one, or ``None`` (syncs the device)."""
        recent = [float(loss) for loss in self._losses[-batches:] if loss is not None]
        return statistics.fmean(recent) if recent else None

    def tail(self, n: int) -> list[float | None]:
        """The last ``n`` batches' losses as floats (``None`` for a batch that returned none; one device sync)."""
        import torch

        last = self._losses[-n:] if n > 0 else []
        kept = [loss for loss in last if isinstance(loss, torch.Tensor)]
        floats = iter(torch.stack(kept).tolist() if kept else [])
        return [next(floats) if isinstance(loss, torch.Tensor) else loss for loss in last]

    def values(self) -> list[float | None]:
        """Every batch's loss as a float (``None`` for a batch that returned no loss)."""
        return [float(loss) if loss is not None else None for loss in self._losses]


def window_loss(losses: Callable[[int], list[float | None]], sizes: list[int], window: float) -> float | None:
    """The mean training loss over the last ``window`` samples, as
    :func:`autotune.objective.smooth_curve` gives the curve's last point (one rank's samples).

    Args:
        losses: ``n -> the last n batches' losses`` (:meth:`LossLog.tail`; ``None`` or non-finite ones are skipped).
        sizes: Samples of every batch so far.
        window: Width in samples (> 0).

    Returns:
        The mean, or ``None`` before ``window`` samples or without a loss in the window.
    """
    n, after = 0, 0  # the batches whose point (samples seen after them) is in (seen - window, seen]
    for size in reversed(sizes):  # from the end only: summing every batch at each check was quadratic in the run
        if after >= window:
            break
        after += size
        n += 1
    if after < window:  # fewer than ``window`` samples so far
        return None
    kept = [v for v in losses(n) if v is not None and math.isfinite(v)]
    return statistics.fmean(kept) if kept else None


def check_num_workers(loader: Any, num_workers: int | None) -> None:
    """Check that the train DataLoader has the trial's ``num_workers`` (``None``: not searched).

    Raises:
        TrialFault: ``num_workers_not_applied``.
    """
    workers = getattr(loader, "num_workers", None)
    if num_workers is not None and workers is not None and workers != num_workers:
        raise TrialFault(
            "num_workers_not_applied", f"num_workers not applied: the train DataLoader has {workers}, the trial asked for {num_workers}"
        )


def check_batch_size(samples: int | None, batch_size: int, loader: Any) -> None:
    """Check that the first training batch, of ``samples`` samples (``None``: unknown), has ``batch_size``.

    A first batch smaller than ``batch_size`` from a DataLoader built with that batch size (or holding
    that many samples) means the data ran out: an epoch has ``samples`` samples on this rank (an
    ``IterableDataset`` whose length inspection could not know). The fault then carries
    ``epoch_samples``, and the study stops sampling batches above it.

    Args:
        samples: Samples in the first batch (:func:`autotune.measure.batch_length`).
        batch_size: The trial's per-device batch size.
        loader: The train DataLoader (its ``batch_size`` and dataset length tell an epoch smaller than the batch).

    Raises:
        TrialFault: ``batch_size_not_applied`` (with ``epoch_samples`` when the data ran out).
    """
    if samples is None or samples == batch_size:
        return
    try:
        small = samples < batch_size and samples == len(loader.dataset)
    except (AttributeError, TypeError):  # iterable datasets have no length
        small = False
    if samples < batch_size and (small or getattr(loader, "batch_size", None) == batch_size):
        raise TrialFault(
            "batch_size_not_applied",
            f"batch_size not applied: the first training batch had {samples} samples, the trial asked for {batch_size}: "
            f"the training data ran out (an epoch has {samples} samples per device)",
            epoch_samples=samples,
        )
    raise TrialFault(
        "batch_size_not_applied",
        f"batch_size not applied: the first training batch had {samples} samples, the trial asked for {batch_size}",
    )


def applied_knobs(loader: Any, module: Any) -> dict[str, Any]:
    """What a rank really trains with, read from the objects (for the extended space's knobs).

    Args:
        loader: The train DataLoader, or ``None``.
        module: The LightningModule.

    Returns:
        The DataLoader's ``pin_memory``, ``prefetch_factor`` and ``persistent_workers``, the float32 matmul precision,
        whether the module is compiled (Lightning's ``_compiler_ctx``) and in channels-last format (its
        first 4-D parameter whose two layouts differ), its parameter count (changed by searched
        constructor arguments), and torch's intra-op threads with the cores the rank may run on (a
        busy host's run leaves cores out: :mod:`autotune.jobs`).
    """
    import torch

    from autotune.hardware import available_cpu_count

    # a 4-D weight whose channels-last and contiguous layouts differ (1 input channel or a 1x1 kernel are both)
    weights = [p for p in module.parameters() if p.dim() == 4 and p.size(1) > 1 and p.size(2) * p.size(3) > 1]
    return {
        "pin_memory": getattr(loader, "pin_memory", None),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "persistent_workers": getattr(loader, "persistent_workers", None),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "compiled": getattr(module, "_compiler_ctx", None) is not None,
        "channels_last": bool(weights) and weights[0].is_contiguous(memory_format=torch.channels_last) and not weights[0].is_contiguous(),
        "parameters": sum(p.numel() for p in module.parameters()),
        "torch_threads": torch.get_num_threads(),
        "cpu_cores": available_cpu_count(),
    }


def peak_rss_gib() -> float:
    """Peak resident memory of this process plus its largest finished child, GiB (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 2**20


def _peak_memory(cuda: bool) -> tuple[float, str]:
    """``(peak_memory_gib, peak_memory_kind)`` of this rank (see :class:`autotune.rank_report.RankReport`)."""
    if cuda:
        import torch

        return torch.cuda.max_memory_allocated() / 2**30, "cuda_max_allocated"
    return peak_rss_gib(), "cpu_rss"


class _MeasureHooks:
    """Records the timing, sizes, losses, gradient noise and FLOPs of one rank (see the module docstring).

    Args:
        batch_size: The trial's per-device batch size; the first batch must have it.
        num_workers: The trial's DataLoader workers, checked on the train DataLoader, or ``None``.
        total_batches: Training batches the trial will run; training stops after them.
        accumulate_grad_batches: Batches per optimizer step (losses are unscaled by it).
        out_dir: Folder of the rank reports.
        static: Entries copied into every report (the config the rank saw, ...).
        check_every: Batches between non-finite loss checks (each check syncs the device once).
        check_batch: Whether the first batch must have ``batch_size`` (``False`` when the batch size
            is not searched: the training loader's own, which may vary from batch to batch).
        logged_loss: The metric whose logged per-batch values make the loss curve when
            ``training_step`` returns no loss (the study's ``--monitor``; see :class:`LossLog`).
        stop_at_loss: ``(target loss, smoothing window in samples)``: stop training once the
            training loss averaged over the window (:func:`window_loss`, checked every
            ``check_every`` batches from a quarter of ``total_batches`` on) is at or below the
            target, as MLPerf's time-to-train stops at its quality target (a paired run judged on
            its seconds to the study's loss target: :mod:`autotune.study.racing`); one rank only.
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
        check_batch: bool = True,
        logged_loss: str | None = None,
        stop_at_loss: tuple[float, float] | None = None,
    ):
        self.batch_size = batch_size
        self.stop_at_loss = stop_at_loss
        self.stopped_at_target = False
        self.stopped_early = False  # training ended before its planned batches, not at the loss target
        self.check_batch = check_batch
        self.num_workers = num_workers
        self.total_batches = total_batches
        self.out_dir = out_dir
        self.static: dict[str, Any] = dict(static or {})
        self.shards = DuplicateWorkers()
        self.precision = str(self.static.get("config", {}).get("precision", "32-true"))
        self.timer = StepTimer(total_batches, accumulate_grad_batches)
        self.losses = LossLog(accumulate_grad_batches, check_every, logged_loss)
        self.noise = GradientNoiseProbe(batch_size, accumulate_grad_batches, total_batches)
        self.flops = FlopProbe()
        self.progress = ProgressWriter.from_env()  # written by rank 0 only
        self.host = HostLoadProbe()
        self.world_size = 1
        self.cuda = False
        self.lr_ran: float | None = None
        self.optimizer_ran: str | None = None

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def on_train_start(self, trainer, pl_module) -> None:
        self.world_size = trainer.world_size
        loop = trainer.fit_loop.epoch_loop
        if not pl_module.automatic_optimization and len(trainer.optimizers) > 1 and loop.max_steps > 0:
            # under manual optimization Lightning's global_step counts every optimizer.step(): a GAN's two
            # optimizers reached max_steps at half the budget's batches; the budget's last batch stops it here
            loop.max_steps *= len(trainer.optimizers)
        self.cuda = trainer.strategy.root_device.type == "cuda"
        loader = trainer.train_dataloader
        check_num_workers(loader, self.num_workers)
        if trainer.optimizers:
            self.lr_ran = float(trainer.optimizers[0].param_groups[0]["lr"])
            kind = type(trainer.optimizers[0])
            self.optimizer_ran = f"{kind.__module__}.{kind.__qualname__}"
        self.static["applied"] = applied_knobs(loader, pl_module)
        self.noise.attach(trainer, self.world_size)
        self.host.start()  # before the clock starts: its reads of /proc are not the trial's time
        self._sync()
        self.timer.start(time.perf_counter())

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        now = time.perf_counter()
        samples = batch_length(batch)
        first = not self.timer.sizes
        if first and self.check_batch:
            check_batch_size(samples, self.batch_size, trainer.train_dataloader)
        self.shards.check(batch, trainer.train_dataloader)  # an IterableDataset's workers: their own shares?
        self.timer.batch_start(now, samples)
        if first and not self.static.get("config", {}).get("compile"):
            # not under torch.compile: the FLOP counter's dispatch mode changed what Dynamo traced, so a compiled
            # trial trained where the user's own compiled run raised (helper-37: self.log_dict in training_step)
            self.flops.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.timer.intervals:
            self.flops.stop()
        synced = self.timer.sync_due()
        if synced:
            self._sync()
        now = time.perf_counter()
        if self.timer.batch_end(now, synced or not self.cuda):
            trainer.should_stop = True  # the sample budget is spent; the final validation follows
            self._stop_host(trainer)
        self.losses.add(outputs, lambda: trainer.callback_metrics)
        batches = len(self.timer.intervals)
        if self.losses.check_due(batches):
            self.losses.check_finite(self.timer.sizes, self.world_size)
            if self._target_reached(batches):
                self._sync()
                self.timer.end(time.perf_counter())
                self.stopped_at_target = trainer.should_stop = True  # the final validation follows
                self._stop_host(trainer)
        if self.progress.due(now, last=batches == self.total_batches) and trainer.global_rank == 0:
            self.progress.write(now, self._preview(batches, now))

    def _target_reached(self, batches: int) -> bool:
        """Whether to stop at the loss target now (``stop_at_loss``; one rank, from a quarter of the run on)."""
        if self.stop_at_loss is None or self.timer.ended or self.world_size != 1 or 4 * batches < self.total_batches:
            return False
        target, window = self.stop_at_loss
        loss = window_loss(self.losses.tail, self.timer.sizes, window)
        return loss is not None and loss <= target

    def _preview(self, batches: int, now: float) -> Progress:
        """The live preview (no device synchronisation: the trial's figures come from the rank report)."""
        return {
            "batches": batches,
            "planned": self.total_batches,
            "samples": sum(self.timer.sizes) * self.world_size,
            "samples_per_sec": self.timer.steady_rate(batches, now, self.world_size),
            "loss": self.losses.recent(),  # the recent training loss (for pruning)
        }

    def on_after_backward(self, trainer, pl_module) -> None:
        self.noise.after_backward(trainer, pl_module)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.noise.before_optimizer_step(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if not self.timer.ended:  # stopped before the planned last batch (not at the target: that ends the timer)
            self.stopped_early = True
            self._sync()
            self.timer.end(time.perf_counter())
            self._stop_host(trainer)
        self.losses.check_finite(self.timer.sizes, self.world_size)
        self.timer.cut_warmup()

    def _stop_host(self, trainer) -> None:
        """End the host's load sampling (the window ended, or the rank failed)."""
        if not self.host.started:  # failed before training: no window (and perhaps no device yet)
            return
        device = trainer.strategy.root_device
        self.host.stop(device.index if device.type == "cuda" else None)

    def on_fit_end(self, trainer, pl_module) -> None:
        write_rank_report(self.out_dir, trainer.global_rank, self.report(trainer))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.flops.stop()
        kind, message = classify_exception(exception)
        rank = trainer.global_rank
        forked = forked_rank_index(exception)
        if forked is not None:  # in the launching process: a forked rank failed, and reported nothing itself
            rank = trainer.node_rank * trainer.num_devices + forked
        # the time tells the rank that failed first from the ranks that failed because of it (see autotune.runner.classify)
        error = {"kind": kind, "message": message, "time": time.time(), **getattr(exception, "details", {})}
        self._stop_host(trainer)  # a failed trial's host load is kept too (from the start of training to its failure)
        host = {"host": self.host.report()} if self.host.report() else {}
        write_rank_report(self.out_dir, rank, {**self.static, "rank": rank, "ok": False, "error": error, **host})

    def report(self, trainer) -> RankReport:
        """This rank's report once ``fit`` ended (see :class:`autotune.rank_report.RankReport`)."""
        record = self.record()
        first_batch_size = record["sizes"][0] if record["sizes"] else None
        report: RankReport = {**self.static, "rank": trainer.global_rank, "ok": True, **summarize(record)}  # type: ignore[typeddict-item]
        report["lr_ran"] = record["lr_ran"]
        report["optimizer_ran"] = self.optimizer_ran
        report["stopped_at_target"] = self.stopped_at_target
        report["stopped_early"] = self.stopped_early
        report["planned_batches"] = self.total_batches
        report["first_batch_time"] = self.timer.first_batch_time
        report["train_end_time"] = self.timer.train_end_time
        report["first_batch_size"] = first_batch_size
        report["noise"] = self.noise.report()
        report.update(self.flops.report(trainer, first_batch_size, self.precision))
        report["metrics"] = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
        report["peak_memory_gib"], report["peak_memory_kind"] = _peak_memory(self.cuda)
        report["host"] = self.host.report()
        return report

    def record(self) -> dict[str, Any]:
        """Raw record for :func:`autotune.measure.summarize`."""
        return {
            "intervals": self.timer.intervals,
            "waits": self.timer.waits,
            "sizes": self.timer.sizes,
            "losses": self.losses.values(),
            "warmup": self.timer.warmup,
            "window_seconds": self.timer.window_seconds,
            "world_size": self.world_size,
            "lr_ran": self.lr_ran,
        }


_CALLBACK_CLASSES: dict[str, type] = {}


def measure_callback_class(pl: Any = None) -> type:
    """The ``MeasureCallback`` class for a Lightning package, built once per package.

    Args:
        pl: ``lightning.pytorch`` (the default) or ``pytorch_lightning``, the package whose
            ``Callback`` it subclasses.

    Returns:
        A subclass of ``pl.Callback`` taking the arguments of the module's callback (see the
        module docstring).
    """
    if pl is None:
        import lightning.pytorch as pl
    if pl.__name__ not in _CALLBACK_CLASSES:
        namespace = {"__module__": __name__, "__qualname__": "MeasureCallback", "__doc__": _MeasureHooks.__doc__}
        _CALLBACK_CLASSES[pl.__name__] = type("MeasureCallback", (_MeasureHooks, pl.Callback), namespace)
    return _CALLBACK_CLASSES[pl.__name__]


def __getattr__(name: str) -> Any:
    if name == "MeasureCallback":
        return measure_callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
