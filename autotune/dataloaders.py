"""The training DataLoader: whether it can take a trial's ``batch_size`` and ``num_workers``, and
rebuilding it with them (and with ``pin_memory``/``prefetch_factor``).

A ``batch_size`` or ``num_workers`` that no constructor argument or attribute reaches (see
:mod:`autotune.knob_targets`) is applied to the DataLoader the user's ``train_dataloader`` returns:
the trial wraps that hook so it returns a copy rebuilt with the trial's values
(:func:`apply_loader_options`). Imports torch lazily; runs in trial processes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.knob_targets import KnobTarget

if TYPE_CHECKING:
    from autotune.config import TrialConfig

__all__ = [
    "DATALOADER_KNOBS",
    "apply_loader_options",
    "dataloader_batch_size",
    "dataloader_reach",
    "loader_targets",
    "rebuild_dataloader",
    "with_loader_options",
]

#: Knobs a rebuilt training DataLoader can take when no argument or attribute reaches them.
DATALOADER_KNOBS = ("batch_size", "num_workers")


def dataloader_reach(loader: Any) -> dict[str, str | None]:
    """Whether a training DataLoader can be rebuilt with another ``batch_size`` and ``num_workers``.

    A plain ``torch.utils.data.DataLoader`` can, keeping its dataset, sampler (or shuffling),
    ``drop_last``, collate function and batch sampler, except where that changes what it yields:
    a DataLoader with its own ``batch_sampler`` (of another type than ``BatchSampler``) fixes the
    batch size; one with ``batch_size=None`` and no batch sampler has a dataset that yields whole
    batches; an ``IterableDataset`` read in one process would be read in full by every worker.

    Args:
        loader: What ``train_dataloader()`` returned.

    Returns:
        ``{"batch_size": reason or None, "num_workers": reason or None}``: ``None`` where a rebuilt
        DataLoader takes the knob, else why not (a phrase: "the training DataLoader ...").
    """
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset

    if not isinstance(loader, DataLoader):
        why = f"train_dataloader() returns a {type(loader).__name__}, not a torch DataLoader"
        return {knob: why for knob in DATALOADER_KNOBS}
    if type(loader) is not DataLoader:  # a subclass: rebuilding it as a DataLoader would lose what it adds
        why = f"the training DataLoader is a {type(loader).__name__} (a DataLoader subclass), which autotune does not rebuild"
        return {knob: why for knob in DATALOADER_KNOBS}
    reach: dict[str, str | None] = {knob: None for knob in DATALOADER_KNOBS}
    dataset = type(loader.dataset).__name__
    if loader.batch_size is None and loader.batch_sampler is None:
        reach["batch_size"] = f"the training DataLoader has batch_size=None: its dataset ({dataset}) yields whole batches itself"
    elif loader.batch_size is None and type(loader.batch_sampler) is not BatchSampler:
        reach["batch_size"] = (
            f"the training DataLoader takes its batches from its own batch_sampler ({type(loader.batch_sampler).__name__}), "
            "which fixes the batch size"
        )
    if isinstance(loader.dataset, IterableDataset) and loader.num_workers == 0:
        reach["num_workers"] = (
            f"the training dataset ({dataset}) is an IterableDataset read in one process: every worker process would read all of it"
        )
    return reach


def dataloader_batch_size(loader: Any) -> int | None:
    """Samples per batch that a training loader yields: its ``batch_size``, its batch sampler's
    ``batch_size`` (else the length of the sampler's first batch), else the first batch's length
    (:func:`autotune.measure.batch_length`); ``None`` when none of them tells."""
    size = getattr(loader, "batch_size", None)
    if isinstance(size, int):
        return size
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None:
        size = getattr(batch_sampler, "batch_size", None)
        if isinstance(size, int):
            return size
        try:
            return len(next(iter(batch_sampler)))
        except Exception:  # a sampler without a length per batch, or an empty one
            return None
    from autotune.measure import batch_length

    try:
        return batch_length(next(iter(loader)))
    except Exception:  # an empty or broken loader: the caller says what it found
        return None


def rebuild_dataloader(
    loader: Any,
    *,
    batch_size: int | None = None,
    num_workers: int | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
) -> Any:
    """A copy of a ``torch.utils.data.DataLoader`` with some of its arguments replaced (``None``: kept).

    Every other argument is read back from the loader: dataset, shuffling (a ``RandomSampler`` of
    the loader's own making becomes ``shuffle=True`` again, so Lightning still sees a shuffled
    loader, e.g. to shuffle its ``DistributedSampler``) or the sampler itself, ``drop_last``,
    collate function, a ``BatchSampler`` (rebuilt with the new batch size) or another batch
    sampler (kept: then ``batch_size`` cannot be given), workers' settings. ``prefetch_factor``
    and ``persistent_workers`` apply only with worker processes (PyTorch refuses them otherwise).
    Anything that is not a DataLoader is returned as is.

    Args:
        loader: The DataLoader to copy.
        batch_size: Samples per batch (>= 1).
        num_workers: Worker processes (>= 0).
        pin_memory: Page-locked host memory for copies to a GPU.
        prefetch_factor: Batches loaded ahead per worker (>= 1).

    Raises:
        ValueError: ``batch_size`` or ``num_workers`` given for a loader that cannot take it
            (:func:`dataloader_reach` says why).
    """
    import torch
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset

    if not isinstance(loader, DataLoader):
        return loader
    reach = dataloader_reach(loader)
    for knob, value in (("batch_size", batch_size), ("num_workers", num_workers)):
        if value is not None and reach[knob] is not None:
            raise ValueError(f"cannot rebuild the training DataLoader with {knob}={value!r}: {reach[knob]}")
    workers = loader.num_workers if num_workers is None else num_workers
    iterable = isinstance(loader.dataset, IterableDataset)
    kwargs: dict[str, Any] = {
        "dataset": loader.dataset,
        "num_workers": workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory if pin_memory is None else pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers and workers > 0,
    }
    if hasattr(loader, "in_order"):  # torch >= 2.6
        kwargs["in_order"] = loader.in_order
    if workers > 0:
        kwargs["multiprocessing_context"] = loader.multiprocessing_context
        kwargs["prefetch_factor"] = prefetch_factor or loader.prefetch_factor  # None: PyTorch's default (2)
    if torch.cuda.is_available() and kwargs["pin_memory"]:
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if loader.batch_size is not None:  # the DataLoader batches the samples itself
        kwargs.update(batch_size=batch_size or loader.batch_size, drop_last=loader.drop_last)
        if not iterable:
            kwargs.update(_sampler_kwargs(loader))
    elif loader.batch_sampler is not None:
        old: Any = loader.batch_sampler
        if batch_size is not None and type(old) is BatchSampler:  # (another type: dataloader_reach refused above)
            kwargs["batch_sampler"] = BatchSampler(old.sampler, batch_size, old.drop_last)
        else:
            kwargs["batch_sampler"] = old
    else:  # no automatic batching: the dataset's items are the batches
        kwargs["batch_size"] = None
        if not iterable:
            kwargs.update(_sampler_kwargs(loader))
    return DataLoader(**kwargs)


def _sampler_kwargs(loader: Any) -> dict[str, Any]:
    """How to give a rebuilt DataLoader the loader's sampler: nothing for the sequential sampler it
    made itself, ``shuffle=True`` for the random one it made for ``shuffle=True``, else the sampler."""
    from torch.utils.data import RandomSampler, SequentialSampler

    sampler = loader.sampler
    own = getattr(sampler, "data_source", None) is loader.dataset
    if type(sampler) is SequentialSampler and own:
        return {}
    if (
        type(sampler) is RandomSampler
        and own
        and not sampler.replacement
        and sampler._num_samples is None
        and sampler.generator is loader.generator
    ):
        return {"shuffle": True}
    return {"sampler": sampler}


def loader_targets(knobs: Any, owner: str, loader: Any, problem: str | None = None) -> tuple[dict[str, KnobTarget], dict[str, str]]:
    """Where knobs that no argument or attribute reaches go: the training DataLoader, rebuilt.

    Args:
        knobs: Knob names of :data:`DATALOADER_KNOBS` that :func:`autotune.knob_targets.locate_knobs`
            did not place.
        owner: ``"data"`` or ``"model"``: the object whose ``train_dataloader`` returns ``loader``.
        loader: What that hook returned, or ``None`` when it could not be called.
        problem: Why there is no loader (``loader`` ``None``), a phrase such as
            ``"no training DataLoader found: ..."``.

    Returns:
        ``(targets, unreachable)``: knob to ``KnobTarget(knob, owner, "loader", knob)`` for the knobs
        a rebuilt loader takes, and knob to the reason for the others.
    """
    reach = dataloader_reach(loader) if loader is not None else dict.fromkeys(DATALOADER_KNOBS, problem or "no training DataLoader found")
    targets: dict[str, KnobTarget] = {}
    unreachable: dict[str, str] = {}
    for knob in knobs:
        reason = reach[knob]
        if reason is None:
            targets[knob] = KnobTarget(knob, owner, "loader", knob)
        else:
            unreachable[knob] = reason
    return targets, unreachable


def with_loader_options(loader: Any, pin_memory: bool | None, prefetch_factor: int | None) -> Any:
    """A copy of a ``torch.utils.data.DataLoader`` with ``pin_memory`` and ``prefetch_factor`` set
    (:func:`rebuild_dataloader`; anything that is not a DataLoader is returned as is)."""
    return rebuild_dataloader(loader, pin_memory=pin_memory, prefetch_factor=prefetch_factor)


def _rebuilt_loader(loader: Any, knobs: Mapping[str, int], config: TrialConfig) -> Any:
    """A loader rebuilt with the trial's loader knobs (``batch_size``/``num_workers`` that
    no argument reaches) and its ``pin_memory``/``prefetch_factor``.

    Raises:
        TrialFault: ``batch_size_not_applied`` or ``num_workers_not_applied``: the loader cannot take
            the knob (it did at the inspection), the reason in the message.
    """
    from autotune.measure import TrialFault

    reach = dataloader_reach(loader)
    for knob, value in knobs.items():
        if reach[knob] is not None:
            raise TrialFault(f"{knob}_not_applied", f"{knob} not applied: autotune could not set {knob}={value!r}: {reach[knob]}")
    return rebuild_dataloader(
        loader,
        batch_size=knobs.get("batch_size"),
        num_workers=knobs.get("num_workers"),
        pin_memory=config.pin_memory,
        prefetch_factor=config.prefetch_factor,
    )


def apply_loader_options(holder: Any, config: TrialConfig, train_knobs: Mapping[str, int] | None = None) -> None:
    """Make the user's ``train_dataloader``/``val_dataloader`` return loaders with the config's
    ``pin_memory``/``prefetch_factor`` (only the hooks the user wrote), the training one also with
    ``train_knobs`` (the ``batch_size``/``num_workers`` applied to the DataLoader itself)."""
    import functools

    from autotune.loader import defines_hook

    for hook in ("train_dataloader", "val_dataloader"):
        original = getattr(holder, hook, None)
        knobs = dict(train_knobs or {}) if hook == "train_dataloader" else {}
        if original is None or not defines_hook(holder, hook):
            continue
        if not knobs and config.pin_memory is None and config.prefetch_factor is None:
            continue

        @functools.wraps(original)
        def patched(*args, _original=original, _knobs=knobs, **kwargs):
            return _rebuilt_loader(_original(*args, **kwargs), _knobs, config)

        setattr(holder, hook, patched)
