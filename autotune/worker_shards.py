"""Does each DataLoader worker read its own share of an ``IterableDataset``, or all of it?

A map-style dataset is split among the DataLoader's worker processes by its sampler. An
``IterableDataset`` is not: each worker runs the dataset's ``__iter__`` in full unless the dataset
shards itself with ``torch.utils.data.get_worker_info()`` (PyTorch's ``IterableDataset`` docs). One
that does not trains every sample once per worker, and its samples/s count the copies (helper-36: a
stream of byte windows searched at ``num_workers=2`` read everything twice, without a word).

A DataLoader takes its batches from its workers in turn (batch ``i`` from worker ``i % num_workers``),
so with two or more workers the first two batches come from workers 0 and 1. Equal, they are the same
data: :class:`DuplicateWorkers` fails the trial with ``workers_duplicate_data``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DuplicateWorkers", "same_batch"]


def same_batch(a: Any, b: Any) -> bool:
    """Whether two batches hold equal values: tensors of equal shape and elements, sequences and mappings
    item by item, anything else by ``==`` (``False`` where that cannot tell)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b.to(a.device)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_batch(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_batch(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # an object whose == is elementwise or raises: cannot tell
        return False


def _detached(batch: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.detach().clone()
    if isinstance(batch, (list, tuple)):
        return [_detached(x) for x in batch]
    if isinstance(batch, dict):
        return {k: _detached(v) for k, v in batch.items()}
    return batch


class DuplicateWorkers:
    """Compare a trial's first two training batches when its loader runs an ``IterableDataset`` in two or
    more worker processes (call :meth:`check` at each batch's start; it stops looking after the second)."""

    def __init__(self) -> None:
        self.first: Any = None
        self.done = False

    def check(self, batch: Any, loader: Any) -> None:
        """Raises :class:`autotune.measure.TrialFault` (``workers_duplicate_data``) when the second batch equals the first."""
        if self.done:
            return
        from torch.utils.data import IterableDataset

        if not isinstance(getattr(loader, "dataset", None), IterableDataset) or int(getattr(loader, "num_workers", 0) or 0) < 2:
            self.done = True
            return
        if self.first is None:
            self.first = _detached(batch)
            return
        self.done, first, self.first = True, self.first, None
        if same_batch(first, batch):
            from autotune.measure import TrialFault

            raise TrialFault(
                "workers_duplicate_data",
                f"the training IterableDataset ({type(loader.dataset).__name__}) gave the same first batch in DataLoader workers 0 and 1 "
                f"(num_workers={loader.num_workers}): every worker reads all of it; shard it per worker with "
                "torch.utils.data.get_worker_info(), or search num_workers: {choices: [0]}",
            )
