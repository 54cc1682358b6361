"""Where a trial's knobs go in the user's objects, and applying them there.

Where a knob goes, in order (the places Lightning's Tuner looks, plus constructor arguments first
so a value is in place before ``__init__`` builds anything from it):

1. a constructor argument of that name of the DataModule (``batch_size``, ``num_workers``) or the
   LightningModule (all knobs; ``learning_rate`` is accepted for ``lr``);
2. an attribute of that name on the DataModule, then the LightningModule;
3. an entry of ``model.hparams``;
4. for ``batch_size`` and ``num_workers`` only: the training DataLoader itself, rebuilt with the
   trial's values by wrapping the ``train_dataloader`` hook of the object that defines it
   (:func:`autotune.dataloaders.loader_targets`, :func:`autotune.dataloaders.rebuild_dataloader`),
   when the batch size is hard-coded there.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError

__all__ = [
    "KNOB_ALIASES",
    "KnobTarget",
    "apply_attribute_knobs",
    "build_objects",
    "init_params",
    "locate_knobs",
    "read_knob",
]

#: Names under which a knob may appear in user code, in order of preference.
KNOB_ALIASES: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size",),
    "num_workers": ("num_workers",),
    "lr": ("lr", "learning_rate"),
}


@dataclass(frozen=True)
class KnobTarget:
    """Where one knob is applied in the user's objects.

    Attributes:
        knob: Knob name (``batch_size``, ``num_workers``, ``lr``).
        owner: ``"data"`` (the DataModule) or ``"model"`` (the LightningModule).
        how: ``"init"`` (constructor argument), ``"attr"`` (attribute), ``"hparams"``, or
            ``"loader"`` (the DataLoader the owner's ``train_dataloader`` returns, rebuilt with the
            value: :func:`autotune.dataloaders.rebuild_dataloader`).
        name: The argument or attribute name (``lr`` may be ``learning_rate``); for ``"loader"``,
            the DataLoader argument.
    """

    knob: str
    owner: str
    how: str
    name: str

    def to_dict(self) -> dict[str, str]:
        return {"knob": self.knob, "owner": self.owner, "how": self.how, "name": self.name}


def init_params(cls: type[Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters of ``cls.__init__`` (``self`` included), or none when its signature cannot be read."""
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
            params = init_params(cls)
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
    params = init_params(cls)
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
    are left to the wrapped ``train_dataloader`` hook (:func:`autotune.dataloaders.apply_loader_options`)."""
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
        user_config: Output of :func:`autotune.loader.read_user_config` (its ``model``/``data`` arguments).
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
        param = init_params(type(obj)).get(target.name)
        if param is not None and param.default is not inspect.Parameter.empty:
            return param.default
    return None
