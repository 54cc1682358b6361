"""Search spaces: YAML files in ``search_spaces/``, validated, then resolved for one model and machine.

A space file maps knob names to either ``choices`` (a list) or a range (``low``, ``high``, and for
numbers ``log`` and ``step``)::

    batch_size:
      choices: [16, 32, 64, 128, 256]
    lr:
      low: 0.1
      high: 10.0
      log: true
      relative: true   # bounds are multiples of the model's own lr
    lr_scaling: sqrt   # optional: lr follows the effective batch size (none | linear | sqrt)

With ``lr_scaling: linear`` or ``sqrt`` the learning rate is tied to the batch size: the sampled
value is a multiplier (Optuna parameter ``lr_multiplier``, bounds from a ``relative: true`` range)
on the baseline's lr scaled by ``effective batch / baseline effective batch`` (linear, Goyal et al.
2017, "Accurate, Large Minibatch SGD") or by its square root (Krizhevsky 2014, "One weird trick";
Hoffer et al. 2017); see :func:`scaled_lr`. The trial config, and so the export, holds the final lr.

Three steps turn a file into what the sampler sees, one module each:

1. :func:`load_space` (this module) validates the file (unknown knobs or keys, wrong types, bad
   ranges and unknown precisions are :class:`~autotune.errors.SpaceError` naming the file, the key
   and the value).
2. :func:`~autotune.space_resolve.resolve_space` makes it concrete for one model on one machine:
   relative bounds become absolute, ``high: auto`` becomes the cores per device, precisions the
   machine does not run natively are removed, knobs the model cannot take are dropped (or are an
   error when the user asked for them), and the baseline's own values are added so the baseline is
   a point of the space.
3. :func:`~autotune.space_params.suggest_config` asks an Optuna trial for each knob and returns a
   :class:`~autotune.config.TrialConfig` (:func:`~autotune.space_params.params_of` goes back).

The knobs themselves (names, types, how each reads and sets a config) are in :mod:`autotune.knobs`.
This module also re-exports the public names of the other three, so ``from autotune.space import ...`` keeps
working for each of them.

The resolved space is plain JSON; it is stored with the study so every later run samples the same
distributions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.config import COMPILE_MODES, MATMUL_PRECISIONS, PRECISIONS, STRATEGIES
from autotune.errors import SpaceError, did_you_mean, file_hint
from autotune.knobs import (
    ARG_SECTIONS,
    EXTENDED_KNOBS,
    KNOB_TYPES,
    LR_SCALINGS,
    knob_type,
    knob_value,
    user_arg,
    with_knobs,
)
from autotune.space_params import (
    baseline_params,
    distributions,
    param_name,
    params_of,
    scaled_lr,
    suggest_config,
)
from autotune.space_resolve import baseline_for_space, resolve_space

__all__ = [
    "ARG_SECTIONS",
    "EXTENDED_KNOBS",
    "KNOB_TYPES",
    "LR_SCALINGS",
    "KnobSpec",
    "Space",
    "baseline_for_space",
    "baseline_params",
    "default_space_path",
    "distributions",
    "find_space",
    "knob_type",
    "knob_value",
    "load_space",
    "param_name",
    "params_of",
    "parse_space",
    "resolve_space",
    "scaled_lr",
    "suggest_config",
    "user_arg",
    "with_knobs",
]

#: The allowed values of each string (or mixed) knob.
_ALLOWED = {
    "precision": PRECISIONS,
    "strategy": STRATEGIES,
    "compile": (False, True, *COMPILE_MODES),
    "float32_matmul_precision": MATMUL_PRECISIONS,
}
_MINIMUM = {"batch_size": 1, "accumulate_grad_batches": 1, "num_workers": 0, "devices": 1, "prefetch_factor": 1}
_CHOICE_KEYS = {"choices"}
_RANGE_KEYS = {"low", "high", "log", "step", "relative"}


class Space(dict[str, "KnobSpec"]):
    """Knob name to :class:`KnobSpec` (a dict), plus the space's options.

    Attributes:
        lr_scaling: ``"none"``, ``"linear"`` or ``"sqrt"`` (see the module docstring).
    """

    lr_scaling: str = "none"


@dataclass(frozen=True)
class KnobSpec:
    """One knob of a space file, validated but not yet resolved.

    Attributes:
        name: Knob name, a key of :data:`KNOB_TYPES`.
        choices: The allowed values, or ``None`` for a range.
        low: Lower bound of a range (inclusive); a multiplier when ``relative``.
        high: Upper bound (inclusive); ``"auto"`` for ``num_workers`` means the cores per device.
        log: Sample the range on a log scale.
        step: Grid step of an integer range (``None``: 1).
        relative: ``lr`` only: bounds multiply the model's own learning rate.
    """

    name: str
    choices: tuple | None = None
    low: float | int | None = None
    high: float | int | str | None = None
    log: bool = False
    step: int | None = None
    relative: bool = False


def parse_space(data: Any, source: str = "<space>") -> Space:
    """Validate a parsed space mapping.

    Args:
        data: The YAML document, a mapping of knob name to its spec.
        source: Where it came from, for error messages (a file path).

    Returns:
        Knob name to :class:`KnobSpec`, in file order (a :class:`Space`, with its ``lr_scaling``).

    Raises:
        SpaceError: Unknown knob or key, wrong type, empty choices, ``low > high``, a value below the
            knob's minimum, ``log`` with ``low <= 0``, or an unknown precision.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SpaceError(f"{source}: a space must be a mapping of knob names to specs, got {type(data).__name__}")
    data = dict(data)
    lr_scaling = data.pop("lr_scaling", "none")
    if lr_scaling not in LR_SCALINGS:
        raise SpaceError(f"{source}: lr_scaling must be one of {list(LR_SCALINGS)}, got {lr_scaling!r}")
    if not data:
        raise SpaceError(f"{source}: the space names no knob; give at least one of {sorted(KNOB_TYPES)}")
    space = Space()
    space.lr_scaling = lr_scaling
    for name, spec in data.items():
        space[name] = _parse_knob(name, spec, source)
    if lr_scaling != "none" and "lr" in space and not space["lr"].relative:
        raise SpaceError(
            f"{source}: lr_scaling: {lr_scaling} makes lr a multiplier of the scaled baseline lr; "
            "give lr as a range with relative: true (e.g. low: 0.5, high: 2.0)"
        )
    return space


def _parse_knob(name: Any, spec: Any, source: str) -> KnobSpec:
    """One knob of a space file: its name checked, then its ``choices`` or its range."""
    if not isinstance(name, str) or (name not in KNOB_TYPES and user_arg(name) is None):
        import difflib

        close = difflib.get_close_matches(str(name), list(KNOB_TYPES), n=1)
        raise SpaceError(
            f"{source}: unknown knob {name!r}{f' (did you mean {close[0]!r}?)' if close else ''}; known knobs: "
            f"{sorted(KNOB_TYPES)}, or model.<argument> / data.<argument> for a constructor argument of your "
            "LightningModule / LightningDataModule"
        )
    kind = KNOB_TYPES.get(name, object)
    where = f"{name}"
    if isinstance(spec, list):  # shorthand: `knob: [a, b]` is `knob: {choices: [a, b]}`
        spec = {"choices": spec}
    if not isinstance(spec, Mapping):
        raise SpaceError(f"{source}: {where} must be a mapping with 'choices' or 'low'/'high', got {spec!r}")
    keys = set(spec)
    unknown = keys - _CHOICE_KEYS - _RANGE_KEYS
    if unknown:
        import difflib

        allowed = sorted(_CHOICE_KEYS | _RANGE_KEYS)
        close = [m for key in sorted(map(str, unknown)) for m in difflib.get_close_matches(key, allowed, n=1)]
        hint = f" (did you mean {close[0]!r}?)" if len(close) == 1 and len(unknown) == 1 else ""
        raise SpaceError(f"{source}: {where} has unknown key(s) {sorted(unknown)}{hint}; allowed: {allowed}")
    if "choices" in keys:
        if keys - {"choices"}:
            raise SpaceError(f"{source}: {where} has 'choices' and also {sorted(keys - {'choices'})}; use one form")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{source}: {where}.choices must be a non-empty list, got {choices!r}")
        for value in choices:
            _check_value(source, f"{where}.choices", name, kind, value)
        return KnobSpec(name=name, choices=tuple(dict.fromkeys(choices)))
    if kind in (str, bool):
        example = list(_ALLOWED[name][:2]) if name in _ALLOWED else [False, True]
        raise SpaceError(f"{source}: {where} takes 'choices' (a list), not a range; e.g. choices: {example}")
    if kind is object:  # a constructor argument given as a range: a number (its type checked against the signature later)
        kind = float if any(isinstance(spec.get(k), float) for k in ("low", "high")) else int
    return _parse_range(name, spec, kind, source)


def _parse_range(name: str, spec: Mapping[str, Any], kind: type, source: str) -> KnobSpec:
    """A numeric knob given as ``low``/``high`` (with ``log``, ``step``, ``relative``), validated."""
    where = f"{name}"
    keys = set(spec)
    if "low" not in keys or "high" not in keys:
        raise SpaceError(f"{source}: {where} needs 'choices', or both 'low' and 'high'; got keys {sorted(keys)}")
    low, high = spec["low"], spec["high"]
    relative = spec.get("relative", False)
    log = spec.get("log", False)
    step = spec.get("step")
    for flag, value in (("log", log), ("relative", relative)):
        if not isinstance(value, bool):
            raise SpaceError(f"{source}: {where}.{flag} must be true or false, got {value!r}")
    if relative and name != "lr":
        raise SpaceError(f"{source}: {where}.relative is only allowed for lr")
    _check_number(source, f"{where}.low", low, float if relative else kind)
    if high == "auto":
        if name != "num_workers":
            raise SpaceError(f"{source}: {where}.high: 'auto' is only allowed for num_workers")
    else:
        _check_number(source, f"{where}.high", high, float if relative else kind)
        if low > high:
            raise SpaceError(f"{source}: {where}: low {low!r} is greater than high {high!r}; swap them (low: {high!r}, high: {low!r})")
    if not relative:
        _check_value(source, f"{where}.low", name, kind, low)
    elif low <= 0:
        raise SpaceError(f"{source}: {where}.low must be > 0 for a relative range, got {low!r}")
    if log and low <= 0:
        raise SpaceError(f"{source}: {where}: log: true needs low > 0, got {low!r}")
    if step is not None:
        if kind is not int:
            raise SpaceError(f"{source}: {where}.step is only allowed for integer knobs")
        _check_number(source, f"{where}.step", step, int)
        if step < 1 or log:
            raise SpaceError(f"{source}: {where}.step must be >= 1 and cannot be combined with log, got {step!r}")
    return KnobSpec(name=name, low=low, high=high, log=log, step=step, relative=relative)


def _check_number(source: str, key: str, value: Any, kind: type) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        ok = ok or isinstance(value, float)
    if not ok:
        raise SpaceError(f"{source}: {key} must be {'a number' if kind is float else 'an integer'}, got {value!r}")


#: Lightning's short precision names and the full ones they stand for (``Trainer(precision=...)``).
_SHORT_PRECISIONS = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}


def _check_value(source: str, key: str, name: str, kind: type, value: Any) -> None:
    if name in _ALLOWED:
        allowed = _ALLOWED[name]
        if not any(value is a if isinstance(a, bool) or isinstance(value, bool) else value == a for a in allowed):
            what = "precision" if name == "precision" else "value"
            # Lightning's short names (32, "16", "bf16") are one of the full ones: name it (helper-28 wrote "32")
            full = _SHORT_PRECISIONS.get(str(value)) if name == "precision" else None
            hint = f" (Lightning's short name for {full!r}: write {full!r})" if full else ""
            raise SpaceError(f"{source}: {key}: unknown {what} {value!r}{hint}; allowed: {list(allowed)}")
        return
    if kind is bool:
        if not isinstance(value, bool):
            raise SpaceError(f"{source}: {key}: {name} takes true or false, got {value!r}")
        return
    if kind is object:  # a constructor argument: any scalar; its type is checked against the signature
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise SpaceError(f"{source}: {key}: a constructor argument's choices must be numbers, strings, booleans or null, got {value!r}")
        return
    _check_number(source, key, value, kind)
    minimum = _MINIMUM.get(name)
    if minimum is not None and value < minimum:
        raise SpaceError(f"{source}: {key}: {value!r} is below the minimum {minimum} for {name}")
    if name == "lr" and value <= 0:
        raise SpaceError(f"{source}: {key}: lr must be > 0, got {value!r}")


def load_space(path: str | Path) -> Space:
    """Read and validate a space YAML file.

    Raises:
        SpaceError: The file is missing, is not valid YAML, or fails :func:`parse_space`.
    """
    path = Path(path)
    if not path.is_file():
        raise SpaceError(f"space file {str(path)!r} does not exist; give a YAML file such as {str(default_space_path())!r}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SpaceError(f"{path}{line}: not valid YAML ({getattr(e, 'problem', e)})") from e
    return parse_space(data, str(path))


def _spaces_dirs() -> list[Path]:
    import sys

    return [
        Path(__file__).resolve().parent.parent / "search_spaces",  # source checkout / editable install
        Path(sys.prefix) / "share" / "autotune" / "search_spaces",  # wheel install (data-files)
    ]


def default_space_path() -> Path:
    """Path of the bundled ``search_spaces/default.yaml``."""
    return find_space("default")


def find_space(name_or_path: str | Path) -> Path:
    """A space file path: an existing path as given, else a bundled space by name (``"default"``).

    Raises:
        SpaceError: Neither a file nor a bundled space name.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    for folder in _spaces_dirs():
        candidate = folder / f"{path.stem}.yaml"
        if path.suffix in ("", ".yaml") and candidate.is_file() and str(path.parent) == ".":
            return candidate
    bundled = sorted({p.stem for d in _spaces_dirs() if d.is_dir() for p in d.glob("*.yaml")})
    hint = file_hint(path) if path.suffix else ""  # a file of the user's, mistyped
    if not hint and str(path.parent) == "." and path.suffix in ("", ".yaml"):  # a bundled name, mistyped ("extnded")
        hint = did_you_mean(path.stem, bundled)
    raise SpaceError(f"space file {str(name_or_path)!r} does not exist{hint}; give a path or one of the bundled spaces {bundled}")
