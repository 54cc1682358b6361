"""Loading the user's model file: importing it, finding its Lightning classes, reading its config.

Everything here but :func:`check_model_file` and :func:`read_user_config` imports the user's code,
torch or Lightning, so it runs only in trial processes (``autotune.target``); the CLI process checks
the file's syntax alone (:func:`check_model_file`). Where a trial's knobs go in the user's objects is
:mod:`autotune.knob_targets`; the training DataLoader, :mod:`autotune.dataloaders`.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from autotune.errors import ModelFileError, UsageError, file_hint

__all__ = [
    "check_model_file",
    "defines_hook",
    "find_classes",
    "lightning_package",
    "load_user_module",
    "read_user_config",
    "user_frame",
]


def check_model_file(path: str | Path) -> Path:
    """Check, without importing anything, that ``path`` is an existing Python file that compiles.

    Returns:
        The absolute path.

    Raises:
        ModelFileError: Missing, not a ``.py`` file, or a syntax error (message ``file:line: ...``).
    """
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file {str(path)!r} does not exist{file_hint(path)}")
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


def user_frame(error: BaseException) -> tuple[str, int, str] | None:
    """Where the user's code raised ``error``: the innermost frame of its traceback outside the
    standard library, installed packages (site-packages) and autotune.

    Returns:
        ``(file, line, function)`` (the function's qualified name, ``Class.__init__``, on Python
        3.11+), or ``None`` when no frame of the traceback is the user's (a library's own error,
        such as LightningCLI refusing a config value).
    """
    import sysconfig
    import traceback

    libraries = {Path(__file__).resolve().parent}  # autotune itself
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if sysconfig.get_paths().get(key):
            libraries.add(Path(sysconfig.get_paths()[key]).resolve())
    for frame, lineno in reversed(list(traceback.walk_tb(error.__traceback__))):
        filename = frame.f_code.co_filename
        if filename.startswith("<") or "site-packages" in filename or "dist-packages" in filename:
            continue
        path = Path(filename).resolve()
        if any(path.is_relative_to(folder) for folder in libraries):
            continue
        return filename, lineno, getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return None


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


def defines_hook(holder: Any, hook: str) -> bool:
    """Whether the user's LightningModule or LightningDataModule ``holder`` defines ``hook`` itself
    (of either Lightning package)."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    pl = lightning_package(type(holder))
    parent = pl.LightningDataModule if isinstance(holder, pl.LightningDataModule) else pl.LightningModule
    return is_overridden(hook, holder, parent=parent)


def _candidates(module: ModuleType, bases: tuple[type, ...], allow_imported: bool = True) -> list[type]:
    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, bases) and obj not in bases and not inspect.isabstract(obj)
    ]
    defined = [c for c in found if c.__module__ == module.__name__]
    return defined or (found if allow_imported else [])


def _choose(kind: str, flag: str, candidates: list[type], name: str | None, path: str) -> type | None:
    import difflib

    names = [c.__name__ for c in candidates]
    if name is not None:
        for c in candidates:
            if c.__name__ == name:
                return c
        near = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {flag} {near[0]}?" if near else ""
        raise ModelFileError(f"{path}: no {kind} named {name!r}; found {names or 'none'}{hint}")
    if len(candidates) > 1:
        raise ModelFileError(f"{path}: several {kind} classes {names}; choose one with {flag} NAME")
    return candidates[0] if candidates else None


def find_classes(
    module: ModuleType,
    model_name: str | None = None,
    data_name: str | None = None,
    script: ModuleType | None = None,
    script_data: str | None = None,
) -> tuple[type, type | None]:
    """The LightningModule and LightningDataModule classes of a user module.

    Classes defined in the module are preferred; classes it only imports count when it defines none
    (an imported DataModule only when the LightningModule has no ``train_dataloader`` of its own).
    When the module holds no DataModule at all, those ``script`` (the user's LightningCLI script, another
    file of the folder) defines or imports count, ``script_data`` (the class its ``LightningCLI(...)``
    call passes) first: a project whose ``main.py`` runs ``CLI(Model, Data)`` with ``Data`` in
    ``data.py``, searched as ``autotune search model.py --config config.yaml`` (helper-34).

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
    candidates = _candidates(module, data_bases, data_name is not None or not own_loaders)
    if not candidates and script is not None and (data_name is not None or not own_loaders):
        candidates = _candidates(script, data_bases)
        path = f"{path} and {getattr(script, '__file__', script.__name__)} (its LightningCLI script, with what it imports)"
        if data_name is None and len(candidates) > 1 and script_data in [c.__name__ for c in candidates]:
            data_name = script_data
    data_cls = _choose("LightningDataModule", "--data", candidates, data_name, path)
    return model_cls, data_cls


#: Top-level keys of a ``fit`` config that are arguments of ``Trainer.fit`` itself (LightningCLI's
#: ``fit`` subcommand adds them, and writes them into the config it saves: ``ckpt_path: null``,
#: ``weights_only: null`` in Lightning 2.6). A trial trains from scratch and its parser has no
#: subcommand, so they are left out of a trial's config and kept in the export.
FIT_KEYS = ("ckpt_path", "weights_only")

#: Top-level keys of a LightningCLI config besides the three sections autotune reads.
CLI_EXTRA_KEYS = ("seed_everything", *FIT_KEYS, "optimizer", "lr_scheduler")
#: The top-level keys of a LightningCLI config (a user's CLI may add its own).
CLI_TOP_KEYS = ("trainer", "model", "data", *CLI_EXTRA_KEYS)


#: What a search space given as ``--config`` is told (:func:`looks_like_space`).
SPACE_AS_CONFIG = "looks like a search space (knobs with choices or low/high), not a LightningCLI config: pass it with --space"


def looks_like_space(document: Mapping[str, Any]) -> bool:
    """Whether a config's every top-level value is a knob's range (``choices``, or ``low`` and ``high``):
    a search space file given as ``--config`` (helper-31)."""
    return bool(document) and all(isinstance(v, Mapping) and ("choices" in v or {"low", "high"} <= set(v)) for v in document.values())


def top_key_hint(keys: Sequence[str]) -> str:
    """``" (did you mean 'lr_scheduler'?)"`` (one key) or ``" (did you mean 'lr_scheduler' for 'lr_schedulr', ...)"``: the closest LightningCLI top-level key
    (:data:`CLI_TOP_KEYS`, :func:`difflib.get_close_matches`) to each of ``keys`` that has one, or ``""``."""
    import difflib

    hints = [(key, close[0]) for key in keys if (close := difflib.get_close_matches(str(key), CLI_TOP_KEYS, n=1))]
    if len(keys) == 1 and hints:
        return f" (did you mean {hints[0][1]!r}?)"
    return f" (did you mean {', '.join(f'{near!r} for {key!r}' for key, near in hints)}?)" if hints else ""


def _no_space_after_colon(text: str, error_line: int | None) -> str:
    """A hint naming the line, the YAML error's (0-based ``error_line``) or the one before, that reads
    ``key:value`` with no space after the colon: YAML reads it as one string, and the error is
    reported a line later (``mapping values are not allowed here``). ``""`` when there is none."""
    if error_line is None:
        return ""
    lines = text.splitlines()
    for number in (error_line, error_line - 1):  # the scalar runs on into the next line, where YAML stops
        found = re.match(r"^\s*(-\s+)?([A-Za-z_][\w.]*):(?![\s/])(\S.*)$", lines[number]) if 0 <= number < len(lines) else None
        if found:
            key, value = found.group(2), found.group(3).strip()
            return f"; line {number + 1} reads {key}:{value} with no space after the colon: write {key}: {value}"
    return ""


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
        raise UsageError(f"config file {str(path)!r} does not exist{file_hint(path)}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        hint = _no_space_after_colon(path.read_text(), mark.line if mark is not None else None)
        raise UsageError(f"{path}{line}: not valid YAML ({getattr(e, 'problem', None) or type(e).__name__}){hint}") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"{path}: expected a mapping with trainer:/model:/data: sections")
    allowed = CLI_TOP_KEYS
    unknown = sorted(set(data) - set(allowed))
    if unknown and strict and looks_like_space(data):
        raise UsageError(f"--config {path} {SPACE_AS_CONFIG}")
    if unknown and strict:
        raise UsageError(f"{path}: unknown top-level key(s) {unknown}{top_key_hint(unknown)}; a LightningCLI config has {list(allowed)}")
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
