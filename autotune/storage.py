"""An Optuna RDB storage that rides out a database that is briefly unreachable.

A PostgreSQL server restarting, a network blip between a node and the database, or a SQLite file
locked longer than its lock timeout would otherwise crash every worker at its next storage call, and
with it the trials it runs. :class:`ResilientRDBStorage` is Optuna's own ``RDBStorage`` (sessions,
schema, heartbeats: all Optuna's) whose calls retry on *connection* errors (SQLAlchemy's
``OperationalError``, ``InterfaceError`` and ``DisconnectionError``, also when Optuna wraps them in
``StorageInternalError``) with capped exponential back-off, for up to ``retry_seconds`` in all, and
print one line when the database goes away and one when it is back. Any other error (bad data, an
integrity error, a finished trial) is raised at once. SQLAlchemy's ``pool_pre_ping`` (Optuna's
default) replaces the dead connections when the server returns.

Caveat: a call whose commit reached the database but whose answer was lost is sent again. Every
call autotune retries is idempotent (attributes, heartbeats, reads) or fails harmlessly the second
time (telling or claiming a trial already told or claimed).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from typing import Any, Callable

import optuna

__all__ = ["ResilientRDBStorage", "RETRY_SECONDS", "is_transient"]

#: Seconds a storage call keeps retrying a lost database before it raises (``AUTOTUNE_STORAGE_RETRY``).
RETRY_SECONDS = 120.0
#: Private methods that Optuna's own wrappers call (``_CachedStorage``, ``fail_stale_trials``); each
#: opens and commits its own session, so it can be retried whole.
_PRIVATE_CALLS = {"_create_new_trial", "_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param"}
_NOT_RETRIED = {
    "upgrade", "get_current_version", "get_head_version", "get_all_versions", "remove_session",
    "get_heartbeat_interval", "get_failed_trial_callback", "is_heartbeat_enabled",
}


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what Optuna wrapped) is a lost or refused database connection, or a lock."""
    import sqlalchemy.exc as sa

    seen = 0
    while error is not None and seen < 5:
        if isinstance(error, (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError)):
            return True
        if isinstance(error, sa.DBAPIError) and error.connection_invalidated:
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


class ResilientRDBStorage(optuna.storages.RDBStorage):
    """``optuna.storages.RDBStorage`` whose calls survive a database outage of up to ``retry_seconds``.

    Args:
        url, **kwargs: As for ``optuna.storages.RDBStorage``.
        label: How messages name the database (the URL with its password masked).
        retry_seconds: Longest outage a call waits out, s (default :data:`RETRY_SECONDS`, or
            ``$AUTOTUNE_STORAGE_RETRY``).
    """

    def __init__(self, url: str, *, label: str = "the study database", retry_seconds: float | None = None, **kwargs: Any):
        self._label = label
        self._retry_seconds = float(retry_seconds if retry_seconds is not None else os.environ.get("AUTOTUNE_STORAGE_RETRY", RETRY_SECONDS))
        self._outage_lock = threading.Lock()
        self._down_since: float | None = None
        super().__init__(url, **kwargs)

    def _retry(self, call: Callable[[], Any]) -> Any:
        delay, deadline = 0.25, None
        while True:
            try:
                result = call()
            except Exception as e:
                if not is_transient(e):
                    raise
                now = time.monotonic()
                deadline = deadline or now + self._retry_seconds
                with self._outage_lock:
                    if self._down_since is None:
                        self._down_since = now
                        first = str(e).splitlines()[0] if str(e) else type(e).__name__
                        print(f"warning: {self._label} is unreachable ({first[:160]}); retrying for up to {self._retry_seconds:g} s",
                              file=sys.stderr, flush=True)
                if now >= deadline:
                    raise
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 5.0)
                continue
            if self._down_since is not None:
                with self._outage_lock:
                    if self._down_since is not None:
                        print(f"{self._label} is reachable again after {time.monotonic() - self._down_since:.1f} s", file=sys.stderr, flush=True)
                        self._down_since = None
            return result


def _wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self, *args: Any, **kwargs: Any) -> Any:
        return self._retry(lambda: method(self, *args, **kwargs))

    return call


for _name in dir(optuna.storages.RDBStorage):
    _method = getattr(optuna.storages.RDBStorage, _name)
    public = not _name.startswith("_") or _name in _PRIVATE_CALLS
    if public and _name not in _NOT_RETRIED and callable(_method) and not isinstance(_method, type):
        setattr(ResilientRDBStorage, _name, _wrap(_name, _method))
