"""The one configuration object that travels from the sampler to the trial and on to the export.

:class:`TrialConfig` uses Lightning's and PyTorch's own names for its fields, so that a field name is
also the argument it sets (``Trainer(precision=...)``, ``DataLoader(num_workers=...)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from autotune.errors import UsageError

__all__ = ["TrialConfig", "PRECISIONS", "TRAINER_KNOBS", "LOADER_KNOBS", "MODULE_KNOBS"]

#: Lightning's canonical precision strings (``Trainer(precision=...)``).
PRECISIONS = ("64-true", "32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")

#: Knobs that are ``Trainer`` arguments.
TRAINER_KNOBS = ("precision", "accumulate_grad_batches")
#: Knobs set on the user's DataModule or LightningModule, where its data loaders read them.
LOADER_KNOBS = ("batch_size", "num_workers")
#: Knobs set on the user's LightningModule.
MODULE_KNOBS = ("lr",)


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

    @property
    def world_size(self) -> int:
        """Processes taking part in one optimizer step: ``devices * num_nodes``."""
        return self.devices * self.num_nodes

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step: ``batch_size * accumulate_grad_batches * devices * num_nodes``."""
        return self.batch_size * self.accumulate_grad_batches * self.world_size

    def to_dict(self) -> dict[str, Any]:
        """Plain ``dict`` of the fields, for JSON and Optuna user attributes."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrialConfig":
        """Build from a mapping, rejecting unknown keys.

        Raises:
            UsageError: A key is not a field, or a value is out of range.
        """
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UsageError(f"unknown config key(s) {unknown}; known keys: {known}")
        return cls(**values)

    def replace(self, **changes: Any) -> "TrialConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
