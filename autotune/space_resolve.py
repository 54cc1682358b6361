"""A validated space made concrete for one model on one machine (:func:`resolve_space`).

Relative bounds become absolute, ``high: auto`` becomes the cores per device, precisions the machine
does not run natively are removed, knobs the model cannot take are dropped (or are an error when the
user asked for them), constructor arguments (``model.<arg>``, ``data.<arg>``) are typed and checked
against the signatures, and the baseline's own values are added so the baseline is a point of the
space (:func:`baseline_for_space` fills in the baseline's values of the extended knobs).

The result is plain JSON; it is stored with the study so every later run samples the same
distributions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from autotune.config import TrialConfig
from autotune.errors import SpaceError
from autotune.hardware import Hardware, cores_per_device, unsupported_precisions
from autotune.knobs import EXTENDED_KNOBS, KNOB_TYPES, knob_value, user_arg

if TYPE_CHECKING:
    from autotune.space import KnobSpec

__all__ = ["baseline_for_space", "resolve_space"]


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
        space: Output of :func:`autotune.space.parse_space`.
        baseline: The model's own config (trial 0); its values are added to every knob's range.
        hardware: The machine the trials run on.
        applicable: Knob name to whether the model exposes it (see :mod:`autotune.inspection`).
        explicit: The user chose this space (``--space``): an inapplicable knob is then an error,
            otherwise it is dropped with a note.
        source: The space file, for messages.
        train_samples: Size of the training set (samples), if known: batch sizes above it per device
            are removed (their first batch could not have the batch size).
        model_info: What inspection found for the extended space and constructor arguments (see
            :func:`baseline_for_space`): ``signature`` (section to argument to ``{"type", "default"}``),
            ``accepts_any`` (section to bool), ``has_conv``, ``loader`` (the training DataLoader's
            ``pin_memory``, ``prefetch_factor`` and ``persistent_workers``, or ``None``),
            ``float32_matmul_precision``, ``automatic_optimization`` (``False``: manual optimization,
            for which ``accumulate_grad_batches`` is dropped with a note, even from an explicit space),
            ``unreachable`` (``batch_size``/``num_workers`` to why not even a rebuilt training
            DataLoader takes it: dropped with that reason, even from an explicit space), ``links``
            (``link_arguments`` target path to its source: a target is refused as a knob).

    Returns:
        ``(resolved, notes)``: knob name to ``{"choices": [...]}`` or
        ``{"low", "high", "log", "step"}`` with absolute values (JSON-serialisable), and one line
        per change made (printed as warnings). Under ``lr_scaling`` the ``lr`` entry holds
        multipliers (1 included) and ``"scaling"``; it is there even when the file names no lr.

    Raises:
        SpaceError: ``explicit`` and a knob cannot be applied to this model, a constructor argument
            does not fit its signature, or ``lr_scaling`` without an lr.
    """
    resolved: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    info = model_info or {}
    baseline = baseline_for_space(baseline, space, info, source)
    limits = _Limits(unsupported_precisions(hardware), cores_per_device(hardware, baseline.devices), train_samples)
    lr_scaling = getattr(space, "lr_scaling", "none")
    if lr_scaling != "none" and (not applicable.get("lr", False) or baseline.lr is None):
        raise SpaceError(f"{source}: lr_scaling: {lr_scaling} needs a model with an lr (or learning_rate) argument; remove lr_scaling")
    for name, spec in space.items():
        entry = _resolve_knob(name, spec, baseline, hardware, applicable, explicit, source, info, limits, lr_scaling, notes)
        if entry is not None:
            resolved[name] = entry
    if lr_scaling != "none" and "lr" not in space:  # the scaling rule alone: multiplier 1
        resolved["lr"] = _scaled_lr_entry(None, lr_scaling)
    return resolved, notes


def _resolve_knob(
    name: str,
    spec: KnobSpec,
    baseline: TrialConfig,
    hardware: Hardware,
    applicable: Mapping[str, bool],
    explicit: bool,
    source: str,
    info: Mapping[str, Any],
    limits: _Limits,
    lr_scaling: str,
    notes: list[str],
) -> dict[str, Any] | None:
    """One knob of :func:`resolve_space` made concrete, or ``None`` when it is dropped (a line
    appended to ``notes`` says why).

    Raises:
        SpaceError: ``explicit`` and the knob cannot be applied to this model, or a constructor
            argument does not fit its signature.
    """
    entry: dict[str, Any] | None
    if name == "lr" and lr_scaling != "none":
        entry = _scaled_lr_entry(spec, lr_scaling, notes)
    elif user_arg(name) is not None:
        entry = _resolve_user_arg(name, spec, baseline, info, source)
    elif name == "accumulate_grad_batches" and info.get("automatic_optimization") is False:
        # Lightning raises "Automatic gradient accumulation is not supported for manual optimization";
        # a property of the model, not a mistake in the space, so dropped even from the user's own space
        notes.append(
            "dropped 'accumulate_grad_batches': the module uses manual optimization (automatic_optimization = False), "
            "and Lightning accumulates gradients only under automatic optimization"
        )
        entry = None
    elif name in EXTENDED_KNOBS:
        entry, note = _resolve_extended(name, spec, baseline, hardware, info, explicit, source)
        if note:
            notes.append(note)
    elif not applicable.get(name, False) and (info.get("unreachable") or {}).get(name):
        # batch_size/num_workers that not even a rebuilt training DataLoader takes (its own batch
        # sampler, ...): a property of the model, so dropped even from the user's own space
        notes.append(f"dropped {name!r}: the model exposes no {name} argument or attribute, and {info['unreachable'][name]}")
        entry = None
    elif not applicable.get(name, False):
        message = f"{source}: knob {name!r} cannot be applied to this model (see the README: where autotune looks for {name})"
        if explicit:
            raise SpaceError(message + "; remove it from the space or expose it as a constructor argument")
        notes.append(f"dropped {name!r}: the model exposes no {name} argument or attribute")
        entry = None
    elif spec.choices is not None:
        entry = _resolve_choices(name, spec, baseline, limits, notes)
    else:
        entry = _resolve_range(name, spec, baseline, limits, notes)
    return entry


@dataclass(frozen=True)
class _Limits:
    """What this machine and data set allow a core knob.

    Attributes:
        removed_precisions: Precision to the reason this machine does not run it natively.
        worker_cap: CPU cores per device, the most ``num_workers`` can use (>= 1).
        train_samples: Size of the training set (samples), or ``None`` when unknown.
    """

    removed_precisions: Mapping[str, str]
    worker_cap: int
    train_samples: int | None


def _scaled_lr_entry(spec: KnobSpec | None, lr_scaling: str, notes: list[str] | None = None) -> dict[str, Any]:
    """The ``lr`` entry under ``lr_scaling``: multipliers of the scaled baseline lr, 1 included (the
    baseline's own point, which the staged search also tries first at each effective batch).

    Args:
        spec: The file's lr knob (relative), or ``None`` when the file names no lr.
        lr_scaling: ``"linear"`` or ``"sqrt"``.
        notes: Where a note goes when 1 widens the file's multipliers (a new user's ``2.5..3.0`` was
            searched as ``1..3`` without a word).
    """
    widened = None
    if spec is None:
        entry: dict[str, Any] = {"choices": [1.0]}
    elif spec.choices is not None:
        entry = {"choices": sorted(set(map(float, spec.choices)) | {1.0})}
        widened = f"choices {list(spec.choices)}" if 1.0 not in map(float, spec.choices) else None
    else:  # a range: parse_space checked both bounds are numbers
        low, high = cast(float, spec.low), cast(float, spec.high)
        entry = {"low": float(min(low, 1.0)), "high": float(max(high, 1.0)), "log": spec.log}
        widened = f"range {low:g}..{high:g}" if not low <= 1.0 <= high else None
    if widened and notes is not None:
        notes.append(
            f"lr: multipliers {widened} widened to hold 1, the lr_scaling rule's own lr (the baseline's at its effective batch; "
            "the staged search tries it first at each effective batch)"
        )
    return {**entry, "scaling": lr_scaling}


def _resolve_choices(name: str, spec: KnobSpec, baseline: TrialConfig, limits: _Limits, notes: list[str]) -> dict[str, Any]:
    """A core knob given as ``choices``, filtered for this machine and data set (notes appended to ``notes``)."""
    base_value = getattr(baseline, name)
    assert spec.choices is not None, name  # resolve_space sends only choices knobs here
    choices = list(spec.choices)
    if name == "precision":
        removed = limits.removed_precisions
        for c in choices:
            if c in removed:
                notes.append(f"removed precision {c!r}: {removed[c]}")
        choices = [c for c in choices if c not in removed]
    if name == "batch_size" and limits.train_samples:
        per_device = limits.train_samples // baseline.world_size
        fitting = [c for c in choices if c <= per_device]
        if len(fitting) < len(choices):
            notes.append(
                f"removed batch sizes {[c for c in choices if c > per_device]}: the training set has "
                f"{limits.train_samples} samples ({per_device} per device)"
            )
        choices = fitting
    if name == "num_workers":
        capped = [c for c in choices if c <= limits.worker_cap]
        if len(capped) < len(choices):
            notes.append(f"num_workers capped at {limits.worker_cap} (CPU cores per device)")
        choices = capped
    if base_value not in choices:
        choices.append(base_value)
    if name != "precision":
        choices.sort()
    return {"choices": choices}


def _resolve_range(name: str, spec: KnobSpec, baseline: TrialConfig, limits: _Limits, notes: list[str]) -> dict[str, Any]:
    """A core knob given as a range, with absolute bounds capped for this machine and data set."""
    base_value = getattr(baseline, name)
    low, high = spec.low, spec.high
    if spec.relative:
        low, high = base_value * low, base_value * high
    if high == "auto":
        high = limits.worker_cap
    high = cast(float, high)  # a number from here: parse_space allows no other string than "auto"
    if name == "num_workers" and high > limits.worker_cap:  # false after "auto" (high is the cap)
        notes.append(f"num_workers capped at {limits.worker_cap} (CPU cores per device), not {high}")
        high = limits.worker_cap
    if name == "batch_size" and limits.train_samples and high > limits.train_samples // baseline.world_size:
        notes.append(
            f"batch_size capped at {limits.train_samples // baseline.world_size}: the training set has {limits.train_samples} samples"
        )
        high = limits.train_samples // baseline.world_size
    if name == "num_workers" and base_value > high:
        # the baseline's workers above the range (the core cap): one extra point, not a range widened to it
        top, step = int(high), spec.step or 1
        choices = sorted(set(range(min(int(cast(float, low)), top), top + 1, step)) | {base_value})
        notes.append(f"num_workers: the baseline's {base_value} is above {top}, so it is one extra point of the space: {choices}")
        return {"choices": choices}
    low, high = min(low, base_value), max(high, base_value)
    if KNOB_TYPES[name] is int:
        low, high = int(low), int(high)
    else:
        low, high = float(low), float(high)
    if low == high:
        return {"choices": [low]}
    entry: dict[str, Any] = {"low": low, "high": high, "log": spec.log}
    if spec.step is not None:
        entry["step"] = spec.step
    return entry


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
    parts = user_arg(name)
    assert parts is not None, name  # resolve_space sends only model.<arg> / data.<arg> knobs here
    section, arg = parts
    signature = (info.get("signature") or {}).get(section)
    owner = "LightningModule" if section == "model" else "LightningDataModule"
    if signature is None:
        raise SpaceError(f"{source}: {name}: the model file has no {owner}; remove {name} from the space")
    source_of_link = (info.get("links") or {}).get(name)
    if source_of_link is not None:
        linked = user_arg(source_of_link)
        own = ((info.get("knob_args") or {}).get(linked[0]) or {}).get(linked[1]) if linked else None
        instead = f"{own}: (autotune's knob, which sets {source_of_link})" if own else source_of_link
        signatures = info.get("signature") or {}
        searchable = linked is not None and (
            linked[1] in (signatures.get(linked[0]) or {}) or (info.get("accepts_any") or {}).get(linked[0])
        )
        if not own and not searchable:
            # an attribute of the instantiated object (apply_on="instantiate"), several sources, or another path
            raise SpaceError(
                f"{source}: {name} is set by your LightningCLI's link_arguments from {source_of_link}, which is not a constructor "
                f"argument that a space can set (LightningCLI refuses a value for a link target): remove {name} from the space"
            )
        raise SpaceError(
            f"{source}: {name} is set by your LightningCLI's link_arguments from {source_of_link} (LightningCLI refuses a "
            f"value for a link target); search {instead} in the space instead"
        )
    knob = ((info.get("knob_args") or {}).get(section) or {}).get(arg)
    if knob is not None:
        raise SpaceError(
            f"{source}: {name} is the argument autotune sets for its own knob {knob!r} (it would be overwritten); "
            f"search it as {knob}: in the space instead"
        )
    if arg not in signature and not (info.get("accepts_any") or {}).get(section):
        raise SpaceError(
            f"{source}: {name}: {owner} {info.get('class_names', {}).get(section, '')}.__init__ takes no argument {arg!r}; "
            f"its arguments: {sorted(signature)}"
        )
    kind = (signature.get(arg) or {}).get("type")
    values = list(spec.choices) if spec.choices is not None else [spec.low, spec.high]
    if kind is None:  # no annotation and no default: the space's own values decide (all of one type)
        kinds = {type(v).__name__ for v in values if v is not None}
        kind = kinds.pop() if len(kinds) == 1 and kinds <= set(_ARG_TYPES) else None
    for value in values:
        if not _fits(value, kind):
            raise SpaceError(
                f"{source}: {name}: {value!r} is not {'an' if kind == 'int' else 'a'} {kind} "
                f"({info.get('class_names', {}).get(section) or owner}.__init__ declares {arg}: {kind}); give {kind} values"
            )
    base_value = knob_value(baseline, name)
    if spec.choices is None:
        if kind not in ("int", "float"):
            raise SpaceError(f"{source}: {name} is a {kind or 'untyped'} argument: give choices: [...], not a range")
        caster = int if kind == "int" else float
        low, high = caster(cast(float, spec.low)), caster(cast(float, spec.high))  # a range: parse_space checked both
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


def _resolve_extended(
    name: str, spec: KnobSpec, baseline: TrialConfig, hardware: Hardware, info: Mapping[str, Any], explicit: bool, source: str
) -> tuple[dict[str, Any] | None, str | None]:
    """One knob of the extended space made concrete: ``(entry or None when dropped, note or None)``."""
    base_value = getattr(baseline, name)
    if name == "devices":  # the most this machine holds (the baseline's own count always stays)
        most = max(base_value, hardware.device_count if hardware.accelerator == "gpu" else hardware.cpu_count)
    if spec.choices is None:  # an integer range (devices, prefetch_factor)
        low, high = int(min(spec.low, base_value)), int(max(spec.high, base_value))
        if name == "devices":
            high = min(high, most)
        return (
            {"choices": [low]} if low == high else {"low": low, "high": high, "log": spec.log, **({"step": spec.step} if spec.step else {})}
        ), None
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
            raise SpaceError(
                f"{source}: pin_memory: autotune found no torch DataLoader in train_dataloader() to set it on; remove it from the space"
            )
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
        elif (parts := user_arg(name)) is not None and knob_value(baseline, name) is None:
            section, arg = parts
            default = ((info.get("signature") or {}).get(section) or {}).get(arg, {}).get("default")
            if default is not None:
                changes.setdefault(f"{section}_args", dict(getattr(baseline, f"{section}_args") or {}))[arg] = default
    return baseline.replace(**changes) if changes else baseline
