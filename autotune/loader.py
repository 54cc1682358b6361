"""Loading the user's model file and applying a trial's config to it.

Everything here imports the user's code, torch and Lightning, so it runs only in trial processes
(``autotune.target``); the CLI process checks the file's syntax alone (:func:`check_model_file`).

Where a knob goes, in order (the places Lightning's Tuner looks, plus constructor arguments first
so a value is in place before ``__init__`` builds anything from it):

1. a constructor argument of that name of the DataModule (``batch_size``, ``num_workers``) or the
   LightningModule (all knobs; ``learning_rate`` is accepted for ``lr``);
2. an attribute of that name on the DataModule, then the LightningModule;
3. an entry of ``model.hparams``;
4. for ``batch_size`` and ``num_workers`` only: the training DataLoader itself, rebuilt with the
   trial's values by wrapping the ``train_dataloader`` hook of the object that defines it
   (:func:`loader_targets`, :func:`rebuild_dataloader`), when the batch size is hard-coded there.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from autotune.errors import ModelFileError, UsageError

__all__ = [
    "DATALOADER_KNOBS",
    "KnobTarget",
    "apply_attribute_knobs",
    "build_objects",
    "check_model_file",
    "dataloader_batch_size",
    "dataloader_reach",
    "find_classes",
    "lightning_package",
    "load_user_module",
    "loader_targets",
    "locate_knobs",
    "read_knob",
    "read_user_config",
    "rebuild_dataloader",
]

#: Names under which a knob may appear in user code, in order of preference.
KNOB_ALIASES: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size",),
    "num_workers": ("num_workers",),
    "lr": ("lr", "learning_rate"),
}


def check_model_file(path: str | Path) -> Path:
    """Check, without importing anything, that ``path`` is an existing Python file that compiles.

    Returns:
        The absolute path.

    Raises:
        ModelFileError: Missing, not a ``.py`` file, or a syntax error (message ``file:line: ...``).
    """
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file {str(path)!r} does not exist")
    if path.is_dir() or path.suffix != ".py":
        raise ModelFileError(f"model file {str(path)!r} is not a Python file (.py); point autotune at your model.py")
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        compile(source, str(path), "exec")
    except SyntaxError as e:
        raise ModelFileError(f"{path}:{e.lineno}: syntax error: {e.msg}") from e
    return path.resolve()


def load_user_module(path: str | Path) -> ModuleType:
    """Import the model file as a module, its folder importable, without running its ``__main__`` block.

    The module is registered under the file's stem (so ``pickle`` and sibling imports work), or
    under ``_autotune_user_<stem>`` when that name is taken. A file already imported by this process
    (a warm trial process preloads it, see :mod:`autotune.warm`) is not imported again.

    Raises:
        ModelFileError: The file cannot be imported; the message names the exception and the line.
    """
    path = check_model_file(path)
    if path in _LOADED:
        return _LOADED[path]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = path.stem if path.stem.isidentifier() and path.stem not in sys.modules else f"_autotune_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        sys.modules.pop(name, None)
        raise ModelFileError(
            f'{path} called sys.exit({e.code!r}) when imported; move that call under `if __name__ == "__main__":`'
        ) from None
    except Exception as e:
        sys.modules.pop(name, None)
        line = _user_line(e, path)
        raise ModelFileError(f"importing {path}{line} raised {type(e).__name__}: {e}") from e
    _LOADED[path] = module
    return module


_LOADED: dict[Path, ModuleType] = {}


def _user_line(error: BaseException, path: Path) -> str:
    import traceback

    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if Path(frame.filename).resolve() == path:
            return f":{frame.lineno}"
    return ""


def _lightning_bases() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """LightningModule and LightningDataModule classes of both package flavours that are imported."""
    import lightning.pytorch as lp

    modules: list[type] = [lp.LightningModule]
    datas: list[type] = [lp.LightningDataModule]
    if "pytorch_lightning" in sys.modules:  # only if the user's code imported it
        import pytorch_lightning as ptl

        modules.append(ptl.LightningModule)
        datas.append(ptl.LightningDataModule)
    return tuple(modules), tuple(datas)


def lightning_package(cls: type):
    """``lightning.pytorch`` or ``pytorch_lightning``: the package whose Lightning classes ``cls`` derives from.

    A ``pytorch_lightning`` module must be trained by ``pytorch_lightning.Trainer`` with its callbacks.
    """
    if "pytorch_lightning" in sys.modules:
        import pytorch_lightning as ptl

        if issubclass(cls, (ptl.LightningModule, ptl.LightningDataModule)):
            return ptl
    import lightning.pytorch as lp

    return lp


def _candidates(module: ModuleType, bases: tuple[type, ...], allow_imported: bool = True) -> list[type]:
    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, bases) and obj not in bases and not inspect.isabstract(obj)
    ]
    defined = [c for c in found if c.__module__ == module.__name__]
    return defined or (found if allow_imported else [])


def _choose(kind: str, flag: str, candidates: list[type], name: str | None, path: str) -> type | None:
    names = [c.__name__ for c in candidates]
    if name is not None:
        for c in candidates:
            if c.__name__ == name:
                return c
        raise ModelFileError(f"{path}: no {kind} named {name!r}; found {names or 'none'}")
    if len(candidates) > 1:
        raise ModelFileError(f"{path}: several {kind} classes {names}; choose one with {flag} NAME")
    return candidates[0] if candidates else None


def find_classes(module: ModuleType, model_name: str | None = None, data_name: str | None = None) -> tuple[type, type | None]:
    """The LightningModule and LightningDataModule classes of a user module.

    Classes defined in the module are preferred; classes it only imports count when it defines none
    (an imported DataModule only when the LightningModule has no ``train_dataloader`` of its own).

    Returns:
        ``(model_class, datamodule_class_or_None)``.

    Raises:
        ModelFileError: No LightningModule, several without a choice, or a chosen name not found.
    """
    module_bases, data_bases = _lightning_bases()
    path = getattr(module, "__file__", module.__name__)
    model_cls = _choose("LightningModule", "--model", _candidates(module, module_bases), model_name, path)
    if model_cls is None:
        raise ModelFileError(f"{path}: defines no LightningModule subclass (lightning.pytorch or pytorch_lightning)")
    from lightning.pytorch.utilities.model_helpers import is_overridden

    own_loaders = is_overridden("train_dataloader", model_cls, parent=lightning_package(model_cls).LightningModule)
    data_cls = _choose(
        "LightningDataModule", "--data", _candidates(module, data_bases, data_name is not None or not own_loaders), data_name, path
    )
    return model_cls, data_cls


#: Top-level keys of a LightningCLI config besides the three sections autotune reads.
CLI_EXTRA_KEYS = ("seed_everything", "ckpt_path", "optimizer", "lr_scheduler")


def read_user_config(path: str | Path | None, strict: bool = True) -> dict[str, Any]:
    """Read a LightningCLI-style YAML (``trainer:``, ``model:``, ``data:``) into plain dicts.

    ``model:``/``data:`` may hold plain values or ``class_path``/``init_args``; only ``init_args`` (or
    the plain values) are kept. LightningCLI's other top-level keys (:data:`CLI_EXTRA_KEYS`) are kept
    under ``"extra"`` and copied into the export.

    Args:
        path: The YAML file, or ``None`` (empty sections).
        strict: Refuse top-level keys LightningCLI's own parser does not have (a user's
            ``LightningCLI`` subclass may add its own: then ``False``, and its parser checks them).

    Returns:
        ``{"trainer": {...}, "model": {...}, "data": {...}, "extra": {...}, "document": {...}}``:
        ``document`` is the whole file, as LightningCLI reads it (see :mod:`autotune.lightning_cli`).

    Raises:
        UsageError: Missing file, invalid YAML, an unknown top-level key, or a section that is not
            a mapping.
    """
    empty: dict[str, Any] = {"trainer": {}, "model": {}, "data": {}, "extra": {}, "document": {}}
    if path is None:
        return empty
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}{line}: not valid YAML ({getattr(e, 'problem', None) or type(e).__name__})") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"{path}: expected a mapping with trainer:/model:/data: sections")
    allowed = ("trainer", "model", "data", *CLI_EXTRA_KEYS)
    unknown = sorted(set(data) - set(allowed))
    if unknown and strict:
        raise UsageError(f"{path}: unknown top-level key(s) {unknown}; a LightningCLI config has {list(allowed)}")
    out = dict(empty)
    for section in ("trainer", "model", "data"):
        value = data.get(section) or {}
        if not isinstance(value, Mapping):
            raise UsageError(f"{path}: section {section!r} must be a mapping, got {value!r}")
        if "init_args" in value:
            value = value.get("init_args") or {}
        out[section] = dict(value)
    out["extra"] = {k: data[k] for k in CLI_EXTRA_KEYS if k in data}
    out["document"] = json.loads(json.dumps(data, default=str))  # JSON-ready: stored with the study
    return out


@dataclass(frozen=True)
class KnobTarget:
    """Where one knob is applied in the user's objects.

    Attributes:
        knob: Knob name (``batch_size``, ``num_workers``, ``lr``).
        owner: ``"data"`` (the DataModule) or ``"model"`` (the LightningModule).
        how: ``"init"`` (constructor argument), ``"attr"`` (attribute), ``"hparams"``, or
            ``"loader"`` (the DataLoader the owner's ``train_dataloader`` returns, rebuilt with the
            value: :func:`rebuild_dataloader`).
        name: The argument or attribute name (``lr`` may be ``learning_rate``); for ``"loader"``,
            the DataLoader argument.
    """

    knob: str
    owner: str
    how: str
    name: str

    def to_dict(self) -> dict[str, str]:
        return {"knob": self.knob, "owner": self.owner, "how": self.how, "name": self.name}


def _init_params(cls: type[Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}


def locate_knobs(model_cls: type, data_cls: type | None, model: Any = None, datamodule: Any = None) -> dict[str, KnobTarget]:
    """Find where each loader/module knob can be applied (see the module docstring for the order).

    Args:
        model_cls, data_cls: The user's classes.
        model, datamodule: Instances built with the baseline arguments, for attribute lookups.

    Returns:
        Knob name to :class:`KnobTarget`, for the knobs that can be applied.
    """
    found: dict[str, KnobTarget] = {}
    for knob, aliases in KNOB_ALIASES.items():
        owners = [("data", data_cls, datamodule), ("model", model_cls, model)] if knob != "lr" else [("model", model_cls, model)]
        target = None
        for owner, cls, _obj in owners:
            if cls is None:
                continue
            params = _init_params(cls)
            for alias in aliases:
                if alias in params:
                    target = KnobTarget(knob, owner, "init", alias)
                    break
            if target:
                break
        if target is None:
            for owner, _cls, obj in owners:
                if obj is None:
                    continue
                for alias in aliases:
                    if alias in vars(obj) or isinstance(getattr(type(obj), alias, None), property):
                        target = KnobTarget(knob, owner, "attr", alias)
                        break
                    hparams = getattr(obj, "hparams", None) if owner == "model" else None
                    if hparams is not None and alias in hparams:
                        target = KnobTarget(knob, owner, "hparams", alias)
                        break
                if target:
                    break
        if target is not None:
            found[knob] = target
    return found


def _init_kwargs(cls: type, given: Mapping[str, Any], section: str) -> dict[str, Any]:
    params = _init_params(cls)
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = [k for k in given if k not in params and not accepts_any]
    if unknown:
        raise UsageError(f"{cls.__name__} takes no argument(s) {unknown}; its arguments: {[p for p in params if p != 'self']}")
    missing = [
        name
        for name, p in params.items()
        if name != "self"
        and p.default is inspect.Parameter.empty
        and name not in given
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    if missing:
        raise UsageError(f"{cls.__name__} needs argument(s) {missing} (no default); give them in a --config YAML under {section}:")
    return dict(given)


def apply_attribute_knobs(targets: Mapping[str, KnobTarget], values: Mapping[str, Any], model: Any, datamodule: Any) -> None:
    """Set the knobs that have no constructor argument on built objects: as an attribute, or in
    ``model.hparams`` (see :func:`locate_knobs`). Knobs applied to the DataLoader (``how == "loader"``)
    are left to the wrapped ``train_dataloader`` hook (``autotune.target``)."""
    objects = {"model": model, "data": datamodule}
    for knob, target in targets.items():
        if knob not in values or target.how in ("init", "loader"):
            continue
        obj = objects[target.owner]
        if target.how == "attr":
            setattr(obj, target.name, values[knob])
        else:
            obj.hparams[target.name] = values[knob]


def build_objects(
    model_cls: type,
    data_cls: type | None,
    user_config: Mapping[str, Mapping[str, Any]],
    targets: Mapping[str, KnobTarget],
    values: Mapping[str, Any],
) -> tuple[Any, Any]:
    """Instantiate the user's module (and datamodule) with a trial's knob values applied.

    Args:
        model_cls, data_cls: The user's classes.
        user_config: Output of :func:`read_user_config` (its ``model``/``data`` arguments).
        targets: Output of :func:`locate_knobs`.
        values: Knob name to value; knobs without a target are ignored.

    Returns:
        ``(model, datamodule_or_None)``.
    """
    kwargs = {"model": dict(user_config.get("model", {})), "data": dict(user_config.get("data", {}))}
    for knob, target in targets.items():
        if knob in values and target.how == "init":
            kwargs[target.owner][target.name] = values[knob]
    datamodule = data_cls(**_init_kwargs(data_cls, kwargs["data"], "data")) if data_cls is not None else None
    model = model_cls(**_init_kwargs(model_cls, kwargs["model"], "model"))
    apply_attribute_knobs(targets, values, model, datamodule)
    return model, datamodule


def read_knob(target: KnobTarget, model: Any, datamodule: Any) -> Any:
    """The value a knob has on built objects (the baseline's value), or ``None`` if not readable."""
    obj = model if target.owner == "model" else datamodule
    if obj is None:
        return None
    if hasattr(obj, target.name):
        return getattr(obj, target.name)
    hparams = getattr(obj, "hparams", None)
    if hparams is not None and target.name in hparams:
        return hparams[target.name]
    if target.how == "init":
        param = _init_params(type(obj)).get(target.name)
        if param is not None and param.default is not inspect.Parameter.empty:
            return param.default
    return None


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
        knobs: Knob names of :data:`DATALOADER_KNOBS` that :func:`locate_knobs` did not place.
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
