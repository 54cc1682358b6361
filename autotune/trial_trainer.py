"""The Trainer of a trial: its keyword arguments (the user's settings, then the trial's), its step
budget, its DDP strategy and the user's callbacks it keeps; and the model in channels-last memory format.

Used by the trial process (:func:`autotune.target.run_trial`); torch and Lightning are imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.config import TrialConfig

__all__ = [
    "apply_channels_last",
    "budget_epochs",
    "ddp_strategy",
    "leave_out_model_callbacks",
    "left_out_line",
    "max_steps",
    "total_batches",
    "trainer_kwargs",
    "trial_max_epochs",
    "user_callbacks",
]

#: Trainer arguments autotune sets itself; the same keys in a user's ``--config`` are replaced
#: (docs/model.md lists them). ``callbacks`` and ``strategy`` options are the user's; ``max_epochs`` is
#: the user's unless it would end training before the budget (:func:`trial_max_epochs`).
_OWNED_TRAINER_KEYS = {
    "accelerator",
    "devices",
    "strategy",
    "num_nodes",
    "precision",
    "accumulate_grad_batches",
    "max_steps",
    "min_steps",
    "min_epochs",
    "max_time",
    "limit_train_batches",
    "limit_val_batches",
    "num_sanity_val_steps",
    "val_check_interval",
    "check_val_every_n_epoch",
    "logger",
    "enable_checkpointing",
    "enable_progress_bar",
    "enable_model_summary",
    "default_root_dir",
    "fast_dev_run",
    "profiler",
    "plugins",
}


def total_batches(config: TrialConfig, samples: int) -> tuple[int, int]:
    """Optimizer steps and training batches per device that cover a budget of ``samples``.

    Partial batches at epoch ends make the samples actually seen slightly fewer; the measurement
    counts the real ones.

    Args:
        config: The trial's config.
        samples: Training samples to process in total, over all devices (>= 1).

    Returns:
        ``(max_steps, batches)``: ``max_steps = ceil(samples / effective_batch_size)`` optimizer
        steps, each of ``accumulate_grad_batches`` batches per device.
    """
    steps = max(1, math.ceil(samples / config.effective_batch_size))
    return steps, steps * config.accumulate_grad_batches


def _optimizer_steps(batches: int, per_epoch: int, accumulate: int) -> int:
    """Optimizer steps Lightning takes over ``batches`` training batches of ``per_epoch`` batches an
    epoch: ``ceil(b / accumulate)`` per epoch of ``b`` batches (it steps at an epoch's end inside an
    accumulation window)."""
    full, rest = divmod(batches, per_epoch)
    return full * math.ceil(per_epoch / accumulate) + math.ceil(rest / accumulate)


def max_steps(config: TrialConfig, samples: int, train_samples: int | None) -> int:
    """``max_steps`` of a trial: the optimizer steps Lightning takes over the budget's batches, so
    ``trainer.estimated_stepping_batches`` is what a scheduler such as OneCycleLR expects and
    training never stops before the budget's batches.

    Under gradient accumulation Lightning steps once more at each epoch end inside an accumulation
    window, so the epoch's length counts: from the training set's size, as the larger count of an
    epoch with and without its last partial batch (``drop_last`` is the user's). Without the size,
    one step per batch (an upper bound).

    Args:
        config: The trial's config.
        samples: Training samples of the trial (>= 1).
        train_samples: Size of the training set (samples per epoch, all devices), or ``None``.
    """
    steps, batches = total_batches(config, samples)
    accumulate = config.accumulate_grad_batches
    if accumulate == 1:
        return steps
    if not train_samples:
        return batches
    per_device = math.ceil(train_samples / config.world_size)  # DistributedSampler pads every rank to this
    lengths = {max(1, per_device // config.batch_size), max(1, math.ceil(per_device / config.batch_size))}
    return max(steps, *(_optimizer_steps(batches, n, accumulate) for n in lengths))


def budget_epochs(config: TrialConfig, samples: int, train_samples: int | None) -> int | None:
    """Epochs a trial's budget crosses: ``ceil(batches / batches per epoch)`` per device, counting an
    epoch without its last partial batch (``drop_last`` is the user's: the larger count), or ``None``
    when the training set's size is not known.

    Args:
        config: The trial's config.
        samples: Training samples of the trial (>= 1).
        train_samples: Size of the training set (samples per epoch, all devices), or ``None``.
    """
    if not train_samples:
        return None
    _, batches = total_batches(config, samples)
    per_device = math.ceil(train_samples / config.world_size)  # DistributedSampler pads every rank to this
    return math.ceil(batches / max(1, per_device // config.batch_size))


def trial_max_epochs(user_max_epochs: Any, config: TrialConfig, samples: int, train_samples: int | None) -> int:
    """``max_epochs`` of a trial: the user's, raised to the epochs the budget crosses
    (:func:`budget_epochs`) when theirs would end training first, so every trial trains its whole
    ``--samples`` (a ``--config`` with ``max_epochs: 15`` over 456 samples had cut a 20,000-sample
    budget to 6,840, short runs and full ones alike). Where the budget fits, a schedule that reads
    ``trainer.max_epochs`` sees the user's value. ``-1`` (no limit) when the user sets none."""
    if not user_max_epochs or int(user_max_epochs) < 0:
        return -1
    needed = budget_epochs(config, samples, train_samples)
    return max(int(user_max_epochs), needed) if needed is not None else int(user_max_epochs)


def trainer_kwargs(
    config: TrialConfig, samples: int, user_trainer: Mapping[str, Any], root_dir: str, train_samples: int | None = None
) -> dict[str, Any]:
    """Keyword arguments of the trial's ``Trainer``: the user's own settings, then the trial's.

    The user's settings are kept (gradient clipping, precision plugins' options, ...) except the keys
    autotune owns (:data:`_OWNED_TRAINER_KEYS`); the user's ``max_epochs`` is raised where it would end
    training before the budget (:func:`trial_max_epochs`). ``max_steps`` is the budget's
    optimizer steps, so ``trainer.estimated_stepping_batches`` is what a scheduler such as OneCycleLR
    expects; the measurement callback stops training after the planned batches. Validation runs at
    every epoch's end (an epoch shorter than the budget: an epoch-end ReduceLROnPlateau finds its
    metric) and once more when the budget ends (``Trainer.should_stop``).

    Args:
        config: The trial's config.
        samples: Training samples of the trial (>= 1).
        user_trainer: The user's trainer settings (``trainer:`` of ``--config``; callbacks apart).
        root_dir: The trial's folder (``default_root_dir``).
        train_samples: Size of the training set, for :func:`max_steps`.
    """
    kwargs = {k: v for k, v in user_trainer.items() if k not in _OWNED_TRAINER_KEYS and k != "callbacks"}
    kwargs.update(config.trainer_args())
    if config.strategy == "ddp" and _is_ddp(user_trainer.get("strategy")):
        kwargs["strategy"] = user_trainer["strategy"]  # the user's DDP options (find_unused_parameters, ...)
    kwargs.update(
        max_steps=max_steps(config, samples, train_samples),
        max_epochs=trial_max_epochs(user_trainer.get("max_epochs"), config, samples, train_samples),
        val_check_interval=None,
        check_val_every_n_epoch=1,
        limit_val_batches=user_trainer.get("limit_val_batches", 1.0),
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root_dir,
    )
    return kwargs


def _is_ddp(strategy: Any) -> bool:
    """Whether a user's ``strategy`` is a flavour of DDP (a registry name such as
    ``ddp_find_unused_parameters_true``, or a ``DDPStrategy`` object)."""
    if isinstance(strategy, str):
        return strategy.startswith("ddp")
    return type(strategy).__name__ == "DDPStrategy"


def ddp_strategy(pl: Any, strategy: Any, start_method: str) -> Any:
    """A ``DDPStrategy`` with ``start_method`` (warm trials fork their ranks) and the options of the
    user's DDP ``strategy`` (a registry name or a ``DDPStrategy``), e.g. ``find_unused_parameters``."""
    options: dict[str, Any] = {}
    if isinstance(strategy, str) and strategy in pl.strategies.StrategyRegistry:
        options = dict(pl.strategies.StrategyRegistry[strategy].get("init_params") or {})
    elif type(strategy).__name__ == "DDPStrategy":
        options = dict(getattr(strategy, "_ddp_kwargs", {}) or {})
    options.pop("start_method", None)
    return pl.strategies.DDPStrategy(start_method=start_method, **options)


#: Callbacks a trial leaves out: those that need what a trial turns off (checkpoints, a logger, the
#: progress bar, the summary), and ``EarlyStopping``: every trial trains its whole budget, so that its
#: loss is compared with the baseline's at the same samples (helper-28's ``patience: 5`` had cut
#: 16,384-sample trials to 5,928-7,296 samples, each a different length).
_DROPPED_CALLBACKS = ("Checkpoint", "ProgressBar", "ModelSummary", "LearningRateMonitor", "DeviceStatsMonitor", "EarlyStopping")


def user_callbacks(pl: Any, callbacks: list[Any]) -> list[Any]:
    """The user's callbacks a trial keeps: all but checkpointing, progress bars, model summaries,
    the monitors that need a logger (a trial has none of them) and early stopping (and their
    subclasses)."""
    dropped = tuple(getattr(pl.callbacks, name) for name in _DROPPED_CALLBACKS if hasattr(pl.callbacks, name))
    return [c for c in callbacks if not isinstance(c, dropped)]


def leave_out_model_callbacks(pl: Any, model: Any) -> Any:
    """The module with its ``configure_callbacks()`` less the callbacks a trial leaves out
    (:func:`user_callbacks`): Lightning adds what that hook returns to the Trainer's callbacks when
    ``fit`` starts, past the filter of the ``Trainer``'s own list. Set on the instance, as
    :func:`apply_channels_last` does."""
    original = model.configure_callbacks

    def configure_callbacks():
        returned = original()
        return user_callbacks(pl, [returned] if isinstance(returned, pl.Callback) else list(returned or []))

    model.configure_callbacks = configure_callbacks
    return model


def callback_names(callbacks: Any) -> list[str]:
    """The class names of a ``--config``'s ``trainer.callbacks``: a list, or one entry, each
    ``{class_path: ..., init_args: ...}`` or a class path (``"EarlyStopping"`` for
    ``lightning.pytorch.callbacks.EarlyStopping``); entries of another form are left out."""
    entries = callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else []
    paths = [e.get("class_path") if isinstance(e, Mapping) else e for e in entries]
    return [str(p).rsplit(".", 1)[-1] for p in paths if isinstance(p, str)]


def left_out_line(callbacks: Any) -> str | None:
    """The line that names the callbacks of a ``--config``'s ``trainer.callbacks`` (a list, or one
    entry: ``{class_path: ..., init_args: ...}`` or a class path) that trials leave out
    (:func:`user_callbacks`; by class name, a subclass named otherwise is not named here), or
    ``None`` when there are none."""
    left = [n for n in callback_names(callbacks) if any(word in n for word in _DROPPED_CALLBACKS)]
    if not left:
        return None
    left = list(dict.fromkeys(left))
    return (
        f"trials leave out your config's {', '.join(left)}: every trial trains its whole budget, "
        f"with no logger or checkpoints, so its loss compares with the baseline's at the same samples; the export keeps {'them' if len(left) > 1 else 'it'}"
    )


def apply_channels_last(model: Any) -> Any:
    """The module in ``torch.channels_last``, and its 4-D input tensors converted after each batch
    transfer (``on_after_batch_transfer``), as the PyTorch tutorial on channels last does."""
    import torch
    from lightning.fabric.utilities.apply_func import apply_to_collection

    model = model.to(memory_format=torch.channels_last)
    original = model.on_after_batch_transfer

    def on_after_batch_transfer(batch, dataloader_idx):
        batch = original(batch, dataloader_idx)
        return apply_to_collection(batch, torch.Tensor, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t)

    model.on_after_batch_transfer = on_after_batch_transfer
    return model
