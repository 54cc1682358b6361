"""A digest of a study's trials: what the queries over every trial read, and nothing more.

Reading a trial in full parses ~50 user attributes from JSON (its loss curve, its per-rank figures,
its applied settings): ~0.3 ms a trial, ~3 s for a study of 10,000 trials, more than the rest of
``autotune show`` or ``autotune export`` together. Yet the queries over *every* trial (the
recommendation, the confirmation groups, the OOM frontier, the input-bound advice, the order of
``autotune show``'s table) read a dozen small ones (:data:`DIGEST_KEYS`). :func:`digest_trials`
reads every trial's number, state, params and values with those attributes only
(:func:`autotune.bulk_read.read_trials` with ``user_attr_keys``), and :func:`full_trials` then reads
in full the few trials a command prints or exports.

A digest is an ``optuna.trial.FrozenTrial`` whose ``user_attrs`` is a :class:`DigestAttrs`: reading an
attribute the digest did not read raises :class:`UnreadAttribute` (a bug to fix by adding the key to
:data:`DIGEST_KEYS`, or by reading the trial in full) instead of reading as absent. Its system
attributes likewise (none unless asked for), and it has no intermediate values. ``autotune report``
reads a few more keys (:data:`autotune.html_report.REPORT_KEYS`).

Storages other than autotune's RDB storage (an in-memory study) give full trials: they are in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DIGEST_KEYS", "DigestAttrs", "UnreadAttribute", "digest_trials", "full_trials", "is_digest"]

#: The user attributes a digest reads: those :func:`autotune.study.recommendation`,
#: :func:`~autotune.study.confirmation`, :func:`~autotune.study.confirmed_speed`,
#: :func:`~autotune.study.oom_frontier`, :func:`autotune.summary.input_bound_line` (over the other
#: trials), :func:`autotune.contention.busy_run_line` and the order of ``autotune show``'s table
#: (:func:`autotune.report.sort_key`) read.
DIGEST_KEYS = frozenset(
    {
        "baseline",
        "config",
        "confirm_of",
        "confirm_samples",
        "confirm_budget",
        "incumbent",
        "pair_cap",
        "pair_index",
        "pair_of",
        "pair_run",
        "duplicate_of",
        "fail_kind",
        "feasible",
        "goodput",
        "gpu_other_processes",
        "host_cpus",
        "host_load",
        "loss",
        "other_cpu_fraction",
        "samples_per_sec",
        "samples_to_target",
        "stage",
        "steal_fraction",
        "stopped_at_target",
        "target_reached",
        "time_to_target",
        "trial_samples",
    }
)

#: Most trials :func:`full_trials` reads by id; for more, it reads the whole study (a query's bound
#: parameters are limited: SQLite's default limit is 32,766).
_BY_ID_MAX = 1000
#: The largest id Optuna's ``trials.trial_id`` column holds (a 32-bit ``INTEGER``): reading by id asks
#: for no trial newer than it.
_LAST_TRIAL_ID = 2**31 - 1


class UnreadAttribute(AssertionError):
    """A digest was asked for an attribute it did not read: a bug in autotune, not in the study."""


class DigestAttrs(dict):
    """The attributes a digest read (a plain ``dict`` of them), which raises :class:`UnreadAttribute`
    for any other key instead of reading it as absent.

    Args:
        values: The attributes read.
        read: The keys read (``values`` holds those the trial has).
    """

    def __init__(self, values: Mapping[str, Any], read: frozenset[str]):
        super().__init__(values)
        self.read = read

    def _unread(self, key: Any) -> UnreadAttribute:
        return UnreadAttribute(
            f"attribute {key!r} is not in a trial digest (it reads {sorted(self.read)}); read the trial "
            "with autotune.study.digest.full_trials, or add the key to DIGEST_KEYS"
        )

    # (each check inline: the queries over 10,000 digests make ~100,000 of these calls)
    def __getitem__(self, key: Any) -> Any:
        if key in self.read:
            return dict.__getitem__(self, key)
        raise self._unread(key)

    def __contains__(self, key: object) -> bool:
        if key in self.read:
            return dict.__contains__(self, key)
        raise self._unread(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self.read:
            return dict.get(self, key, default)
        raise self._unread(key)


def is_digest(trial: Any) -> bool:
    """Whether ``trial`` is a digest (else a full trial)."""
    return isinstance(trial.user_attrs, DigestAttrs)


def _rdb(study) -> Any:
    """The study's :class:`autotune.storage.ResilientRDBStorage` (under Optuna's trial cache), or ``None``."""
    from autotune.storage import ResilientRDBStorage

    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, ResilientRDBStorage) else None


def _read(
    rdb, study_id: int, included: set[int], greater: int, keys: frozenset[str] | None, system_keys: frozenset[str] = frozenset()
) -> list | None:
    """:func:`autotune.bulk_read.read_trials` through the storage's retries; ``None`` when it fails
    otherwise than by a lost connection (a future Optuna's other schema: read through Optuna instead)."""
    from autotune.bulk_read import read_trials
    from autotune.storage import is_transient

    def call() -> list | None:
        try:
            return read_trials(rdb.engine, study_id, None, included, greater, user_attr_keys=keys, system_attr_keys=system_keys)
        except Exception as e:
            if is_transient(e):
                raise
            return None

    return rdb._retry(call)


def digest_trials(study, keys: frozenset[str] = DIGEST_KEYS, system_keys: frozenset[str] = frozenset()) -> list:
    """Every trial of ``study``, ordered by number, as digests (full trials on other storages).

    Args:
        study: The study.
        keys: The user attributes read (:data:`DIGEST_KEYS` or more).
        system_keys: The system attributes read (none by default).

    Raises:
        autotune.errors.StorageUnreachableError: The database stayed unreachable past ``$AUTOTUNE_STORAGE_RETRY``.
    """
    rdb = _rdb(study)
    found = None if rdb is None else _read(rdb, study._study_id, set(), -1, keys, system_keys)
    if found is None:
        return study.get_trials(deepcopy=False)
    for t in found:
        t.user_attrs = DigestAttrs(t.user_attrs, keys)
        t.system_attrs = DigestAttrs(t.system_attrs, system_keys)
    return sorted(found, key=lambda t: t.number)


def full_trials(study, trials: Sequence[Any]) -> list:
    """The full trials of ``trials`` (digests or full trials of ``study``; a ``None`` stays ``None``), in the same order.

    Raises:
        autotune.errors.StorageUnreachableError: The database stayed unreachable past ``$AUTOTUNE_STORAGE_RETRY``.
    """
    wanted = {t._trial_id for t in trials if t is not None and is_digest(t)}
    if not wanted:
        return list(trials)
    rdb = _rdb(study) if len(wanted) <= _BY_ID_MAX else None
    found = None if rdb is None else _read(rdb, study._study_id, wanted, _LAST_TRIAL_ID, None)
    if found is None:
        every = {t.number: t for t in study.get_trials(deepcopy=False)}
        return [None if t is None else every[t.number] for t in trials]
    by_id = {t._trial_id: t for t in found}
    return [by_id[t._trial_id] if t is not None and is_digest(t) else t for t in trials]
