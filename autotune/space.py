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

Three steps turn a file into what the sampler sees:

1. :func:`load_space` validates the file (unknown knobs or keys, wrong types, bad ranges and unknown
   precisions are :class:`~autotune.errors.SpaceError` naming the file, the key and the value).
2. :func:`resolve_space` makes it concrete for one model on one machine: relative bounds become
   absolute, ``high: auto`` becomes the cores per device, precisions the machine does not run natively
   are removed, knobs the model cannot take are dropped (or are an error when the user asked for them),
   and the baseline's own values are added so the baseline is a point of the space.
3. :func:`suggest_config` asks an Optuna trial for each knob and returns a
   :class:`~autotune.config.TrialConfig`.

The resolved space is plain JSON; it is stored with the study so every later run samples the same
distributions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from autotune.config import PRECISIONS, TrialConfig
from autotune.errors import SpaceError
from autotune.hardware import Hardware, cores_per_device, unsupported_precisions

__all__ = [
    "KnobSpec",
    "KNOB_TYPES",
    "load_space",
    "parse_space",
    "resolve_space",
    "suggest_config",
    "distributions",
    "default_space_path",
    "find_space",
    "Space",
    "LR_SCALINGS",
    "scaled_lr",
]

#: Values of the space option ``lr_scaling``.
LR_SCALINGS = ("none", "linear", "sqrt")


class Space(dict):
    """Knob name to :class:`KnobSpec` (a dict), plus the space's options.

    Attributes:
        lr_scaling: ``"none"``, ``"linear"`` or ``"sqrt"`` (see the module docstring).
    """

    lr_scaling: str = "none"


def scaled_lr(base_lr: float, multiplier: float, effective_batch: int, base_effective_batch: int, scaling: str) -> float:
    """The learning rate of a trial under ``lr_scaling``.

    ``lr = base_lr * multiplier * r`` with ``r = effective_batch / base_effective_batch`` for
    ``"linear"`` (Goyal et al. 2017), ``sqrt(r)`` for ``"sqrt"`` (Krizhevsky 2014; Hoffer et al.
    2017), ``1`` for ``"none"``.

    Args:
        base_lr: The baseline's lr (``> 0``).
        multiplier: The sampled multiplier (``> 0``); 1 reproduces the scaling rule exactly.
        effective_batch: The trial's batch size x accumulation x devices x nodes (``>= 1``).
        base_effective_batch: The baseline's (``>= 1``).
        scaling: One of :data:`LR_SCALINGS`.

    Raises:
        ValueError: Unknown ``scaling``.
    """
    ratio = effective_batch / base_effective_batch
    if scaling == "linear":
        factor = ratio
    elif scaling == "sqrt":
        factor = ratio**0.5
    elif scaling == "none":
        factor = 1.0
    else:
        raise ValueError(f"unknown lr_scaling {scaling!r}; choose one of {list(LR_SCALINGS)}")
    return base_lr * multiplier * factor

#: Every knob a space may name, with its value type.
KNOB_TYPES: dict[str, type] = {
    "batch_size": int,
    "precision": str,
    "accumulate_grad_batches": int,
    "num_workers": int,
    "lr": float,
}
_MINIMUM = {"batch_size": 1, "accumulate_grad_batches": 1, "num_workers": 0}
_CHOICE_KEYS = {"choices"}
_RANGE_KEYS = {"low", "high", "log", "step", "relative"}


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


def _check_number(source: str, key: str, value: Any, kind: type) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        ok = ok or isinstance(value, float)
    if not ok:
        raise SpaceError(f"{source}: {key} must be {'a number' if kind is float else 'an integer'}, got {value!r}")


def parse_space(data: Any, source: str = "<space>") -> dict[str, KnobSpec]:
    """Validate a parsed space mapping.

    Args:
        data: The YAML document, a mapping of knob name to its spec.
        source: Where it came from, for error messages (a file path).

    Returns:
        Knob name to :class:`KnobSpec`, in file order.

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
        if name not in KNOB_TYPES:
            raise SpaceError(f"{source}: unknown knob {name!r}; known knobs: {sorted(KNOB_TYPES)}")
        kind = KNOB_TYPES[name]
        where = f"{name}"
        if not isinstance(spec, Mapping):
            raise SpaceError(f"{source}: {where} must be a mapping with 'choices' or 'low'/'high', got {spec!r}")
        keys = set(spec)
        unknown = keys - _CHOICE_KEYS - _RANGE_KEYS
        if unknown:
            raise SpaceError(
                f"{source}: {where} has unknown key(s) {sorted(unknown)}; allowed: {sorted(_CHOICE_KEYS | _RANGE_KEYS)}"
            )
        if "choices" in keys:
            if keys - {"choices"}:
                raise SpaceError(f"{source}: {where} has 'choices' and also {sorted(keys - {'choices'})}; use one form")
            choices = spec["choices"]
            if not isinstance(choices, list) or not choices:
                raise SpaceError(f"{source}: {where}.choices must be a non-empty list, got {choices!r}")
            for value in choices:
                _check_value(source, f"{where}.choices", name, kind, value)
            space[name] = KnobSpec(name=name, choices=tuple(dict.fromkeys(choices)))
            continue
        if kind is str:
            raise SpaceError(f"{source}: {where} takes 'choices' (a list), not a range; e.g. choices: {list(PRECISIONS[1:3])}")
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
                raise SpaceError(f"{source}: {where}: low {low!r} is greater than high {high!r}")
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
        space[name] = KnobSpec(name=name, low=low, high=high, log=log, step=step, relative=relative)
    if lr_scaling != "none" and "lr" in space and not space["lr"].relative:
        raise SpaceError(f"{source}: lr_scaling: {lr_scaling} makes lr a multiplier of the scaled baseline lr; "
                         "give lr as a range with relative: true (e.g. low: 0.5, high: 2.0)")
    return space


def _check_value(source: str, key: str, name: str, kind: type, value: Any) -> None:
    if kind is str:
        if value not in PRECISIONS:
            raise SpaceError(f"{source}: {key}: unknown precision {value!r}; allowed: {list(PRECISIONS)}")
        return
    _check_number(source, key, value, kind)
    minimum = _MINIMUM.get(name)
    if minimum is not None and value < minimum:
        raise SpaceError(f"{source}: {key}: {value!r} is below the minimum {minimum} for {name}")
    if name == "lr" and value <= 0:
        raise SpaceError(f"{source}: {key}: lr must be > 0, got {value!r}")


def load_space(path: str | Path) -> dict[str, KnobSpec]:
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
    raise SpaceError(f"space file {str(name_or_path)!r} does not exist; give a path or one of the bundled spaces {bundled}")


def resolve_space(
    space: Mapping[str, KnobSpec],
    *,
    baseline: TrialConfig,
    hardware: Hardware,
    applicable: Mapping[str, bool],
    explicit: bool,
    source: str = "<space>",
    train_samples: int | None = None,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Make a validated space concrete for one model on one machine.

    Args:
        space: Output of :func:`parse_space`.
        baseline: The model's own config (trial 0); its values are added to every knob's range.
        hardware: The machine the trials run on.
        applicable: Knob name to whether the model exposes it (see ``autotune.target``).
        explicit: The user chose this space (``--space``): an inapplicable knob is then an error,
            otherwise it is dropped with a note.
        source: The space file, for messages.
        train_samples: Size of the training set, if known: batch sizes above it per device are
            removed (their first batch could not have the batch size).

    Returns:
        ``(resolved, notes)``: knob name to ``{"choices": [...]}`` or
        ``{"low", "high", "log", "step"}`` with absolute values (JSON-serialisable), and one line
        per change made (printed as warnings). Under ``lr_scaling`` the ``lr`` entry holds
        multipliers (1 included) and ``"scaling"``; it is there even when the file names no lr.

    Raises:
        SpaceError: ``explicit`` and a knob cannot be applied to this model, or no precision is left.
    """
    resolved: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    removed_precisions = unsupported_precisions(hardware)
    worker_cap = cores_per_device(hardware, baseline.devices)
    lr_scaling = getattr(space, "lr_scaling", "none")
    if lr_scaling != "none":
        if not applicable.get("lr", False) or baseline.lr is None:
            raise SpaceError(f"{source}: lr_scaling: {lr_scaling} needs a model with an lr (or learning_rate) argument; remove lr_scaling")
        if "lr" not in space:
            space = {**space, "lr": KnobSpec(name="lr", choices=(1.0,))}
    for name, spec in space.items():
        if name == "lr" and lr_scaling != "none":
            if spec.choices is not None:
                entry = {"choices": sorted(set(map(float, spec.choices)) | {1.0})}
            else:
                entry = {"low": float(min(spec.low, 1.0)), "high": float(max(spec.high, 1.0)), "log": spec.log}
            resolved[name] = {**entry, "scaling": lr_scaling}
            continue
        if not applicable.get(name, False):
            message = f"{source}: knob {name!r} cannot be applied to this model (see the README: where autotune looks for {name})"
            if explicit:
                raise SpaceError(message + "; remove it from the space or expose it as a constructor argument")
            notes.append(f"dropped {name!r}: the model exposes no {name} argument or attribute")
            continue
        base_value = getattr(baseline, name)
        if spec.choices is not None:
            choices = list(spec.choices)
            if name == "precision":
                kept = [c for c in choices if c not in removed_precisions]
                for c in choices:
                    if c in removed_precisions:
                        notes.append(f"removed precision {c!r}: {removed_precisions[c]}")
                choices = kept
            if name == "batch_size" and train_samples:
                per_device = train_samples // baseline.world_size
                fitting = [c for c in choices if c <= per_device]
                if len(fitting) < len(choices):
                    notes.append(f"removed batch sizes {[c for c in choices if c > per_device]}: the training set has {train_samples} samples ({per_device} per device)")
                choices = fitting
            if name == "num_workers":
                capped = [c for c in choices if c <= worker_cap]
                if len(capped) < len(choices):
                    notes.append(f"num_workers capped at {worker_cap} (CPU cores per device)")
                choices = capped
            if base_value not in choices:
                choices.append(base_value)
            if name != "precision":
                choices.sort()
            resolved[name] = {"choices": choices}
            continue
        low, high = spec.low, spec.high
        if spec.relative:
            low, high = base_value * low, base_value * high
        if high == "auto":
            high = worker_cap
        elif name == "num_workers" and high > worker_cap:
            notes.append(f"num_workers capped at {worker_cap} (CPU cores per device), not {high}")
            high = worker_cap
        if name == "batch_size" and train_samples and high > train_samples // baseline.world_size:
            notes.append(f"batch_size capped at {train_samples // baseline.world_size}: the training set has {train_samples} samples")
            high = train_samples // baseline.world_size
        low, high = min(low, base_value), max(high, base_value)
        if KNOB_TYPES[name] is int:
            low, high = int(low), int(high)
        else:
            low, high = float(low), float(high)
        entry: dict[str, Any] = {"low": low, "high": high, "log": spec.log}
        if spec.step is not None:
            entry["step"] = spec.step
        if low == high:
            resolved[name] = {"choices": [low]}
        else:
            resolved[name] = entry
    return resolved, notes


def distributions(resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Optuna distributions of a resolved space (for ``study.ask(fixed_distributions)``)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for name, entry in resolved.items():
        name = param_name(name, entry)
        if "choices" in entry:
            out[name] = CategoricalDistribution(list(entry["choices"]))
        elif KNOB_TYPES[name] is int:
            out[name] = IntDistribution(entry["low"], entry["high"], log=entry.get("log", False), step=entry.get("step") or 1)
        else:
            out[name] = FloatDistribution(entry["low"], entry["high"], log=entry.get("log", False))
    return out


def suggest_config(trial: Any, resolved: Mapping[str, Mapping[str, Any]], baseline: TrialConfig) -> TrialConfig:
    """Ask an Optuna trial for every knob of ``resolved``; knobs outside it keep the baseline's value.

    Args:
        trial: An ``optuna.Trial`` (from ``study.ask()``).
        resolved: Output of :func:`resolve_space`.
        baseline: Values of the knobs the space does not search.

    Returns:
        The trial's :class:`TrialConfig`.
    """
    values: dict[str, Any] = {}
    for name, entry in resolved.items():
        key = param_name(name, entry)
        if "choices" in entry:
            values[name] = trial.suggest_categorical(key, list(entry["choices"]))
        elif KNOB_TYPES[name] is int:
            values[name] = trial.suggest_int(key, entry["low"], entry["high"], log=entry.get("log", False), step=entry.get("step") or 1)
        else:
            values[name] = trial.suggest_float(key, entry["low"], entry["high"], log=entry.get("log", False))
    lr_entry = resolved.get("lr", {})
    if "scaling" in lr_entry:
        multiplier = values.pop("lr")
        config = baseline.replace(**values)
        return config.replace(lr=scaled_lr(baseline.lr, multiplier, config.effective_batch_size, baseline.effective_batch_size, lr_entry["scaling"]))
    return baseline.replace(**values)


def param_name(name: str, entry: Mapping[str, Any]) -> str:
    """The Optuna parameter of a resolved knob: ``lr_multiplier`` for an lr under ``lr_scaling``."""
    return "lr_multiplier" if name == "lr" and "scaling" in entry else name


def params_of(config: TrialConfig, resolved: Mapping[str, Mapping[str, Any]], baseline: TrialConfig, source: str = "<config>") -> dict[str, Any]:
    """The Optuna parameters that make :func:`suggest_config` return ``config`` (for ``enqueue_trial``).

    Raises:
        SpaceError: A searched value lies outside the space, or a knob the space does not search
            differs from the baseline's value (it could not be applied).
    """
    params: dict[str, Any] = {}
    for name in KNOB_TYPES:
        value = getattr(config, name)
        if name not in resolved:
            if value != getattr(baseline, name):
                raise SpaceError(f"{source}: {name} = {value!r}, but the space does not search {name} (every trial uses "
                                 f"{getattr(baseline, name)!r}); add {name} to the space or drop it from the file")
            continue
        entry = resolved[name]
        key = param_name(name, entry)
        if "scaling" in entry:
            value = value / scaled_lr(baseline.lr, 1.0, config.effective_batch_size, baseline.effective_batch_size, entry["scaling"])
            if "choices" in entry:  # a float multiplier: match a choice up to rounding
                close = [c for c in entry["choices"] if abs(c - value) <= 1e-9 * max(1.0, abs(c))]
                value = close[0] if close else value
        if "choices" in entry:
            if value not in entry["choices"]:
                raise SpaceError(f"{source}: {key} = {value!r} is not one of the space's choices {list(entry['choices'])}; "
                                 "add it to the space or change the file")
        elif not entry["low"] <= value <= entry["high"]:
            raise SpaceError(f"{source}: {key} = {value!r} is outside the space's range {entry['low']}..{entry['high']}; "
                             "widen the space or change the file")
        params[key] = value
    return params


def baseline_params(resolved: Mapping[str, Any], baseline: TrialConfig) -> dict[str, Any]:
    """The baseline's values of the searched knobs (what ``study.enqueue_trial`` takes)."""
    return {param_name(name, entry): (1.0 if param_name(name, entry) != name else getattr(baseline, name)) for name, entry in resolved.items()}

