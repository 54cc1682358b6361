"""Inspecting the user's model in a trial process (``python -m autotune.target inspect``): the hardware,
the user's classes, where each knob can be applied and its baseline value, the training DataLoader,
and what the search space's resolution needs to know about the model (:func:`inspect_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import UsageError

__all__ = ["inspect_model", "training_length"]

#: The Trainer arguments that set how long ``fit`` trains, with Lightning's defaults (no limit set:
#: then ``max_epochs=1000``).
TRAINING_LENGTH_DEFAULTS: dict[str, Any] = {"max_epochs": None, "max_steps": -1, "max_time": None}


def inspect_model(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Probe hardware and model (child process only).

    Args:
        spec: ``model_file``, optional ``model_class``, ``data_class``, ``config_file``.

    Returns:
        ``hardware`` (dict), ``model_class``, ``data_class`` (or ``None``), ``targets`` (knob to
        :class:`~autotune.knob_targets.KnobTarget` dict), ``baseline`` (knob values of the model's own
        config: ``batch_size``, ``num_workers``, ``lr``, ``precision``, ``accumulate_grad_batches``),
        ``init_args`` (``{"model": [...], "data": [...]}``).

    A ``batch_size`` or ``num_workers`` that no constructor argument or attribute reaches is applied
    to the training DataLoader itself (a ``"loader"`` target, see
    :func:`autotune.dataloaders.loader_targets`); where even that cannot be done, the knob is left out of
    ``targets`` and ``model_info["unreachable"]`` says why (the space drops it with that line), and
    the baseline's batch size is the one the loader yields. ``lr`` goes to the config's ``optimizer:``
    section when it names a class; else to a constructor argument ``lr``/``learning_rate``; else to
    the ``lr`` of the one optimizer the module takes as an argument (``OptimizerCallable``,
    ``model.<arg>.init_args.lr``); a module taking several has its lr unreachable, with that reason.

    Raises:
        UsageError: The model file or config is unusable, or the batch size can be neither set nor
            read (no training DataLoader found, ...; the message says what was found).
    """
    import tempfile

    from autotune.dataloaders import DATALOADER_KNOBS, loader_targets
    from autotune.hardware import probe_hardware
    from autotune.knob_targets import KnobTarget, init_params, locate_knobs
    from autotune.lightning_cli import build_spec, load_spec

    model_cls, data_cls, user_config, cli = load_spec(spec)
    _check_untyped_arguments(model_cls, data_cls, user_config.get("document") or {})
    with tempfile.TemporaryDirectory(prefix="autotune-inspect-") as work_dir:
        built = build_spec(spec, model_cls, data_cls, user_config, cli, {}, work_dir)  # parses --config first
    hardware = probe_hardware()  # after the config's refusal, if any: CUDA's start-up takes seconds
    model, datamodule = built.model, built.datamodule
    targets = locate_knobs(model_cls, data_cls, model, datamodule)
    optimizer = built.config.get("optimizer")
    callables = _optimizer_arguments(built.config.get("model"))
    lr_unreachable = None
    if isinstance(optimizer, Mapping) and optimizer.get("class_path"):
        # the config picks the optimizer (LightningCLI replaces configure_optimizers): lr is its argument
        targets["lr"] = KnobTarget("lr", "optimizer", "init", "lr")
    elif len(callables) == 1 and ("lr" not in targets or targets["lr"].how != "init"):
        # an optimizer callable the module takes (OptimizerCallable): lr is the optimizer's argument
        targets["lr"] = KnobTarget("lr", "model", "init", f"{next(iter(callables))}.lr")
        optimizer = next(iter(callables.values()))
    elif len(callables) > 1 and "lr" not in targets:
        lr_unreachable = f"the model takes {len(callables)} optimizers ({', '.join(callables)}): autotune sets one lr, not several"
    owner = "data" if datamodule is not None else "model"
    train_samples, loader, problem = _train_loader(datamodule if datamodule is not None else model)
    # a batch size or worker count hard-coded in train_dataloader(): the trial rebuilds the DataLoader
    reached, unreachable = loader_targets([k for k in DATALOADER_KNOBS if k not in targets], owner, loader, problem)
    targets.update(reached)
    baseline = _baseline(spec, built, model_cls, data_cls, targets, loader, unreachable)
    model_info = _model_info(model_cls, data_cls, model, user_config, loader)
    model_info["unreachable"] = {**unreachable, **({"lr": lr_unreachable} if lr_unreachable else {})}
    model_info["links"] = built.links
    # the optimizer's class (its family sets --search staged's lr rule): the config's, else the one
    # the model's configure_optimizers returns before training (with a stand-in Trainer where it reads one), else None
    named = optimizer.get("class_path") if isinstance(optimizer, Mapping) else None
    if not named and not callables and not _defines_optimizers(model):
        # Lightning's fit refuses it: a new user's `autotune search train.py` without --config failed only at the baseline
        raise UsageError(
            f"{model_cls.__name__} defines no configure_optimizers() and no --config names an optimizer: give the LightningCLI "
            "config that sets optimizer: (--config config.yaml), or define configure_optimizers() in the module"
        )
    model_info["optimizer"] = named or _optimizer_class(model)
    model_info["training_length"] = training_length(built.trainer)
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
            "model": [p for p in init_params(model_cls) if p != "self"],
            "data": [p for p in init_params(data_cls) if p != "self"] if data_cls else [],
        },
    }


def _optimizer_arguments(model_config: Any) -> dict[str, Mapping[str, Any]]:
    """The LightningModule's constructor arguments that the parsed config gives an optimizer class
    with an ``lr`` (LightningCLI's ``OptimizerCallable`` pattern: ``optimizer: {class_path:
    torch.optim.AdamW, init_args: {lr: ...}}``, or the argument's default class), name to its
    ``{class_path, init_args}``; ``{}`` when there are none."""
    import importlib

    import torch

    args = model_config.get("init_args", model_config) if isinstance(model_config, Mapping) else {}
    found: dict[str, Mapping[str, Any]] = {}
    for name, value in (args if isinstance(args, Mapping) else {}).items():
        if not (isinstance(value, Mapping) and isinstance(value.get("class_path"), str) and "lr" in (value.get("init_args") or {})):
            continue
        module, _, attr = value["class_path"].rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except Exception:  # a class path the parser accepted but this process cannot import: not ours to judge
            continue
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
            found[name] = value
    return found


class _StandInTrainer:
    """What a ``configure_optimizers`` that reads ``self.trainer`` before training mostly reads (a
    OneCycleLR's ``total_steps=self.trainer.estimated_stepping_batches``): plausible figures, only so
    that the optimizer's class can be read (:func:`_optimizer_class`); nothing trains with them."""

    estimated_stepping_batches = 1000
    max_steps = 1000
    max_epochs = 10
    num_training_batches = 100
    accumulate_grad_batches = 1
    world_size = num_devices = num_nodes = 1
    global_rank = local_rank = current_epoch = global_step = 0


def _defines_optimizers(model: Any) -> bool:
    """Whether ``configure_optimizers`` is defined below Lightning's ``LightningModule`` (either flavour:
    ``lightning.pytorch`` or ``pytorch_lightning``, whose ``is_overridden`` knows only its own)."""
    owner = next((c for c in type(model).__mro__ if "configure_optimizers" in vars(c)), None)
    return owner is not None and not (owner.__name__ == "LightningModule" and owner.__module__.endswith("core.module"))


def _optimizer_class(model: Any) -> str | None:
    """The class path of the first optimizer ``model.configure_optimizers()`` returns (read with
    Lightning's own parser of its return value), or ``None`` when it returns none or cannot run before
    training. One that reads ``self.trainer`` (a scheduler's total steps) runs again with a
    :class:`_StandInTrainer` attached, which is detached after."""
    import warnings

    from lightning.pytorch.core.optimizer import _configure_optimizers

    def first() -> str | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optimizers, _, _ = _configure_optimizers(model.configure_optimizers())
        if not optimizers:
            return None
        kind = type(optimizers[0])
        return f"{kind.__module__}.{kind.__qualname__}"

    try:
        return first()
    except Exception:
        pass
    attached = getattr(model, "_trainer", None)
    try:
        model.trainer = _StandInTrainer()
        return first()
    except Exception:
        return None
    finally:
        model.trainer = attached


def training_length(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The training length the user's config or CLI defaults set: each of ``max_epochs``,
    ``max_steps`` and ``max_time`` (as parsed: ``"DD:HH:MM:SS"``, a mapping of units, or seconds as
    text) whose value is not Lightning's default (:data:`TRAINING_LENGTH_DEFAULTS`); ``{}`` when none is.

    Args:
        trainer: The ``trainer`` settings as the user's LightningCLI parsed them (every key).
    """
    import json

    return {
        key: json.loads(json.dumps(trainer[key], default=str))
        for key, default in TRAINING_LENGTH_DEFAULTS.items()
        if trainer.get(key, default) != default
    }


def _baseline(
    spec: Mapping[str, Any],
    built: Any,
    model_cls: Any,
    data_cls: Any,
    targets: Mapping[str, Any],
    loader: Any,
    unreachable: Mapping[str, str],
) -> dict[str, Any]:
    """The knob values of the model's own config: each knob's value where it is applied (the parsed
    config's for a constructor argument, else the built objects' or the training loader's), the
    loader's own batch size when no knob reaches it, and the trainer's precision and accumulation.

    Raises:
        UsageError: The batch size can be neither set nor read (the message says what was found).
    """
    from autotune.dataloaders import dataloader_batch_size
    from autotune.knob_targets import read_knob
    from autotune.lightning_cli import get_dotted

    model, datamodule = built.model, built.datamodule
    baseline: dict[str, Any] = {}
    for knob, target in targets.items():
        if target.how == "loader":  # (a DataLoader given a BatchSampler has batch_size None: the sampler's)
            baseline[knob] = dataloader_batch_size(loader) if knob == "batch_size" else loader.num_workers
            continue
        parsed = get_dotted(built.config, f"{target.owner}.{target.name}") if target.how == "init" else None
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
    check_trainer_values(trainer_cfg, spec.get("config_file"))
    baseline["precision"] = _canonical_precision(trainer_cfg.get("precision") or "32-true")
    baseline["accumulate_grad_batches"] = int(trainer_cfg.get("accumulate_grad_batches") or 1)
    if baseline.get("num_workers") is None:
        baseline["num_workers"] = getattr(loader, "num_workers", 0) if "num_workers" not in targets else 0
    return baseline


def check_trainer_values(trainer: Mapping[str, Any], config_file: str | None = None) -> None:
    """Refuse the trainer values Lightning's own ``Trainer`` refuses, or divides by, in the user's runs
    although a trial replaces them (``max_steps``, ``max_epochs``: the budget's; an
    ``accumulate_grad_batches`` of 0 read as 1): the search would measure a baseline that is not the
    user's, and export a config their CLI rejects (helper-36: ``max_steps: -5`` searched and exported,
    ``accumulate_grad_batches: 0`` searched as 1).

    Raises:
        UsageError: Naming the key, the value, what Lightning takes, and the file to fix.
    """
    where = f"; fix --config {config_file}" if config_file else ""

    def integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    for key, low, takes in (
        ("accumulate_grad_batches", 1, "an integer >= 1"),
        ("max_steps", -1, "-1 (no limit) or an integer >= 0"),
        ("max_epochs", -1, "-1 (no limit) or an integer >= 0"),
    ):
        value = trainer.get(key)
        if value is not None and (not integer(value) or value < low):
            raise UsageError(f"trainer.{key}: {value!r} is not {takes}, which Lightning's Trainer takes{where}")
    for key in ("limit_train_batches", "limit_val_batches"):
        value = trainer.get(key)
        if value is not None and not (integer(value) and value >= 0) and not (isinstance(value, float) and 0.0 <= value <= 1.0):
            raise UsageError(
                f"trainer.{key}: {value!r} is not a count of batches (an integer >= 0) or a fraction of them (0.0 to 1.0){where}"
            )


def _check_untyped_arguments(model_cls: Any, data_cls: Any, document: Mapping[str, Any]) -> None:
    """Refuse a constructor argument with neither a type annotation nor a default that ``--config``
    does not give: LightningCLI's parser would pass ``None`` for it without a word.

    Raises:
        UsageError: Naming the class, the arguments and the fix.
    """
    import inspect

    from autotune.knob_targets import init_params

    for section, cls in (("model", model_cls), ("data", data_cls)):
        if cls is None:
            continue
        given = document.get(section) or {}
        given = given.get("init_args", given) if isinstance(given, Mapping) else {}
        missing = [
            name
            for name, p in init_params(cls).items()
            if name != "self"
            and p.default is inspect.Parameter.empty
            and p.annotation is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            and name not in given
        ]
        if missing:
            raise UsageError(f"{cls.__name__} needs argument(s) {missing} (no default); give them in a --config YAML under {section}:")


def _train_loader(holder: Any) -> tuple[int | None, Any, str | None]:
    """``(length of the training set, the training loader, why there is none)`` (best effort:
    ``setup("fit")`` then ``train_dataloader()``); ``None`` for what cannot be read."""
    from autotune.loader import defines_hook

    if not defines_hook(holder, "train_dataloader"):
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

    from autotune.knob_targets import init_params

    out = {}
    for name, param in init_params(cls).items():
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

    from autotune.knob_targets import init_params

    def accepts_any(cls: Any) -> bool:
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in init_params(cls).values())

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
                "tensor_dataset_per_sample": _indexes_tensors_one_by_one(loader),
            }
            if isinstance(loader, torch.utils.data.DataLoader)
            else None
        ),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "automatic_optimization": bool(getattr(model, "automatic_optimization", True)),
    }


def _indexes_tensors_one_by_one(loader: Any) -> bool:
    """Whether ``loader`` batches an in-memory ``TensorDataset`` (or a ``Subset`` of one, as
    ``random_split`` gives) by indexing it one sample at a time and stacking the samples: automatic
    batching over a dataset with no ``__getitems__``. Such a loader's data wait is its own per-sample
    indexing and collation, which one fancy-indexing per batch replaces."""
    from torch.utils.data import Subset, TensorDataset

    dataset = loader.dataset
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset) and loader.batch_size is not None and not hasattr(type(dataset), "__getitems__")


def _canonical_precision(value: Any) -> str:
    aliases = {"32": "32-true", 32: "32-true", "16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed", "64": "64-true", 64: "64-true"}
    return aliases.get(value, str(value))
