"""The one configuration object that travels from the sampler to the trial and on to the export.

:class:`TrialConfig` uses Lightning's and PyTorch's own names for its fields, so that a field name is
also the argument it sets (``Trainer(precision=...)``, ``DataLoader(num_workers=...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import UsageError

__all__ = [
    "COMPILE_MODES",
    "EXTENDED_FIELDS",
    "LOADER_KNOBS",
    "MATMUL_PRECISIONS",
    "MODULE_KNOBS",
    "PRECISIONS",
    "STRATEGIES",
    "TRAINER_KNOBS",
    "TrialConfig",
]

#: Lightning's canonical precision strings (``Trainer(precision=...)``).
PRECISIONS = ("64-true", "32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")

#: Knobs that are ``Trainer`` arguments.
TRAINER_KNOBS = ("precision", "accumulate_grad_batches")
#: Knobs set on the user's DataModule or LightningModule, where its data loaders read them.
LOADER_KNOBS = ("batch_size", "num_workers")
#: Knobs set on the user's LightningModule.
MODULE_KNOBS = ("lr",)
#: Lightning strategies a space may search (``strategy``); they apply when ``devices > 1``.
STRATEGIES = ("ddp", "fsdp")
#: ``torch.compile`` modes (the ``compile`` knob: ``False``, or one of these).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Values of ``torch.set_float32_matmul_precision``.
MATMUL_PRECISIONS = ("highest", "high", "medium")
#: Fields of the extended space (``search_spaces/extended.yaml``); ``None`` (the default) leaves the
#: user's code as it is, and such a field is left out of :meth:`TrialConfig.to_dict`.
EXTENDED_FIELDS = ("pin_memory", "prefetch_factor", "compile", "channels_last", "float32_matmul_precision", "model_args", "data_args")


@dataclass(frozen=True)
class TrialConfig:
    """One training configuration: what a trial runs and what the export writes.

    Attributes:
        batch_size: Samples per device per forward pass (the DataLoader's ``batch_size``), >= 1.
        precision: Lightning precision string, one of :data:`PRECISIONS`.
        accumulate_grad_batches: Batches per optimizer step (``Trainer`` argument), >= 1.
        num_workers: DataLoader worker processes per device, >= 0.
        lr: Learning rate given to the module (its ``lr`` or ``learning_rate`` argument), > 0, or
            ``None`` when the module has no such argument.
        accelerator: ``"cpu"`` or ``"gpu"``.
        devices: Devices per node, >= 1.
        strategy: Lightning strategy name: ``"auto"`` for one device, ``"ddp"`` for several.
        num_nodes: Nodes, >= 1.
        pin_memory: The DataLoaders' ``pin_memory`` (page-locked host memory for copies to a GPU).
        prefetch_factor: The DataLoaders' ``prefetch_factor`` (batches loaded ahead per worker, >= 1;
            applies only with ``num_workers > 0``).
        compile: ``False`` or a ``torch.compile`` mode (:data:`COMPILE_MODES`): the LightningModule
            is compiled before ``fit``.
        channels_last: Module and 4-D input batches in ``torch.channels_last`` memory format (conv nets).
        float32_matmul_precision: ``torch.set_float32_matmul_precision`` (:data:`MATMUL_PRECISIONS`).
        model_args: Searched constructor arguments of the user's LightningModule (name to value).
        data_args: Searched constructor arguments of the user's LightningDataModule.
    """

    batch_size: int
    precision: str = "32-true"
    accumulate_grad_batches: int = 1
    num_workers: int = 0
    lr: float | None = None
    accelerator: str = "cpu"
    devices: int = 1
    strategy: str = "auto"
    num_nodes: int = 1
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    compile: bool | str | None = None
    channels_last: bool | None = None
    float32_matmul_precision: str | None = None
    model_args: dict | None = field(default=None, compare=True)
    data_args: dict | None = field(default=None, compare=True)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r} is not one of {list(PRECISIONS)}")
        for name in ("batch_size", "accumulate_grad_batches", "devices", "num_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise UsageError(f"num_workers must be an integer >= 0, got {self.num_workers!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise UsageError(f"lr must be a number > 0, got {self.lr!r}")
        for name in ("pin_memory", "channels_last"):
            if getattr(self, name) not in (None, True, False):
                raise UsageError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.prefetch_factor is not None and (
            isinstance(self.prefetch_factor, bool) or not isinstance(self.prefetch_factor, int) or self.prefetch_factor < 1
        ):
            raise UsageError(f"prefetch_factor must be an integer >= 1, got {self.prefetch_factor!r}")
        if self.compile not in (None, False, True, *COMPILE_MODES):
            raise UsageError(f"compile must be false or a torch.compile mode {list(COMPILE_MODES)}, got {self.compile!r}")
        if self.float32_matmul_precision not in (None, *MATMUL_PRECISIONS):
            raise UsageError(f"float32_matmul_precision must be one of {list(MATMUL_PRECISIONS)}, got {self.float32_matmul_precision!r}")
        if self.strategy not in ("auto", *STRATEGIES):
            raise UsageError(f"strategy must be 'auto' or one of {list(STRATEGIES)}, got {self.strategy!r}")
        for name in ("model_args", "data_args"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), Mapping):
                raise UsageError(f"{name} must be a mapping of constructor argument names to values, got {getattr(self, name)!r}")

    @property
    def world_size(self) -> int:
        """Processes taking part in one optimizer step: ``devices * num_nodes``."""
        return self.devices * self.num_nodes

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step: ``batch_size * accumulate_grad_batches * devices * num_nodes``."""
        return self.batch_size * self.accumulate_grad_batches * self.world_size

    @property
    def compile_mode(self) -> str | None:
        """The ``torch.compile`` mode, or ``None`` when the module is not compiled."""
        if self.compile in (None, False):
            return None
        return "default" if self.compile is True else str(self.compile)

    def trainer_args(self) -> dict[str, Any]:
        """The Lightning ``Trainer`` keyword arguments this config sets, as a plain ``dict``.

        ``accelerator``, ``devices``, ``strategy``, ``precision``, ``accumulate_grad_batches`` and
        ``num_nodes``, each under the ``Trainer`` argument's own name. The extended space's other
        fields (``compile``, ``channels_last``, ``float32_matmul_precision``, the DataLoader's
        ``pin_memory``/``prefetch_factor``) are not ``Trainer`` arguments and are not included.
        Used by the trial process (``Trainer(**config.trainer_args(), ...)``) and by the export's
        ``trainer:`` section, so the two cannot drift apart.

        Returns:
            Argument name to value, in the order above (JSON-serialisable).
        """
        return {
            "accelerator": self.accelerator,
            "devices": self.devices,
            "strategy": self.strategy,
            "precision": self.precision,
            "accumulate_grad_batches": self.accumulate_grad_batches,
            "num_nodes": self.num_nodes,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain ``dict`` of the fields, for JSON and Optuna user attributes (extended fields only when set)."""
        out = dataclasses.asdict(self)
        for name in EXTENDED_FIELDS:
            if out[name] is None or (name.endswith("_args") and not out[name]):
                del out[name]
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrialConfig:
        """Build from a mapping, rejecting unknown keys.

        Raises:
            UsageError: A key is not a field, or a value is out of range.
        """
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UsageError(f"unknown config key(s) {unknown}; known keys: {known}")
        return cls(**values)

    def replace(self, **changes: Any) -> TrialConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
