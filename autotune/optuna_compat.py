"""Every use of Optuna internals, in one place, so that an Optuna upgrade touches one file.

autotune drives trials with ask/tell through a shared queue of WAITING trials instead of
``Study.optimize``, and so needs a few things Optuna keeps private: the study's storage and ids, a
live :class:`optuna.trial.Trial` for a stored trial, the atomic WAITING -> RUNNING claim that
``Study.ask`` does (Optuna's ``optuna.study._optimize``/``Study._pop_waiting_trial_id``), heartbeats
outside ``optimize`` (``optuna.storages._heartbeat``), the ``fixed_params`` that
``Study.enqueue_trial`` stores, system attributes, and the form a trial's constraint is stored in
(:func:`set_constraint`). Checked against Optuna 5.0. It also holds the two places optuna-dashboard
0.21 is taught to honour that constraint (:func:`dashboard_honours_constraints`) and the one its
importance panel is given autotune's importances (:func:`dashboard_importances`).

:class:`autotune.storage.ResilientRDBStorage` also names the private storage methods that Optuna's
own wrappers call (``_PRIVATE_CALLS`` there), to retry them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

#: The system attribute Optuna reads a trial's constraint values from as a list (``optuna.study.
#: _constrained_optimization._CONSTRAINTS_KEY``): what a sampler's ``constraints_func`` stores, and the
#: only form optuna-dashboard 0.21 reads.
CONSTRAINTS_KEY = "constraints"

__all__ = [
    "claim_waiting",
    "dashboard_honours_constraints",
    "dashboard_importances",
    "fail_overdue_trials",
    "fixed_params",
    "heartbeat_interval",
    "record_heartbeat",
    "set_constraint",
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


def fail_overdue_trials(
    study: optuna.Study,
    seconds: Callable[[optuna.trial.FrozenTrial], float],
    callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None],
) -> list[int]:
    """Optuna's ``fail_stale_trials`` for a storage without heartbeats (``JournalStorage``,
    ``GrpcStorageProxy``): a RUNNING trial that started more than ``seconds(trial)`` ago is failed,
    and ``callback(study, trial)`` runs for each trial this process failed (another process that
    failed it first wins: Optuna's ``UpdateFinishedTrialError`` here, as in ``fail_stale_trials``).

    The start is the trial's ``datetime_start`` (the local time of the machine that claimed it, or of
    the proxy's): the machines' clocks must agree to well within ``seconds``.

    Returns:
        The numbers of the trials this process failed.
    """
    import copy
    import datetime

    storage = study._storage
    now = datetime.datetime.now()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if trial.datetime_start is None or (now - trial.datetime_start).total_seconds() < seconds(trial):
            continue
        try:
            if storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL):
                failed.append(trial._trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:  # told, or failed by another process, meanwhile
            pass
    for trial_id in failed:
        callback(study, copy.deepcopy(storage.get_trial(trial_id)))
    return [storage.get_trial(trial_id).number for trial_id in failed]


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


def set_constraint(study: optuna.Study, trial: Any, value: float) -> None:
    """Store a trial's one constraint (the loss tolerance; feasible when ``value <= 0``) as the list
    ``[value]`` in the system attribute ``constraints``.

    That is the form Optuna's samplers store for a ``constraints_func`` and read back as
    ``FrozenTrial.constraints == {"0": value}``, and the only form optuna-dashboard 0.21 reads: its
    trial list, history and Pareto figures show a trial stored with ``Trial.set_constraint`` (system
    attribute ``constraints:<name>``) as having no constraint. It is stored in one form only: two would
    count as two constraints (Optuna's GP sampler then fits a model per constraint, and fails on a
    resumed study whose older trials hold one).

    Args:
        study: The trial's study.
        trial: A live or frozen trial not yet told.
        value: The constraint value (finite; ``<= 0`` is feasible).
    """
    study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, [float(value)])


def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
    return all(v <= 0.0 for v in trial.constraints.values())


def dashboard_honours_constraints(storage: Any, best_trial: Callable[[str], optuna.trial.FrozenTrial | None]) -> None:
    """Make optuna-dashboard 0.21, served in this process on ``storage``, pick best trials among the
    feasible ones.

    The dashboard draws infeasible trials apart (it reads :data:`CONSTRAINTS_KEY`), but its best trial
    (the overview's "Best Trial (number=N)" and the trial list's "Best Trial" badge) is
    ``storage.get_best_trial``, the best value of any complete trial, and its multi-objective "best
    trials" are its own Pareto front of every complete trial (``optuna_dashboard._app.
    get_pareto_front_trials``). Here ``storage.get_best_trial`` (of this storage object only: serve
    the dashboard a storage of its own) returns ``best_trial(study name)``, else the best feasible
    trial (as Optuna's ``Study.best_trial`` chooses), else, with no feasible trial, the storage's own
    answer; and the dashboard's Pareto front leaves out infeasible trials, as ``Study.best_trials`` does.

    Args:
        storage: The Optuna storage the dashboard serves (an instance attribute overrides its method).
        best_trial: The trial to show as best in a single-objective study (read through another
            storage: Optuna's ``Study.best_trial`` calls ``get_best_trial``), or ``None`` to let the
            constraint alone choose; an exception counts as ``None``.
    """
    import optuna_dashboard._app as dashboard_app

    storage_best = storage.get_best_trial

    def get_best_trial(study_id: int) -> optuna.trial.FrozenTrial:
        try:
            chosen = best_trial(storage.get_study_name_from_id(study_id))
        except Exception:  # the dashboard must answer: the constraint alone chooses
            chosen = None
        if chosen is not None:
            return chosen
        complete = storage.get_all_trials(study_id, deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        feasible = [t for t in complete if _feasible(t)]
        if not feasible:
            return storage_best(study_id)
        if storage.get_study_directions(study_id)[0] == optuna.study.StudyDirection.MAXIMIZE:
            return max(feasible, key=lambda t: t.value)
        return min(feasible, key=lambda t: t.value)

    storage.get_best_trial = get_best_trial
    pareto_front = getattr(dashboard_app.get_pareto_front_trials, "__wrapped__", dashboard_app.get_pareto_front_trials)

    def feasible_pareto_front(trials, directions):
        return pareto_front([t for t in trials if _feasible(t)], directions)

    feasible_pareto_front.__wrapped__ = pareto_front  # type: ignore[attr-defined]
    dashboard_app.get_pareto_front_trials = feasible_pareto_front


def dashboard_importances(
    compute: Callable[[list[optuna.trial.FrozenTrial], list[optuna.study.StudyDirection], int], dict[str, float]],
) -> None:
    """Make optuna-dashboard 0.21, served in this process, show ``compute(trials, directions,
    objective id)`` in its parameter-importance panel.

    The panel's ``/api/studies/<id>/param_importances`` calls ``optuna_dashboard._app.
    get_param_importance_from_trials_cache``, which runs PED-ANOVA over every complete trial of the
    study; it is replaced here (the original stays as its ``__wrapped__``). The answers are cached per
    study, objective and set of complete trials, as the dashboard caches its own.

    Args:
        compute: Parameter name to importance (largest first; ``{}`` for none) from the study's
            trials (every state), its directions and the objective's index.
    """
    import threading

    import optuna_dashboard._app as dashboard_app
    from optuna_dashboard._importance import convert_to_importance_type

    original = getattr(
        dashboard_app.get_param_importance_from_trials_cache, "__wrapped__", dashboard_app.get_param_importance_from_trials_cache
    )
    cache: dict[tuple, list] = {}
    lock = threading.Lock()

    def importances(inmemory_cache, storage, study_id: int, objective_id: int, trials: list) -> list:
        key = (study_id, objective_id, tuple(t.number for t in trials if t.state == optuna.trial.TrialState.COMPLETE))
        with lock:
            if key not in cache:
                cache[key] = convert_to_importance_type(compute(trials, storage.get_study_directions(study_id), objective_id), trials)
            return cache[key]

    importances.__wrapped__ = original  # type: ignore[attr-defined]
    dashboard_app.get_param_importance_from_trials_cache = importances
