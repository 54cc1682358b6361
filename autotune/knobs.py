"""The knobs a search space may name, their value types, and how a knob reads and sets a :class:`TrialConfig`.

A knob is either a built-in one (a key of :data:`KNOB_TYPES`, also the :class:`TrialConfig` field
it sets) or a constructor argument of the user's classes, written ``model.<arg>`` or ``data.<arg>``
and stored in ``TrialConfig.model_args`` / ``TrialConfig.data_args``.

This module is the shared vocabulary of :mod:`autotune.space` (parsing), :mod:`autotune.space_resolve`
(resolving for one model and machine) and :mod:`autotune.space_params` (Optuna parameters); it
imports none of them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from autotune.config import TrialConfig

__all__ = [
    "ARG_SECTIONS",
    "EXTENDED_KNOBS",
    "KNOB_TYPES",
    "LR_SCALINGS",
    "knob_type",
    "knob_value",
    "user_arg",
    "with_knobs",
]

#: Values of the space option ``lr_scaling``.
LR_SCALINGS = ("none", "linear", "sqrt")

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
#: Sections of user constructor arguments in a space (``model.hidden_dim``, ``data.augment``).
ARG_SECTIONS = ("model", "data")


@functools.lru_cache(maxsize=4096)  # called for every param of every trial in a study's passes over its trials
def user_arg(name: str) -> tuple[str, str] | None:
    """``("model", "hidden_dim")`` for a space key ``model.hidden_dim``; ``None`` for a built-in knob."""
    section, dot, arg = name.partition(".")
    return (section, arg) if dot and section in ARG_SECTIONS and arg.isidentifier() else None


def knob_type(name: str, entry: Mapping[str, Any] | None = None) -> type:
    """The value type of a knob: :data:`KNOB_TYPES`, or a user argument's resolved ``type``."""
    if name in KNOB_TYPES:
        return KNOB_TYPES[name]
    return {"int": int, "float": float, "bool": bool, "str": str}.get((entry or {}).get("type", ""), object)


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

    Raises:
        UsageError: A value is out of range for its :class:`TrialConfig` field.
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
