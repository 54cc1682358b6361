"""Between Optuna parameters and :class:`~autotune.config.TrialConfig`: a trial's knobs and back.

:func:`suggest_config` asks an Optuna trial for each knob of a resolved space (see
:func:`autotune.space_resolve.resolve_space`) and returns the trial's config; :func:`params_of` and
:func:`baseline_params` go the other way, for ``study.enqueue_trial``; :func:`distributions` gives
the Optuna distributions of a resolved space. Under ``lr_scaling`` the Optuna parameter of ``lr`` is
``lr_multiplier`` (:func:`param_name`) and the config holds the final lr (:func:`scaled_lr`).

Optuna is imported lazily, inside :func:`distributions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.config import TrialConfig
from autotune.errors import SpaceError
from autotune.knobs import (
    EXTENDED_KNOBS,
    KNOB_TYPES,
    LR_SCALINGS,
    knob_type,
    knob_value,
    user_arg,
    with_knobs,
)

__all__ = ["baseline_params", "distributions", "param_name", "params_of", "scaled_lr", "suggest_config"]


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
        assert baseline.lr is not None, "lr_scaling without a baseline lr"  # resolve_space rejects that space
        multiplier = values.pop("lr")
        config = with_knobs(baseline, values)
        return config.replace(
            lr=scaled_lr(baseline.lr, multiplier, config.effective_batch_size, baseline.effective_batch_size, lr_entry["scaling"])
        )
    return with_knobs(baseline, values)


def param_name(name: str, entry: Mapping[str, Any]) -> str:
    """The Optuna parameter of a resolved knob: ``lr_multiplier`` for an lr under ``lr_scaling``."""
    return "lr_multiplier" if name == "lr" and "scaling" in entry else name


def params_of(
    config: TrialConfig, resolved: Mapping[str, Mapping[str, Any]], baseline: TrialConfig, source: str = "<config>"
) -> dict[str, Any]:
    """The Optuna parameters that make :func:`suggest_config` return ``config`` (for ``enqueue_trial``).

    Raises:
        SpaceError: A searched value lies outside the space, or a knob the space does not search
            differs from the baseline's value (it could not be applied); one line naming every such value.
    """
    params: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []  # (what is wrong, the fix): every one is named, in one line
    for name in [*KNOB_TYPES, *(n for n in resolved if user_arg(n) is not None)]:
        if name == "strategy" and config.devices == 1:  # one device: the strategy is "auto", whatever the point says
            if name in resolved:
                params[name] = baseline_params({name: resolved[name]}, baseline)[name]
            continue
        if (  # derived from devices (see with_knobs)
            name == "strategy"
            and name not in resolved
            and config.strategy == with_knobs(baseline.replace(devices=config.devices), {}).strategy
        ):
            continue
        value = knob_value(config, name)
        if name not in resolved:
            if name in EXTENDED_KNOBS and value is None:
                continue
            if value != knob_value(baseline, name):
                problems.append(
                    (
                        f"{name} = {value!r}, but the space does not search {name} (every trial uses {knob_value(baseline, name)!r})",
                        f"add {name} to the space or drop it from the file",
                    )
                )
            continue
        entry = resolved[name]
        key = param_name(name, entry)
        if "scaling" in entry:
            assert baseline.lr is not None, "lr_scaling without a baseline lr"  # resolve_space rejects that space
            value = value / scaled_lr(baseline.lr, 1.0, config.effective_batch_size, baseline.effective_batch_size, entry["scaling"])
            if "choices" in entry:  # a float multiplier: match a choice up to rounding
                close = [c for c in entry["choices"] if abs(c - value) <= 1e-9 * max(1.0, abs(c))]
                value = close[0] if close else value
        if "choices" in entry:
            if value not in entry["choices"]:
                problems.append(
                    (
                        f"{key} = {value!r} is not one of the space's choices {list(entry['choices'])}",
                        "add it to the space or change the file",
                    )
                )
        elif not entry["low"] <= value <= entry["high"]:
            problems.append(
                (f"{key} = {value!r} is outside the space's range {entry['low']}..{entry['high']}", "widen the space or change the file")
            )
        params[key] = value
    if len(problems) == 1:
        raise SpaceError(f"{source}: {problems[0][0]}; {problems[0][1]}")
    if problems:
        raise SpaceError(f"{source}: " + "; ".join(f"{what} ({fix})" for what, fix in problems))
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
