"""The OOM frontier over a study's trials (:mod:`autotune.frontier`): settings where trials ran out of
memory, and the configs predicted to (by the frontier, then the study's memory model)."""

from __future__ import annotations

from typing import Any

from autotune.config import TrialConfig
from autotune.frontier import event_of, frontier_summary, predicted_oom
from autotune.study.settings import settings_of


def _memory_events(study, trials: list | None = None) -> list:
    """The memory events of the study's finished trials (of ``trials``, a snapshot of ``study.get_trials()``, when given)."""
    events = []
    for t in study.get_trials(deepcopy=False) if trials is None else trials:
        if t.state.is_finished():
            event = event_of(t.number, t.state.name, t.user_attrs)
            if event is not None:
                events.append(event)
    return events


def _predicted_oom(study, config: TrialConfig) -> str | None:
    """:func:`autotune.frontier.predicted_oom` over the study's finished trials, then the memory model."""

    reason = predicted_oom(config.to_dict(), _memory_events(study))
    settings = settings_of(study)
    if settings is None:
        return reason
    model = (settings.memory_model or {}).get(config.precision)
    if (
        reason is None
        and model
        and model.get("max_batch") is not None
        and config.devices == settings.devices
        and config.batch_size > model["max_batch"]
    ):
        reason = (
            f"predicted OOM by the memory model: per-device batch {config.batch_size} > {model['max_batch']}, the most "
            f"that fits {config.precision} in {1 - settings.memory_model_margin:.0%} of {settings.memory_limit_gib:g} GiB"
        )
    return reason


def oom_frontier(study, trials: list | None = None) -> list[dict[str, Any]]:
    """The study's OOM frontier (:func:`autotune.frontier.frontier_summary`), for settings where some
    trial ran out of memory; over ``trials`` (a snapshot of ``study.get_trials()``, digests will do) when given."""

    return [row for row in frontier_summary(_memory_events(study, trials)) if row["oom_from"] is not None]
