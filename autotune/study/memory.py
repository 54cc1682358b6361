"""The OOM frontier over a study's trials (:mod:`autotune.frontier`): settings where trials ran out of
memory, and the configs predicted to (by the frontier, then the study's memory model)."""

from __future__ import annotations

import weakref
from typing import Any

from autotune.config import TrialConfig
from autotune.frontier import event_of, frontier_summary, predicted_oom
from autotune.study.settings import settings_of

#: Per storage object (weakly: it goes with its storage) and study id: the trial ids already seen
#: finished, and the earliest memory event of each distinct outcome.
_SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _memory_events(study, trials: list | None = None) -> list:
    """The memory events (:func:`autotune.frontier.event_of`) of the study's finished trials, one per
    distinct outcome (batch, precision, devices, strategy, setting, OOM or not): its earliest trial.

    Each finished trial is turned into its event once (Optuna never changes a finished trial); a
    call then costs one pass of id lookups over the study. The earliest trial of each outcome is
    what :func:`autotune.frontier.predicted_oom` names, and :func:`autotune.frontier.frontier_summary`
    needs only the distinct outcomes. ``trials``: a snapshot of ``study.get_trials()`` (or its digests) to read.
    """
    studies = _SEEN.setdefault(study._storage, {})
    seen, first = studies.setdefault(study._study_id, (set(), {}))
    for t in study.get_trials(deepcopy=False) if trials is None else trials:
        if t._trial_id in seen or not t.state.is_finished():
            continue
        seen.add(t._trial_id)
        event = event_of(t.number, t.state.name, t.user_attrs)
        if event is not None:
            outcome = (event.batch_size, event.precision, event.devices, event.strategy, event.setting, event.oom)
            if outcome not in first or event.trial < first[outcome].trial:
                first[outcome] = event
    return sorted(first.values(), key=lambda e: e.trial)


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
