"""Every trial validates on as many samples as the baseline: an integer ``limit_val_batches`` scaled.

A user's ``trainer: limit_val_batches: 10`` counts *batches*. When the validation DataLoader takes the
same ``batch_size`` the trial searches (a common pattern: one ``batch_size`` for both loaders), batch 16
validates on 160 samples and batch 128 on 1,280, so their ``val_loss`` are means over different data,
and the loss tolerance compares them as if they were one figure (helper-36: one trained model validated
3.476 at batch 16, 3.064 at 32 and 2.842 at 128 over ten batches; a same-math split of the baseline's
effective batch was failed as 18% worse). A float ``limit_val_batches`` (a fraction of the batches) and
no limit (every batch) cover the same samples at any batch size and are left alone.

:func:`scaled_limit` gives the trial the baseline's validation samples: ``limit x baseline batch / trial
batch`` batches, rounded, at least 1, when the validation DataLoader's ``batch_size`` is the trial's
``batch_size`` (a loader of a fixed batch size validates the same samples at every trial's batch size and
keeps its limit). The callback (:func:`equal_validation_class`) reads the loader in ``setup``, after
the DataModule's own ``setup`` and before Lightning sizes its validation loop.
"""

from __future__ import annotations

from typing import Any

__all__ = ["counts_batches", "equal_validation_class", "scaled_limit"]


def counts_batches(limit: Any, batch_size: int, baseline_batch_size: int | None) -> bool:
    """Whether ``limit`` (a ``limit_val_batches``) is a count of batches (an ``int`` > 0) that a trial of
    ``batch_size`` may have to scale: the baseline's ``batch_size`` is known and differs."""
    return (
        not isinstance(limit, bool)
        and isinstance(limit, int)
        and limit > 0
        and bool(baseline_batch_size)
        and batch_size != baseline_batch_size
    )


def scaled_limit(limit: Any, val_batch_size: int | None, batch_size: int, baseline_batch_size: int | None) -> int | None:
    """The trial's integer ``limit_val_batches`` that validates the baseline's samples, or ``None`` (keep the limit).

    Args:
        limit: The user's ``limit_val_batches`` (only an ``int`` > 0 counts batches; a float is a fraction).
        val_batch_size: The validation DataLoader's ``batch_size`` in this trial (``None``: unknown).
        batch_size: The trial's per-device ``batch_size`` (>= 1).
        baseline_batch_size: The baseline's (``None``: unknown).

    Returns:
        ``max(1, round(limit * baseline_batch_size / batch_size))`` when the validation loader follows the
        trial's ``batch_size`` and that differs from the baseline's, else ``None``.
    """
    if not counts_batches(limit, batch_size, baseline_batch_size) or val_batch_size != batch_size:
        return None
    return max(1, round(limit * baseline_batch_size / batch_size))


class _EqualValidationHooks:
    """Set ``trainer.limit_val_batches`` to :func:`scaled_limit` once the validation loader can be read."""

    def __init__(self, limit: int, batch_size: int, baseline_batch_size: int, static: dict[str, Any]):
        self.limit, self.batch_size, self.baseline_batch_size, self.static = limit, batch_size, baseline_batch_size, static

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        loader = _val_loader(trainer, pl_module)
        size = getattr(loader, "batch_size", None)
        if size is None:
            size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
        scaled = scaled_limit(self.limit, size if isinstance(size, int) else None, self.batch_size, self.baseline_batch_size)
        if scaled is not None:
            trainer.limit_val_batches = scaled
            self.static["limit_val_batches"] = scaled  # in the rank's report, beside the config it ran


def _val_loader(trainer: Any, pl_module: Any) -> Any:
    """The first validation DataLoader the DataModule (else the module) returns, or ``None``."""
    from autotune.loader import defines_hook

    holder = trainer.datamodule if trainer.datamodule is not None and defines_hook(trainer.datamodule, "val_dataloader") else pl_module
    if not defines_hook(holder, "val_dataloader"):
        return None
    try:
        loaders = holder.val_dataloader()
    except Exception:  # Lightning calls it again and reports what it raises
        return None
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    if isinstance(loaders, dict):
        return next(iter(loaders.values()), None)
    return loaders


_CLASSES: dict[str, type] = {}


def equal_validation_class(pl: Any) -> type:
    """The callback class of :class:`_EqualValidationHooks` for a Lightning package (``lightning.pytorch``
    or ``pytorch_lightning``), built once per package; its arguments: the user's ``limit_val_batches``,
    the trial's and the baseline's ``batch_size``, and the dict the measurement callback stores."""
    if pl.__name__ not in _CLASSES:
        namespace = {"__module__": __name__, "__qualname__": "EqualValidation", "__doc__": _EqualValidationHooks.__doc__}
        _CLASSES[pl.__name__] = type("EqualValidation", (_EqualValidationHooks, pl.Callback), namespace)
    return _CLASSES[pl.__name__]
