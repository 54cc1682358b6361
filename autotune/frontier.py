"""The out-of-memory frontier: which per-device batch sizes fit, learnt from the trials (pure functions).

Running out of memory is not random: at fixed devices, strategy and precision, the memory a step
needs grows with the per-device batch size (gradient accumulation does not change it: each
micro-batch is freed before the next), and a wider dtype needs at least as much as a narrower one.
So:

- a trial that ran out of memory at per-device batch ``b`` and precision ``p`` makes every config
  with the same devices and strategy, a batch ``>= b`` and a precision at least as wide as ``p``
  infeasible: such configs are *predicted OOM*, not run, and stored as PRUNED with that reason;
- a trial that completed at batch ``b`` shows that every batch ``<= b`` fits at that precision or a
  narrower one (the frontier reports it; nothing is skipped for it).

"The same settings" also means the same memory-relevant knobs of the extended space: ``compile``,
``channels_last`` and the searched constructor arguments (``model_args``, ``data_args``: a wider
layer needs more memory per sample); see :func:`memory_setting`.

The events are the study's own trials (a failed trial's ``fail_kind`` is ``oom``), so resumed studies
and every worker sharing the storage see the same frontier.

Precision widths, an order of the memory per sample (activations and their gradients):
``64-true`` 8 > ``32-true`` 4 > ``16-mixed``/``bf16-mixed`` 3 (autocast keeps some activations in
fp32) > ``16-true``/``bf16-true`` 2. Only the order is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["WIDTH", "MemoryEvent", "event_of", "frontier_summary", "memory_setting", "predicted_oom"]

WIDTH = {"64-true": 8, "32-true": 4, "16-mixed": 3, "bf16-mixed": 3, "16-true": 2, "bf16-true": 2}


@dataclass(frozen=True)
class MemoryEvent:
    """One trial's memory outcome: it ran out of memory (``oom``) or completed, at these settings."""

    batch_size: int
    precision: str
    devices: int
    strategy: str
    oom: bool
    trial: int = -1
    setting: str = ""


#: Config fields besides devices, strategy and precision that change the memory a step needs.
MEMORY_FIELDS = ("compile", "channels_last", "model_args", "data_args")


def memory_setting(config: Mapping[str, Any]) -> str:
    """A key of the memory-relevant extended knobs of a config (``""`` when none is set)."""
    import json

    extra = {k: config[k] for k in MEMORY_FIELDS if config.get(k) not in (None, False, {})}
    return json.dumps(extra, sort_keys=True) if extra else ""


def event_of(number: int, state: str, attrs: Mapping[str, Any]) -> MemoryEvent | None:
    """The memory event of a finished trial (state name and user attributes), or ``None`` when the
    trial says nothing about memory (running, pruned, or failed for another reason)."""
    config = attrs.get("config")
    if not config:
        return None
    oom = state == "FAIL" and attrs.get("fail_kind") == "oom"
    if not oom and state != "COMPLETE":
        return None
    devices = int(config.get("devices", 1)) * int(config.get("num_nodes", 1))
    return MemoryEvent(
        int(config["batch_size"]),
        str(config["precision"]),
        devices,
        str(config.get("strategy", "auto")),
        oom,
        number,
        memory_setting(config),
    )


def _same_setting(event: MemoryEvent, config: Mapping[str, Any]) -> bool:
    devices = int(config.get("devices", 1)) * int(config.get("num_nodes", 1))
    return event.devices == devices and event.strategy == str(config.get("strategy", "auto")) and event.setting == memory_setting(config)


def predicted_oom(config: Mapping[str, Any], events: Iterable[MemoryEvent]) -> str | None:
    """Why ``config`` would run out of memory, from earlier OOMs, or ``None``.

    Args:
        config: A trial config (``batch_size``, ``precision``, ``devices``, ``num_nodes``, ``strategy``).
        events: Memory events of the study's finished trials.

    Returns:
        A one-line reason naming the trial that ran out of memory, or ``None``.
    """
    width = WIDTH.get(str(config["precision"]), 4)
    for e in events:
        if e.oom and _same_setting(e, config) and int(config["batch_size"]) >= e.batch_size and width >= WIDTH.get(e.precision, 4):
            return (
                f"predicted OOM: trial {e.trial} ran out of memory at per-device batch {e.batch_size} with {e.precision} "
                f"(this config: batch {config['batch_size']}, {config['precision']}, same devices and strategy)"
            )
    return None


def frontier_summary(events: Iterable[MemoryEvent]) -> list[dict[str, Any]]:
    """Per (devices, strategy, precision, memory setting): the largest batch that fit and the smallest that ran out of memory.

    Returns:
        Rows ``{"devices", "strategy", "precision", "fits_up_to", "oom_from"}`` (None when unknown),
        and ``"setting"`` (:func:`memory_setting`) when the extended knobs set one.
    """
    rows: dict[tuple, dict[str, Any]] = {}
    for e in events:
        row = rows.setdefault(
            (e.devices, e.strategy, e.precision, e.setting),
            {
                "devices": e.devices,
                "strategy": e.strategy,
                "precision": e.precision,
                "fits_up_to": None,
                "oom_from": None,
                **({"setting": e.setting} if e.setting else {}),
            },
        )
        if e.oom:
            row["oom_from"] = e.batch_size if row["oom_from"] is None else min(row["oom_from"], e.batch_size)
        else:
            row["fits_up_to"] = e.batch_size if row["fits_up_to"] is None else max(row["fits_up_to"], e.batch_size)
    return [rows[k] for k in sorted(rows)]
