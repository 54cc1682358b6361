"""The gradient noise probe: measures one rank's gradient noise while the trial trains.

The estimators are McCandlish et al. 2018's small batch against large batch (the formulas are in
:mod:`autotune.noise`). The small and the large gradient come from what the step already computes,
so measuring costs a few norms on about 16 optimizer steps spread over the run:

- ``ddp_ranks`` (more than one rank): this rank's local gradient, read in a DDP communication hook
  before the all-reduce, against the all-reduced one;
- ``micro_batches`` (``accumulate_grad_batches > 1``): each micro-batch's gradient, the difference of
  the accumulated gradient after consecutive backward passes, against the accumulated one;
- ``consecutive_steps`` (otherwise): two consecutive optimizer steps' gradients against their mean
  (which assumes the true gradient barely moves in one step).

Manual optimization measures nothing (no hook sees the combined gradient). A step without
gradients (a ``training_step`` that returned ``None``: Lightning skips its backward pass) is not
measured: the measurement moves to the next step that has them, and a run none of whose steps had
any reports no noise (``None``). Gradients scaled by a 16-bit AMP ``GradScaler`` are unscaled
first. torch is imported lazily, when training starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.noise import mean_terms, noise_terms

if TYPE_CHECKING:
    from autotune.rank_report import NoiseReport

__all__ = ["MEASUREMENTS_PER_RUN", "GradientNoiseProbe"]

#: Optimizer steps measured per run, about (spread evenly).
MEASUREMENTS_PER_RUN = 16


class GradientNoiseProbe:
    """One rank's gradient noise estimates (see the module docstring).

    Call :meth:`attach` when training starts, :meth:`after_backward` and
    :meth:`before_optimizer_step` from the Lightning hooks of the same names, and :meth:`report` at
    the end.

    Args:
        batch_size: Samples per micro-batch on this rank (> 0).
        accumulate_grad_batches: Micro-batches per optimizer step (>= 1).
        total_batches: Training batches the trial runs (>= 0), to spread the measurements.

    Attributes:
        method: ``"ddp_ranks"``, ``"micro_batches"``, ``"consecutive_steps"``, or ``None`` (not measuring).
        every: Optimizer steps between two measurements (>= 1).
    """

    def __init__(self, batch_size: int, accumulate_grad_batches: int, total_batches: int):
        self.batch_size = batch_size
        self.accumulate = accumulate_grad_batches
        self.every = max(1, total_batches // max(1, accumulate_grad_batches) // MEASUREMENTS_PER_RUN)
        self.method: str | None = None
        self.world_size = 1
        self._steps = 0  # optimizer steps so far
        self._terms: list[tuple[Any, Any]] = []  # (grad_sq, trace) per measurement, 0-d tensors
        self._pair: _Grads | None = None  # consecutive_steps: the first step's gradients
        self._pair_sq: Any = None
        self._deferred = False  # consecutive_steps: a measured step had no gradients; measure the next
        self._micro_sq: list[Any] = []  # micro_batches: each micro-batch's squared norm
        self._micro_prev: _Grads | None = None
        self._local_sq: Any = None  # ddp_ranks: this rank's squared norm before the all-reduce

    def attach(self, trainer: Any, world_size: int) -> None:
        """Choose the method for this run; for ``ddp_ranks``, register the DDP communication hook."""
        import torch

        self.world_size = world_size
        if getattr(trainer.lightning_module, "automatic_optimization", True) is False:
            return  # manual optimization: no hook sees the combined gradient
        if world_size > 1:
            model = trainer.strategy.model
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                model.register_comm_hook(None, self._comm_hook)
                self.method = "ddp_ranks"
        elif self.accumulate > 1:
            self.method = "micro_batches"
        else:
            self.method = "consecutive_steps"

    def _comm_hook(self, state, bucket):  # no annotations: DDP rejects any but its own
        """DDP communication hook: adds this rank's own gradient before the all-reduce averages it."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
            allreduce_hook,
        )

        if self.measuring():
            local = bucket.buffer().float().pow(2).sum()
            self._local_sq = local if self._local_sq is None else self._local_sq + local
        return allreduce_hook(None, bucket)

    def measuring(self) -> bool:
        """Whether the current optimizer step is measured."""
        return self._steps >= 1 and self._steps % self.every == 0

    def after_backward(self, trainer: Any, pl_module: Any) -> None:
        """``micro_batches``: keep the squared norm of the micro-batch just back-propagated."""
        import torch

        if self.method != "micro_batches" or not self.measuring():
            return
        current = _grads(pl_module)  # the sum over micro-batches so far, each scaled by 1/accumulate
        factor = self.accumulate / _amp_scale(trainer)
        if self._micro_prev is not None and self._micro_prev.params != current.params:
            # a parameter got its first gradient in this micro-batch: its own gradient is not the difference
            self._micro_sq.append(torch.tensor(math.nan))  # (report() drops the measurement)
        else:
            micro = current.tensors if self._micro_prev is None else torch._foreach_sub(current.tensors, self._micro_prev.tensors)
            self._micro_sq.append(_sq(micro) * factor**2)
        self._micro_prev = current.clone()

    def before_optimizer_step(self, trainer: Any, pl_module: Any) -> None:
        """Add a measurement when this step completes one, then count the step."""
        try:
            if self.method == "consecutive_steps":
                self._consecutive_steps(pl_module)
            elif self.method == "micro_batches" and self.measuring() and len(self._micro_sq) == self.accumulate:
                self._micro_batches(pl_module)
            elif self.method == "ddp_ranks" and self.measuring() and self._local_sq is not None:
                self._ddp_ranks(trainer, pl_module)
        finally:
            self._micro_sq, self._micro_prev, self._local_sq = [], None, None
            self._steps += 1

    def _consecutive_steps(self, pl_module: Any) -> None:
        import torch

        if self._pair is None and not (self.measuring() or self._deferred):
            return  # most steps: nothing to read
        grads = _grads(pl_module)
        if not grads.tensors:  # no backward pass (training_step returned None): measure the next step
            self._deferred = self._pair is None
            return
        self._deferred = False
        if self._pair is not None and self._pair.params == grads.params:  # the second step of a pair: two batches against their mean
            sq_small = (self._pair_sq + _sq(grads.tensors)) / 2
            sq_big = _sq(torch._foreach_add(self._pair.tensors, grads.tensors)) / 4
            self._terms.append(noise_terms(sq_small, self.batch_size, sq_big, 2 * self.batch_size))
            self._pair = None
        else:  # the first step of a pair (or other parameters had gradients than in the first: start again)
            self._pair = grads.clone()
            self._pair_sq = _sq(self._pair.tensors)

    def _micro_batches(self, pl_module: Any) -> None:
        import torch

        sq_small: Any = torch.stack(self._micro_sq).mean()  # a 0-d tensor, like the other estimators' terms
        self._terms.append(noise_terms(sq_small, self.batch_size, _sq(_grads(pl_module).tensors), self.batch_size * self.accumulate))

    def _ddp_ranks(self, trainer: Any, pl_module: Any) -> None:
        per_rank = self.batch_size * self.accumulate
        sq_small = self._local_sq / _amp_scale(trainer) ** 2
        self._terms.append(noise_terms(sq_small, per_rank, _sq(_grads(pl_module).tensors), per_rank * self.world_size))

    def report(self) -> NoiseReport | None:
        """Step-averaged ``grad_sq`` and ``trace`` of the finite measurements, or ``None`` when there are none."""
        pairs = [(float(g), float(t)) for g, t in self._terms]
        pairs = [(g, t) for g, t in pairs if math.isfinite(g) and math.isfinite(t)]
        if not pairs:
            return None
        grad_sq, trace = mean_terms(pairs)
        return {"grad_sq": grad_sq, "trace": trace, "measurements": len(pairs), "method": self.method or ""}


@dataclass(frozen=True)
class _Grads:
    """The gradients of a step: ``params`` are the indices (in ``parameters()``) of the parameters
    that have one, ``tensors`` their gradients (empty after a step with no backward pass)."""

    params: tuple[int, ...]
    tensors: list[Any]

    def clone(self) -> _Grads:
        return _Grads(self.params, [g.clone() for g in self.tensors])


def _grads(pl_module: Any) -> _Grads:
    found = [(i, p.grad.detach()) for i, p in enumerate(pl_module.parameters()) if p.grad is not None]
    return _Grads(tuple(i for i, _ in found), [g for _, g in found])


def _sq(tensors: Sequence[Any]) -> Any:
    """Squared L2 norm of a list of tensors, a 0-d float tensor."""
    import torch

    if not tensors:
        return torch.zeros(())
    return torch.stack([n.float() for n in torch._foreach_norm([t.float() for t in tensors])]).pow(2).sum()


def _amp_scale(trainer: Any) -> float:
    """The loss scale of a 16-bit AMP ``GradScaler`` (1 without one)."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
