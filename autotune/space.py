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

from autotune.config import (
    COMPILE_MODES,
    MATMUL_PRECISIONS,
    PRECISIONS,
    STRATEGIES,
    TrialConfig,
)
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
    "EXTENDED_KNOBS",
    "user_arg",
    "knob_type",
    "knob_value",
    "with_knobs",
    "baseline_for_space",
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

#: Every knob a space may name, with its value type (besides ``model.<arg>`` and ``data.<arg>``:
#: constructor arguments of the user's classes, typed by their signature).
KNOB_TYPES: dict[str, type] = {
    "batch_size": int,
    "precision": str,
    "accumulate_grad_batches": int,
    "num_workers": int,
    "lr": float,
    # the extended space (search_spaces/extended.yaml)
    "devices": int,
    "strategy": str,
    "pin_memory": bool,
    "prefetch_factor": int,
    "compile": str,
    "channels_last": bool,
    "float32_matmul_precision": str,
}
#: Knobs of the extended space: the baseline's value is what the user's code does (read by inspection).
EXTENDED_KNOBS = ("devices", "strategy", "pin_memory", "prefetch_factor", "compile", "channels_last", "float32_matmul_precision")
#: The allowed values of each string (or mixed) knob.
_ALLOWED = {
    "precision": PRECISIONS,
    "strategy": STRATEGIES,
    "compile": (False, True, *COMPILE_MODES),
    "float32_matmul_precision": MATMUL_PRECISIONS,
}
_MINIMUM = {"batch_size": 1, "accumulate_grad_batches": 1, "num_workers": 0, "devices": 1, "prefetch_factor": 1}
#: Sections of user constructor arguments in a space (``model.hidden_dim``, ``data.augment``).
ARG_SECTIONS = ("model", "data")


def user_arg(name: str) -> tuple[str, str] | None:
    """``("model", "hidden_dim")`` for a space key ``model.hidden_dim``; ``None`` for a built-in knob."""
    section, dot, arg = name.partition(".")
    return (section, arg) if dot and section in ARG_SECTIONS and arg.isidentifier() else None


def knob_type(name: str, entry: Mapping[str, Any] | None = None) -> type:
    """The value type of a knob: :data:`KNOB_TYPES`, or a user argument's resolved ``type``."""
    if name in KNOB_TYPES:
        return KNOB_TYPES[name]
    return {"int": int, "float": float, "bool": bool, "str": str}.get((entry or {}).get("type", ""), object)
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
        if not isinstance(name, str) or (name not in KNOB_TYPES and user_arg(name) is None):
            raise SpaceError(f"{source}: unknown knob {name!r}; known knobs: {sorted(KNOB_TYPES)}, or model.<argument> / "
                             "data.<argument> for a constructor argument of your LightningModule / LightningDataModule")
        kind = KNOB_TYPES.get(name, object)
        where = f"{name}"
        if isinstance(spec, list):  # shorthand: `knob: [a, b]` is `knob: {choices: [a, b]}`
            spec = {"choices": spec}
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
        if kind in (str, bool):
            example = list(_ALLOWED[name][:2]) if name in _ALLOWED else [False, True]
            raise SpaceError(f"{source}: {where} takes 'choices' (a list), not a range; e.g. choices: {example}")
        if kind is object:  # a constructor argument given as a range: a number (its type checked against the signature later)
            kind = float if any(isinstance(spec.get(k), float) for k in ("low", "high")) else int
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
    if name in _ALLOWED:
        allowed = _ALLOWED[name]
        if not any(value is a if isinstance(a, bool) or isinstance(value, bool) else value == a for a in allowed):
            what = "precision" if name == "precision" else "value"
            raise SpaceError(f"{source}: {key}: unknown {what} {value!r}; allowed: {list(allowed)}")
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
    model_info: Mapping[str, Any] | None = None,
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
        model_info: What inspection found for the extended space and constructor arguments (see
            :func:`baseline_for_space`): ``signature`` (section to argument to ``{"type", "default"}``),
            ``accepts_any`` (section to bool), ``has_conv``, ``loader`` (the training DataLoader's
            ``pin_memory`` and ``prefetch_factor``, or ``None``), ``float32_matmul_precision``.

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
    info = model_info or {}
    baseline = baseline_for_space(baseline, space, info, source)
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
        if user_arg(name) is not None:
            resolved[name] = _resolve_user_arg(name, spec, baseline, info, source)
            continue
        if name in EXTENDED_KNOBS:
            entry, note = _resolve_extended(name, spec, baseline, hardware, info, explicit, source)
            if note:
                notes.append(note)
            if entry is not None:
                resolved[name] = entry
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


#: Python types of annotations and defaults a constructor argument may have in a space.
_ARG_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _fits(value: Any, kind: str | None) -> bool:
    if value is None or kind is None:
        return True
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _ARG_TYPES[kind])


def _resolve_user_arg(name: str, spec: KnobSpec, baseline: TrialConfig, info: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A ``model.<arg>`` / ``data.<arg>`` knob, typed and checked against the constructor's signature."""
    section, arg = user_arg(name)
    signature = (info.get("signature") or {}).get(section)
    owner = "LightningModule" if section == "model" else "LightningDataModule"
    if signature is None:
        raise SpaceError(f"{source}: {name}: the model file has no {owner}; remove {name} from the space")
    knob = ((info.get("knob_args") or {}).get(section) or {}).get(arg)
    if knob is not None:
        raise SpaceError(f"{source}: {name} is the argument autotune sets for its own knob {knob!r} (it would be overwritten); "
                         f"search it as {knob}: in the space instead")
    if arg not in signature and not (info.get("accepts_any") or {}).get(section):
        raise SpaceError(f"{source}: {name}: {owner} {info.get('class_names', {}).get(section, '')}.__init__ takes no argument {arg!r}; "
                         f"its arguments: {sorted(signature)}")
    kind = (signature.get(arg) or {}).get("type")
    values = list(spec.choices) if spec.choices is not None else [spec.low, spec.high]
    if kind is None:  # no annotation and no default: the space's own values decide (all of one type)
        kinds = {type(v).__name__ for v in values if v is not None}
        kind = kinds.pop() if len(kinds) == 1 and kinds <= set(_ARG_TYPES) else None
    for value in values:
        if not _fits(value, kind):
            raise SpaceError(f"{source}: {name}: {value!r} is not {'an' if kind == 'int' else 'a'} {kind} "
                             f"({owner}.__init__ declares {arg}: {kind}); give {kind} values")
    base_value = knob_value(baseline, name)
    if spec.choices is None:
        if kind not in ("int", "float"):
            raise SpaceError(f"{source}: {name} is a {kind or 'untyped'} argument: give choices: [...], not a range")
        caster = int if kind == "int" else float
        low, high = caster(spec.low), caster(spec.high)
        if isinstance(base_value, (int, float)) and not isinstance(base_value, bool):
            low, high = min(low, caster(base_value)), max(high, caster(base_value))
        entry: dict[str, Any] = {"low": low, "high": high, "log": spec.log, "type": kind}
        if spec.step is not None:
            entry["step"] = spec.step
        return entry
    choices = [float(v) if kind == "float" and v is not None else v for v in spec.choices]
    if kind == "float" and isinstance(base_value, int) and not isinstance(base_value, bool):
        base_value = float(base_value)
    if base_value is not None and base_value not in choices:
        choices.append(base_value)
    return {"choices": choices, "type": kind}


def _resolve_extended(name: str, spec: KnobSpec, baseline: TrialConfig, hardware: Hardware, info: Mapping[str, Any],
                      explicit: bool, source: str) -> tuple[dict[str, Any] | None, str | None]:
    """One knob of the extended space made concrete: ``(entry or None when dropped, note or None)``."""
    base_value = getattr(baseline, name)
    if name == "devices":  # the most this machine holds (the baseline's own count always stays)
        most = max(base_value, hardware.device_count if hardware.accelerator == "gpu" else hardware.cpu_count)
    if spec.choices is None:  # an integer range (devices, prefetch_factor)
        low, high = int(min(spec.low, base_value)), int(max(spec.high, base_value))
        if name == "devices":
            high = min(high, most)
        return ({"choices": [low]} if low == high else {"low": low, "high": high, "log": spec.log, **({"step": spec.step} if spec.step else {})}), None
    choices = list(spec.choices)
    note = None
    if name == "compile":
        choices = list(dict.fromkeys("default" if c is True else c for c in choices))
    if name == "devices":
        if any(c > most for c in choices):
            note = f"removed devices {[c for c in choices if c > most]}: this machine has {most} {'GPUs' if hardware.accelerator == 'gpu' else 'CPU cores'}"
        choices = [c for c in choices if c <= most]
    if name == "strategy":
        if hardware.accelerator != "gpu" and "fsdp" in choices:
            choices = [c for c in choices if c != "fsdp"]
            note = "removed strategy 'fsdp': Lightning runs FSDP on GPUs only"
        if base_value == "auto":  # a one-device baseline: the strategy applies to the multi-device trials
            base_value = choices[0] if choices else "ddp"
    if name == "pin_memory":
        if info.get("loader") is None and explicit:
            raise SpaceError(f"{source}: pin_memory: autotune found no torch DataLoader in train_dataloader() to set it on; remove it from the space")
        if info.get("loader") is None:
            return None, "dropped 'pin_memory': train_dataloader() returns no torch DataLoader"
        if hardware.accelerator != "gpu" and True in choices:
            choices = [c for c in choices if c is not True]
            note = "removed pin_memory true: pinned host memory only speeds up copies to a GPU, and this machine has none"
    if name == "prefetch_factor" and info.get("loader") is None:
        if explicit:
            raise SpaceError(f"{source}: prefetch_factor: autotune found no torch DataLoader in train_dataloader() to set it on; remove it")
        return None, "dropped 'prefetch_factor': train_dataloader() returns no torch DataLoader"
    if name == "channels_last" and not info.get("has_conv", False) and True in choices:
        choices = [c for c in choices if c is not True]
        note = "removed channels_last true: the model has no 2-D or 3-D convolution, where channels_last helps"
    if base_value is not None and base_value not in choices:
        choices.append(base_value)
    if name in ("devices", "prefetch_factor"):
        choices.sort()
    return {"choices": choices}, note


def knob_value(config: TrialConfig, name: str) -> Any:
    """A knob's value in a config: a field, or ``model_args``/``data_args`` for ``model.<arg>``/``data.<arg>``."""
    arg = user_arg(name)
    if arg is None:
        return getattr(config, name)
    return (getattr(config, f"{arg[0]}_args") or {}).get(arg[1])


def with_knobs(config: TrialConfig, values: Mapping[str, Any]) -> TrialConfig:
    """``config`` with knob values set (user arguments merged into ``model_args``/``data_args``).

    A one-device config's strategy is ``"auto"``; a multi-device one keeps the sampled strategy, or
    ``"ddp"``.
    """
    changes: dict[str, Any] = {}
    for name, value in values.items():
        arg = user_arg(name)
        if arg is None:
            changes[name] = value
        else:
            field_name = f"{arg[0]}_args"
            changes.setdefault(field_name, dict(getattr(config, field_name) or {}))[arg[1]] = value
    if changes.get("compile") is True:
        changes["compile"] = "default"
    out = config.replace(**changes)
    if out.devices == 1 and out.strategy != "auto":
        out = out.replace(strategy="auto")
    elif out.devices > 1 and out.strategy == "auto":
        out = out.replace(strategy="ddp")
    return out


def baseline_for_space(baseline: TrialConfig, space: Mapping[str, Any], info: Mapping[str, Any], source: str = "<space>") -> TrialConfig:
    """The baseline with the values the user's code has for each extended knob and constructor
    argument the space searches (they are the baseline's point of the space).

    Args:
        baseline: The model's own config (core knobs).
        space: Knob names (a parsed or resolved space).
        info: Inspection facts (see :func:`resolve_space`): the training DataLoader's
            ``pin_memory``/``prefetch_factor``, ``float32_matmul_precision``, constructor defaults
            and the user's ``--config`` values (``signature`` defaults already include them).
    """
    changes: dict[str, Any] = {}
    loader = info.get("loader") or {}
    for name in space:
        if name == "pin_memory" and baseline.pin_memory is None:
            changes["pin_memory"] = bool(loader.get("pin_memory", False))
        elif name == "prefetch_factor" and baseline.prefetch_factor is None:
            changes["prefetch_factor"] = int(loader.get("prefetch_factor") or 2)  # PyTorch's default with workers
        elif name == "compile" and baseline.compile is None:
            changes["compile"] = False
        elif name == "channels_last" and baseline.channels_last is None:
            changes["channels_last"] = False
        elif name == "float32_matmul_precision" and baseline.float32_matmul_precision is None:
            changes["float32_matmul_precision"] = info.get("float32_matmul_precision") or "highest"
        elif user_arg(name) is not None and knob_value(baseline, name) is None:
            section, arg = user_arg(name)
            default = ((info.get("signature") or {}).get(section) or {}).get(arg, {}).get("default")
            if default is not None:
                changes.setdefault(f"{section}_args", dict(getattr(baseline, f"{section}_args") or {}))[arg] = default
    return baseline.replace(**changes) if changes else baseline


def distributions(resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Optuna distributions of a resolved space (for ``study.ask(fixed_distributions)``)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for name, entry in resolved.items():
        name = param_name(name, entry)
        if "choices" in entry:
            out[name] = CategoricalDistribution(list(entry["choices"]))
        elif knob_type(name, entry) is int:
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
        elif knob_type(name, entry) is int:
            values[name] = trial.suggest_int(key, entry["low"], entry["high"], log=entry.get("log", False), step=entry.get("step") or 1)
        else:
            values[name] = trial.suggest_float(key, entry["low"], entry["high"], log=entry.get("log", False))
    lr_entry = resolved.get("lr", {})
    if "scaling" in lr_entry:
        multiplier = values.pop("lr")
        config = with_knobs(baseline, values)
        return config.replace(lr=scaled_lr(baseline.lr, multiplier, config.effective_batch_size, baseline.effective_batch_size, lr_entry["scaling"]))
    return with_knobs(baseline, values)


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
    for name in [*KNOB_TYPES, *(n for n in resolved if user_arg(n) is not None)]:
        if name == "strategy" and config.devices == 1:  # one device: the strategy is "auto", whatever the point says
            if name in resolved:
                params[name] = baseline_params({name: resolved[name]}, baseline)[name]
            continue
        if name == "strategy" and name not in resolved:  # derived from devices (see with_knobs)
            if config.strategy == with_knobs(baseline.replace(devices=config.devices), {}).strategy:
                continue
        value = knob_value(config, name)
        if name not in resolved:
            if name in EXTENDED_KNOBS and value is None:
                continue
            if value != knob_value(baseline, name):
                raise SpaceError(f"{source}: {name} = {value!r}, but the space does not search {name} (every trial uses "
                                 f"{knob_value(baseline, name)!r}); add {name} to the space or drop it from the file")
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
    out = {}
    for name, entry in resolved.items():
        value = 1.0 if param_name(name, entry) != name else knob_value(baseline, name)
        if name == "strategy" and value == "auto":  # a one-device baseline: any strategy point runs it
            value = entry["choices"][0]
        out[param_name(name, entry)] = value
    return out

