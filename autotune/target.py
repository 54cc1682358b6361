"""The trial process: the only place that imports the user's model file and builds a Trainer.

Run as ``python -m autotune.target inspect SPEC OUT`` or ``python -m autotune.target run SPEC DIR``.
The CLI process starts it in a process group of its own (see :mod:`autotune.runner`). For a
multi-device trial, Lightning's DDP launcher re-executes this same command line once per extra rank,
so every rank reads the same ``SPEC`` file and runs the same config: no rank ever talks to the study.

``inspect`` probes the hardware, imports the model file, finds its classes and where each knob can
be applied, and reads the baseline values; it writes one JSON object to ``OUT``.

``run`` trains one trial for its sample budget and writes ``DIR/rank<R>.json`` for each rank: what
the rank measured (see :mod:`autotune.callback` and :mod:`autotune.rank_report`), what config it saw, or why it failed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from autotune.config import TrialConfig
from autotune.errors import UsageError

__all__ = ["inspect_model", "main", "run_trial", "total_batches", "trainer_kwargs"]

#: Trainer arguments autotune sets itself; the same keys in a user's ``--config`` are replaced
#: (docs/model.md lists them). ``callbacks``, ``strategy`` options and ``max_epochs`` are the user's.
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


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


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


def max_steps(config: TrialConfig, samples: int, train_samples: int | None) -> int:
    """``max_steps`` of a trial: its optimizer steps, plus one per epoch end the budget crosses when
    batches are accumulated (Lightning steps at an epoch's end inside an accumulation window), so
    training never stops before the budget's batches. Without the training set's size, one step per
    batch (an upper bound).

    Args:
        config: The trial's config.
        samples: Training samples of the trial (>= 1).
        train_samples: Size of the training set (samples per epoch, all devices), or ``None``.
    """
    steps, batches = total_batches(config, samples)
    if config.accumulate_grad_batches == 1:
        return steps
    if not train_samples:
        return batches
    per_epoch = max(1, train_samples // (config.batch_size * config.world_size))  # batches per device (floor: more epoch ends)
    return steps + math.ceil(batches / per_epoch) + 1


def trainer_kwargs(
    config: TrialConfig, samples: int, user_trainer: Mapping[str, Any], root_dir: str, train_samples: int | None = None
) -> dict[str, Any]:
    """Keyword arguments of the trial's ``Trainer``: the user's own settings, then the trial's.

    The user's settings are kept (gradient clipping, ``max_epochs``, precision plugins' options,
    ...) except the keys autotune owns (:data:`_OWNED_TRAINER_KEYS`). ``max_steps`` is the budget's
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
        max_epochs=user_trainer.get("max_epochs") or -1,
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


#: Callbacks that need what a trial turns off (checkpoints, a logger, the progress bar, the summary).
_DROPPED_CALLBACKS = ("Checkpoint", "ProgressBar", "ModelSummary", "LearningRateMonitor", "DeviceStatsMonitor")


def user_callbacks(pl: Any, callbacks: list[Any]) -> list[Any]:
    """The user's callbacks a trial keeps: all but checkpointing, progress bars, model summaries and
    the monitors that need a logger (a trial has none of them)."""
    dropped = tuple(getattr(pl.callbacks, name) for name in _DROPPED_CALLBACKS if hasattr(pl.callbacks, name))
    return [c for c in callbacks if not isinstance(c, dropped)]


def _load(spec: Mapping[str, Any]):
    """The user's classes, config and LightningCLI class: the study's snapshot of ``--config`` and
    the CLI class it found when the spec has them (a trial), else found now (an inspection)."""
    from autotune.lightning_cli import find_cli_class
    from autotune.loader import find_classes, load_user_module, read_user_config

    module = load_user_module(spec["model_file"])
    model_cls, data_cls = find_classes(module, spec.get("model_class"), spec.get("data_class"))
    if "cli" in spec:
        cli = spec["cli"]
    else:
        found = find_cli_class(spec["model_file"])
        cli = found.to_dict() if found else None
    user_config = spec.get("user_config") or read_user_config(spec.get("config_file"), strict=cli is None)
    return model_cls, data_cls, user_config, cli


def knob_overrides(targets: Mapping[str, Any], config: TrialConfig) -> dict[str, Any]:
    """Dotted config paths and values of a trial's knobs that LightningCLI sets: the knobs applied
    through constructor (or optimizer) arguments, and the searched ``model_args``/``data_args``."""
    out = {
        f"{t.owner}.{t.name}": getattr(config, knob) for knob, t in targets.items() if t.how == "init" and getattr(config, knob) is not None
    }
    out.update({f"model.{k}": v for k, v in (config.model_args or {}).items()})
    out.update({f"data.{k}": v for k, v in (config.data_args or {}).items()})
    return out


def _build(
    spec: Mapping[str, Any],
    model_cls: Any,
    data_cls: Any,
    user_config: Mapping[str, Any],
    cli: Any,
    overrides: Mapping[str, Any],
    work_dir: str,
):
    """:func:`autotune.lightning_cli.build` with the user's (or Lightning's) CLI class, in the package the model uses."""
    from autotune.lightning_cli import build, load_cli_class
    from autotune.loader import lightning_package

    cli_class = load_cli_class(cli, lightning_package(model_cls))
    return build(cli_class, model_cls, data_cls, user_config.get("document"), overrides, int(spec.get("seed", 0)), work_dir)


def inspect_model(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Probe hardware and model (child process only).

    Args:
        spec: ``model_file``, optional ``model_class``, ``data_class``, ``config_file``.

    Returns:
        ``hardware`` (dict), ``model_class``, ``data_class`` (or ``None``), ``targets`` (knob to
        :class:`~autotune.loader.KnobTarget` dict), ``baseline`` (knob values of the model's own
        config: ``batch_size``, ``num_workers``, ``lr``, ``precision``, ``accumulate_grad_batches``),
        ``init_args`` (``{"model": [...], "data": [...]}``).

    A ``batch_size`` or ``num_workers`` that no constructor argument or attribute reaches is applied
    to the training DataLoader itself (a ``"loader"`` target, see
    :func:`autotune.loader.loader_targets`); where even that cannot be done, the knob is left out of
    ``targets`` and ``model_info["unreachable"]`` says why (the space drops it with that line), and
    the baseline's batch size is the one the loader yields.

    Raises:
        UsageError: The model file or config is unusable, or the batch size can be neither set nor
            read (no training DataLoader found, ...; the message says what was found).
    """
    import tempfile

    from autotune.hardware import probe_hardware
    from autotune.loader import (
        DATALOADER_KNOBS,
        KnobTarget,
        _init_params,
        dataloader_batch_size,
        loader_targets,
        locate_knobs,
        read_knob,
    )

    hardware = probe_hardware()
    model_cls, data_cls, user_config, cli = _load(spec)
    _check_untyped_arguments(model_cls, data_cls, user_config.get("document") or {})
    with tempfile.TemporaryDirectory(prefix="autotune-inspect-") as work_dir:
        built = _build(spec, model_cls, data_cls, user_config, cli, {}, work_dir)
    model, datamodule = built.model, built.datamodule
    targets = locate_knobs(model_cls, data_cls, model, datamodule)
    optimizer = built.config.get("optimizer")
    if isinstance(optimizer, Mapping) and optimizer.get("class_path"):
        # the config picks the optimizer (LightningCLI replaces configure_optimizers): lr is its argument
        targets["lr"] = KnobTarget("lr", "optimizer", "init", "lr")
    owner = "data" if datamodule is not None else "model"
    train_samples, loader, problem = _train_loader(datamodule if datamodule is not None else model)
    # a batch size or worker count hard-coded in train_dataloader(): the trial rebuilds the DataLoader
    reached, unreachable = loader_targets([k for k in DATALOADER_KNOBS if k not in targets], owner, loader, problem)
    targets.update(reached)
    baseline: dict[str, Any] = {}
    for knob, target in targets.items():
        if target.how == "loader":  # (a DataLoader given a BatchSampler has batch_size None: the sampler's)
            baseline[knob] = dataloader_batch_size(loader) if knob == "batch_size" else loader.num_workers
            continue
        parsed = _parsed_value(built.config, f"{target.owner}.{target.name}") if target.how == "init" else None
        baseline[knob] = parsed if parsed is not None else read_knob(target, model, datamodule)
    if "batch_size" not in targets:  # not searched: the baseline (and every trial) runs the loader's own
        baseline["batch_size"] = dataloader_batch_size(loader) if loader is not None else None
        if baseline["batch_size"] is None:
            holder = data_cls.__name__ if data_cls else model_cls.__name__
            found = (
                unreachable["batch_size"] if loader is None else f"its training loader ({type(loader).__name__}) yields no batch to measure"
            )
            raise UsageError(
                f"{spec['model_file']}: autotune cannot set or read the batch size: {found}; give {holder} "
                "a constructor argument `batch_size` that its train_dataloader() passes to a DataLoader"
            )
    trainer_cfg = built.trainer
    baseline["precision"] = _canonical_precision(trainer_cfg.get("precision") or "32-true")
    baseline["accumulate_grad_batches"] = int(trainer_cfg.get("accumulate_grad_batches") or 1)
    if baseline.get("num_workers") is None:
        baseline["num_workers"] = getattr(loader, "num_workers", 0) if "num_workers" not in targets else 0
    model_info = _model_info(model_cls, data_cls, model, user_config, loader)
    model_info["unreachable"] = unreachable
    return {
        "hardware": hardware.to_dict(),
        "cli": cli,
        "user_config": user_config,
        "train_samples": train_samples,
        "model_info": model_info,
        "model_class": model_cls.__name__,
        "data_class": data_cls.__name__ if data_cls else None,
        "targets": {k: t.to_dict() for k, t in targets.items()},
        "baseline": baseline,
        "init_args": {
            "model": [p for p in _init_params(model_cls) if p != "self"],
            "data": [p for p in _init_params(data_cls) if p != "self"] if data_cls else [],
        },
    }


def _check_untyped_arguments(model_cls: Any, data_cls: Any, document: Mapping[str, Any]) -> None:
    """Refuse a constructor argument with neither a type annotation nor a default that ``--config``
    does not give: LightningCLI's parser would pass ``None`` for it without a word.

    Raises:
        UsageError: Naming the class, the arguments and the fix.
    """
    import inspect

    from autotune.loader import _init_params

    for section, cls in (("model", model_cls), ("data", data_cls)):
        if cls is None:
            continue
        given = document.get(section) or {}
        given = given.get("init_args", given) if isinstance(given, Mapping) else {}
        missing = [
            name
            for name, p in _init_params(cls).items()
            if name != "self"
            and p.default is inspect.Parameter.empty
            and p.annotation is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            and name not in given
        ]
        if missing:
            raise UsageError(f"{cls.__name__} needs argument(s) {missing} (no default); give them in a --config YAML under {section}:")


def _parsed_value(config: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a parsed LightningCLI config (through ``init_args``), or ``None``."""
    node: Any = config
    for key in path.split("."):
        if isinstance(node, Mapping) and "init_args" in node and key not in node:
            node = node["init_args"]
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _overrides(holder: Any, hook: str) -> bool:
    """Whether the user's LightningModule or LightningDataModule ``holder`` defines ``hook`` itself
    (of either Lightning package)."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    from autotune.loader import lightning_package

    pl = lightning_package(type(holder))
    parent = pl.LightningDataModule if isinstance(holder, pl.LightningDataModule) else pl.LightningModule
    return is_overridden(hook, holder, parent=parent)


def _train_loader(holder: Any) -> tuple[int | None, Any, str | None]:
    """``(length of the training set, the training loader, why there is none)`` (best effort:
    ``setup("fit")`` then ``train_dataloader()``); ``None`` for what cannot be read."""
    if not _overrides(holder, "train_dataloader"):
        return None, None, f"no training DataLoader found: {type(holder).__name__} defines no train_dataloader()"
    try:
        if hasattr(holder, "setup"):
            holder.setup("fit")
        loader = holder.train_dataloader()
    except Exception as e:  # loaders needing a Trainer, ...: the space stays as written
        return None, None, f"no training DataLoader found: {type(holder).__name__}.train_dataloader() raised {type(e).__name__}: {e}"
    try:
        return len(loader.dataset), loader, None
    except Exception:  # an iterable dataset
        return None, loader, None


#: Annotation spellings of the constructor-argument types a space may search.
_ANNOTATIONS = {"int": "int", "float": "float", "bool": "bool", "str": "str"}


def _arg_type(param: Any) -> str | None:
    """``"int"``, ``"float"``, ``"bool"``, ``"str"`` from a parameter's annotation (``Optional`` and
    ``| None`` allowed), else from its default's type; ``None`` when neither tells."""
    import inspect

    annotation = param.annotation
    if annotation is not inspect.Parameter.empty:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        text = text.replace("typing.", "").replace("Optional[", "").rstrip("]").replace(" | None", "").replace("None | ", "").strip()
        if text in _ANNOTATIONS:
            return _ANNOTATIONS[text]
    default = param.default
    if default is not inspect.Parameter.empty and default is not None and type(default).__name__ in _ANNOTATIONS:
        return type(default).__name__
    return None


def _signature(cls: Any, given: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Constructor arguments of ``cls``: name to ``{"type", "default"}`` (the ``--config`` value first)."""
    import inspect

    from autotune.loader import _init_params

    out = {}
    for name, param in _init_params(cls).items():
        if name == "self" or param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        default = given.get(name, None if param.default is inspect.Parameter.empty else param.default)
        out[name] = {"type": _arg_type(param), "default": default if isinstance(default, (bool, int, float, str)) else None}
    return out


def _model_info(model_cls: Any, data_cls: Any, model: Any, user_config: Mapping[str, Any], loader: Any) -> dict[str, Any]:
    """What the space resolution needs to know about the model (see :func:`autotune.space.resolve_space`):
    constructor signatures, convolutions, the train DataLoader's settings, and whether the module uses
    automatic optimization (Lightning accumulates gradients for no other)."""
    import inspect

    import torch

    from autotune.loader import _init_params

    def accepts_any(cls: Any) -> bool:
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in _init_params(cls).values())

    return {
        "signature": {
            "model": _signature(model_cls, user_config["model"]),
            "data": _signature(data_cls, user_config["data"]) if data_cls else None,
        },
        "accepts_any": {"model": accepts_any(model_cls), "data": bool(data_cls) and accepts_any(data_cls)},
        "class_names": {"model": model_cls.__name__, "data": data_cls.__name__ if data_cls else None},
        "has_conv": any(isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)) for m in model.modules()),
        "loader": (
            {
                "pin_memory": bool(loader.pin_memory),
                "prefetch_factor": loader.prefetch_factor,
                "persistent_workers": bool(loader.persistent_workers),
            }
            if isinstance(loader, torch.utils.data.DataLoader)
            else None
        ),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "automatic_optimization": bool(getattr(model, "automatic_optimization", True)),
    }


def with_loader_options(loader: Any, pin_memory: bool | None, prefetch_factor: int | None) -> Any:
    """A copy of a ``torch.utils.data.DataLoader`` with ``pin_memory`` and ``prefetch_factor`` set
    (:func:`autotune.loader.rebuild_dataloader`; anything that is not a DataLoader is returned as is)."""
    from autotune.loader import rebuild_dataloader

    return rebuild_dataloader(loader, pin_memory=pin_memory, prefetch_factor=prefetch_factor)


def _rebuilt_loader(loader: Any, knobs: Mapping[str, int], config: TrialConfig) -> Any:
    """A loader rebuilt with the trial's loader knobs (``batch_size``/``num_workers`` that
    no argument reaches) and its ``pin_memory``/``prefetch_factor``.

    Raises:
        TrialFault: ``batch_size_not_applied`` or ``num_workers_not_applied``: the loader cannot take
            the knob (it did at the inspection), the reason in the message.
    """
    from autotune.loader import dataloader_reach, rebuild_dataloader
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


def _apply_loader_options(holder: Any, config: TrialConfig, train_knobs: Mapping[str, int] | None = None) -> None:
    """Make the user's ``train_dataloader``/``val_dataloader`` return loaders with the config's
    ``pin_memory``/``prefetch_factor`` (only the hooks the user wrote), the training one also with
    ``train_knobs`` (the ``batch_size``/``num_workers`` applied to the DataLoader itself)."""
    import functools

    for hook in ("train_dataloader", "val_dataloader"):
        original = getattr(holder, hook, None)
        knobs = dict(train_knobs or {}) if hook == "train_dataloader" else {}
        if original is None or not _overrides(holder, hook):
            continue
        if not knobs and config.pin_memory is None and config.prefetch_factor is None:
            continue

        @functools.wraps(original)
        def patched(*args, _original=original, _knobs=knobs, **kwargs):
            return _rebuilt_loader(_original(*args, **kwargs), _knobs, config)

        setattr(holder, hook, patched)


def _apply_channels_last(model: Any) -> Any:
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


def _canonical_precision(value: Any) -> str:
    aliases = {"32": "32-true", 32: "32-true", "16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed", "64": "64-true", 64: "64-true"}
    return aliases.get(value, str(value))


def _global_rank() -> int:
    return int(os.environ.get("NODE_RANK", 0)) * int(os.environ.get("AUTOTUNE_DEVICES", 1)) + int(os.environ.get("LOCAL_RANK", 0))


def run_trial(spec: Mapping[str, Any], out_dir: Path) -> int:
    """Train one trial and return the exit code (0 when ``fit`` returned).

    Every rank writes its report ``out_dir/rank<R>.json`` from the measurement callback (see
    :mod:`autotune.callback`); an error before ``fit`` (loading the model, building the Trainer, a
    precision Lightning did not apply) is reported here, for this process's rank, unless the rank
    already reported.
    """
    from autotune.measure import TrialFault, classify_exception
    from autotune.rank_report import RankReport, write_rank_report

    # a failed rank's report: it lacks RankSummary's figures (see RankReport), which only a finished fit has
    result = cast("RankReport", {"rank": _global_rank(), "ok": False})
    try:
        _quiet()
        import torch

        from autotune.callback import measure_callback_class
        from autotune.hardware import available_cpu_count
        from autotune.loader import KnobTarget, apply_attribute_knobs, lightning_package

        config = TrialConfig.from_dict(spec["config"])
        result["config"] = config.to_dict()
        if os.environ.get("AUTOTUNE_CPUS"):  # a parallel job's own cores (--jobs); children inherit them
            os.sched_setaffinity(0, {int(c) for c in os.environ["AUTOTUNE_CPUS"].split(",")})
        if config.accelerator == "cpu":
            torch.set_num_threads(max(1, available_cpu_count() // config.devices))
        model_cls, data_cls, user_config, cli = _load(spec)
        if config.float32_matmul_precision:
            torch.set_float32_matmul_precision(config.float32_matmul_precision)
        pl = lightning_package(model_cls)  # lightning.pytorch or pytorch_lightning, as the model uses
        targets = {k: KnobTarget(**t) for k, t in spec["targets"].items()}
        # built as the user's LightningCLI builds it (it seeds everything first), the knobs as overrides
        built = _build(spec, model_cls, data_cls, user_config, cli, knob_overrides(targets, config), str(out_dir))
        model, datamodule = built.model, built.datamodule
        apply_attribute_knobs(targets, {k: getattr(config, k) for k in targets}, model, datamodule)
        loader_knobs = {k: getattr(config, k) for k, t in targets.items() if t.how == "loader"}
        _apply_loader_options(datamodule if datamodule is not None else model, config, loader_knobs)
        if config.channels_last:
            model = _apply_channels_last(model)
        _, batches = total_batches(config, int(spec["samples"]))
        kwargs = trainer_kwargs(config, int(spec["samples"]), built.trainer, str(out_dir), spec.get("train_samples"))
        if spec.get("start_method") and config.strategy == "ddp":  # warm trials fork their ranks
            kwargs["strategy"] = ddp_strategy(pl, kwargs["strategy"], spec["start_method"])
        callback = measure_callback_class(pl)(
            batch_size=config.batch_size,
            num_workers=config.num_workers if "num_workers" in targets else None,
            check_batch="batch_size" in targets,  # else the loader's own batch size, which may vary
            total_batches=batches,
            accumulate_grad_batches=config.accumulate_grad_batches,
            out_dir=str(out_dir),
            static={"config": config.to_dict()},
        )
        trainer = pl.Trainer(callbacks=[*user_callbacks(pl, built.callbacks), callback], **kwargs)
        callback.static["precision_ran"] = result["precision_ran"] = str(trainer.precision)
        if str(trainer.precision) != config.precision:
            raise TrialFault(
                "precision_not_applied", f"precision not applied: asked for {config.precision!r}, Lightning ran {trainer.precision!r}"
            )
        if config.compile_mode:
            # Lightning trains a torch.compile'd LightningModule as is (and unwraps it for hooks and checkpoints)
            model = torch.compile(model, mode=None if config.compile_mode == "default" else config.compile_mode)
        trainer.fit(model, datamodule=datamodule)
        return 0
    except BaseException as e:  # a failed trial is data: classify and store it
        kind, message = ("usage", str(e)) if isinstance(e, UsageError) else classify_exception(e)
        result["error"] = {"kind": kind, "message": message}
        traceback.print_exc()
        write_rank_report(str(out_dir), result["rank"], result, overwrite=False)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in ("inspect", "run"):
        print("usage: python -m autotune.target {inspect SPEC OUT | run SPEC DIR}", file=sys.stderr)
        return 2
    command, spec_path, out = argv
    spec = json.loads(Path(spec_path).read_text())
    if command == "run":
        from autotune.runner import end_group_on_sigterm

        end_group_on_sigterm()  # sent when the worker that started this trial dies
        return run_trial(spec, Path(out))
    try:
        _quiet()
        payload = {"ok": True, **inspect_model(spec)}
        code = 0
    except UsageError as e:
        payload, code = {"ok": False, "usage": True, "message": str(e)}, 2
    except Exception as e:
        traceback.print_exc()
        payload, code = {"ok": False, "usage": False, "message": f"{type(e).__name__}: {e}"}, 1
    Path(out).write_text(json.dumps(payload, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
