"""Every use of Optuna internals, in one place, so that an Optuna upgrade touches one file.

autotune drives trials with ask/tell through a shared queue of WAITING trials instead of
``Study.optimize``, and so needs a few things Optuna keeps private: the study's storage and ids, a
live :class:`optuna.trial.Trial` for a stored trial, the atomic WAITING -> RUNNING claim that
``Study.ask`` does (Optuna's ``optuna.study._optimize``/``Study._pop_waiting_trial_id``), heartbeats
outside ``optimize`` (``optuna.storages._heartbeat``), the ``fixed_params`` that
``Study.enqueue_trial`` stores, and system attributes. Checked against Optuna 5.0.

:class:`autotune.storage.ResilientRDBStorage` also names the private storage methods that Optuna's
own wrappers call (``_PRIVATE_CALLS`` there), to retry them.
"""

from __future__ import annotations

from typing import Any

import optuna

__all__ = [
    "claim_waiting",
    "fixed_params",
    "heartbeat_interval",
    "record_heartbeat",
    "set_study_system_attr",
    "set_trial_system_attr",
    "study_system_attrs",
    "trial_of",
]


def trial_of(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.trial.Trial:
    """A live :class:`optuna.trial.Trial` for a stored trial (to set attributes on it or tell it)."""
    return optuna.trial.Trial(study, frozen._trial_id)


def claim_waiting(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.trial.Trial | None:
    """Atomically move a WAITING trial to RUNNING, as ``Study.ask`` does for its queue.

    The storage's conditional update lets exactly one of several processes win; the winner records a
    first heartbeat at once (a RUNNING trial with none is never found stale) and runs the sampler's
    ``before_trial``.

    Returns:
        The claimed trial, or ``None`` when another process took it first.
    """
    storage = study._storage
    try:
        if not storage.set_trial_state_values(frozen._trial_id, state=optuna.trial.TrialState.RUNNING):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    if heartbeat_interval(study):
        # heartbeat_interval() is set only on storages with heartbeats; BaseStorage's type lacks the method
        storage.record_heartbeat(frozen._trial_id)  # type: ignore[attr-defined]
    study.sampler.before_trial(study, storage.get_trial(frozen._trial_id))
    return optuna.trial.Trial(study, frozen._trial_id)


def heartbeat_interval(study: optuna.Study) -> int | None:
    """Seconds between heartbeats of the study's storage, or ``None`` when it has no heartbeats."""
    storage = study._storage
    return storage.get_heartbeat_interval() if hasattr(storage, "get_heartbeat_interval") else None


def record_heartbeat(study: optuna.Study, trial: optuna.trial.Trial) -> None:
    """Record one heartbeat of a running trial (as ``optuna.storages._heartbeat`` does inside ``optimize``)."""
    # only called with heartbeats on (an RDB storage); BaseStorage's type lacks the method
    study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]


def fixed_params(frozen: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The params ``Study.enqueue_trial`` fixed for a trial (``{}`` for a sampled one)."""
    return dict(frozen.system_attrs.get("fixed_params") or {})


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """The study's system attributes, read fresh from its storage."""
    return study._storage.get_study_system_attrs(study._study_id)


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Set one system attribute of the study (``Study.set_system_attr`` is deprecated)."""
    study._storage.set_study_system_attr(study._study_id, key, value)


def set_trial_system_attr(study: optuna.Study, trial: Any, key: str, value: Any) -> None:
    """Set one system attribute of a trial (a :class:`~optuna.trial.FrozenTrial` or a live trial)."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)
