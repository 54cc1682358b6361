"""Opening a study's Optuna storage (:func:`open_storage`), and an RDB storage that rides out a
database that is briefly unreachable.

:func:`open_storage` gives Optuna's own storage for each kind of URL (:mod:`autotune.storage_url`):
an RDB storage (SQLite, PostgreSQL, ...) as Optuna's trial cache over :class:`ResilientRDBStorage`;
``grpc://HOST:PORT`` as Optuna's ``GrpcStorageProxy``; ``journal:PATH`` as Optuna's ``JournalStorage``
over a ``JournalFileBackend``. Only the RDB storage has heartbeats (Optuna 5.0's ``JournalStorage`` and
``GrpcStorageProxy`` do not implement ``BaseHeartbeat``): on the other two a trial whose worker died is
failed once it has run longer than its ``--trial-timeout`` plus the grace period
(:func:`autotune.optuna_compat.fail_overdue_trials`).


A PostgreSQL server restarting, a network blip between a node and the database, or a SQLite file
locked longer than its lock timeout would otherwise crash every worker at its next storage call, and
with it the trials it runs. :class:`ResilientRDBStorage` is Optuna's own ``RDBStorage`` (sessions,
schema, heartbeats: all Optuna's) whose calls retry on *connection* errors (SQLAlchemy's
``OperationalError``, ``InterfaceError`` and ``DisconnectionError``, also when Optuna wraps them in
``StorageInternalError``) with capped exponential back-off, for up to ``retry_seconds`` in all, and
print one line when the database goes away and one when it is back. Any other error (bad data, an
integrity error, a finished trial) is raised at once. SQLAlchemy's ``pool_pre_ping`` (Optuna's
default) replaces the dead connections when the server returns. On PostgreSQL, libpq's connect
timeout, TCP keepalives and ``tcp_user_timeout`` (:data:`autotune.storage_url.LIBPQ_TIMEOUTS`) make a server that went
silent (a partition that drops packets) a connection error too, within about a minute.

Caveat: a call whose commit reached the database but whose answer was lost is sent again. Every
call autotune retries is idempotent (attributes, heartbeats, reads) or fails harmlessly the second
time (telling or claiming a trial already told or claimed).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import re
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import StorageError, StorageUnreachableError

# the URL checks live in autotune.storage_url; they are named here too, where every caller imports them from
from autotune.storage_url import (
    _libpq_timeouts,
    _sqlite_path,
    check_storage_url,
    check_writable,
    grpc_address,
    journal_path,
    mask_text,
    mask_url,
    storage_file,
    storage_kind,
)

__all__ = [
    "GRPC_CONNECT_SECONDS",
    "PROXY_LOST",
    "RETRY_SECONDS",
    "ResilientRDBStorage",
    "check_storage_url",
    "check_writable",
    "heartbeat_seconds",
    "is_proxy_unreachable",
    "is_transient",
    "mask_text",
    "mask_url",
    "open_storage",
    "retry_stale_trial",
    "storage_file",
    "storage_kind",
]

#: Seconds between a running trial's heartbeats, and after which a silent trial is stale
#: (environment variables ``AUTOTUNE_HEARTBEAT_INTERVAL`` and ``AUTOTUNE_HEARTBEAT_GRACE``).
HEARTBEAT_INTERVAL = 10
HEARTBEAT_GRACE = 60

#: Seconds a storage call keeps retrying a lost database before it raises (``AUTOTUNE_STORAGE_RETRY``).
RETRY_SECONDS = 120.0
#: Seconds a SQLite call waits for a lock (less when ``$AUTOTUNE_STORAGE_RETRY`` is shorter).
SQLITE_LOCK_TIMEOUT = 60.0
#: Seconds a ``grpc://`` storage waits for its proxy to answer when opened (less when
#: ``$AUTOTUNE_STORAGE_RETRY`` is shorter, at least 1 s).
GRPC_CONNECT_SECONDS = 10.0


def _retry_seconds() -> float:
    """``$AUTOTUNE_STORAGE_RETRY`` (seconds >= 0), else :data:`RETRY_SECONDS`.

    Raises:
        UsageError: The variable is not a number >= 0.
    """
    raw = os.environ.get("AUTOTUNE_STORAGE_RETRY", "")
    try:
        value = float(raw) if raw.strip() else RETRY_SECONDS
    except ValueError:
        value = -1.0
    if not value >= 0:
        from autotune.errors import UsageError

        raise UsageError(f"$AUTOTUNE_STORAGE_RETRY={raw!r} must be a number of seconds >= 0 (how long a lost database is waited for)")
    return value


#: System attribute of a queued trial: a random token that makes retrying its creation idempotent
#: (:meth:`ResilientRDBStorage._create_new_trial`).
CREATE_TOKEN_ATTR = "autotune:create_token"

#: Private methods that Optuna's own wrappers call (``_CachedStorage``, ``fail_stale_trials``); each
#: opens and commits its own session, so it can be retried whole.
_PRIVATE_CALLS = {"_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param"}
_NOT_RETRIED = {
    "create_new_trial",  # calls _create_new_trial, which retries itself (see there)
    "upgrade",
    "get_current_version",
    "get_head_version",
    "get_all_versions",
    "remove_session",
    "get_heartbeat_interval",
    "get_failed_trial_callback",
    "is_heartbeat_enabled",
}


def is_transient(error: BaseException | None) -> bool:
    """Whether ``error`` (or what Optuna wrapped) is a lost or refused database connection, or a lock.

    A SQLite database that is read-only (``attempt to write a readonly database``) is not: waiting
    does not make it writable.
    """
    import sqlalchemy.exc as sa

    seen = 0
    while error is not None and seen < 5:
        if "readonly database" in str(error):
            return False
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
        self._retry_seconds = float(retry_seconds) if retry_seconds is not None else _retry_seconds()
        self._outage_lock = threading.Lock()
        self._down_since: float | None = None
        self._creating = threading.local()  # attempts of the trial creation in progress on this thread
        super().__init__(url, **kwargs)

    def _retry(self, call: Callable[[], Any]) -> Any:
        delay = 0.25
        while True:
            try:
                result = call()
            except Exception as e:
                if not is_transient(e):
                    raise
                now = time.monotonic()
                with self._outage_lock:
                    if self._down_since is None:
                        self._down_since = now
                        print(
                            f"warning: {self._label} is unreachable ({self._reason(e)}); retrying for up to {self._retry_seconds:g} s",
                            file=sys.stderr,
                            flush=True,
                        )
                    down_since = self._down_since
                # one deadline per outage, shared by every call that meets it
                deadline = down_since + self._retry_seconds
                if now >= deadline:
                    raise StorageUnreachableError(
                        f"{self._label} was unreachable for {now - down_since:.0f} s, longer than $AUTOTUNE_STORAGE_RETRY "
                        f"({self._retry_seconds:g} s; last error: {self._reason(e)}); every finished trial is stored: run the "
                        "same command again once it is back (a trial that was running goes stale and is retried)"
                    ) from e
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 5.0)
                continue
            if self._down_since is not None:
                with self._outage_lock:
                    if self._down_since is not None:
                        print(
                            f"{self._label} is reachable again after {time.monotonic() - self._down_since:.1f} s",
                            file=sys.stderr,
                            flush=True,
                        )
                        self._down_since = None
            return result

    def _create_new_trial(self, study_id: int, template_trial: Any = None) -> Any:
        """Optuna's ``RDBStorage._create_new_trial``, retried without ever creating the trial twice.

        A write is ambiguous when the connection is lost after the server committed it but before it
        answered; retrying ``enqueue_trial`` then queued two trials where one was asked for (a
        ``--trials 4`` search across an outage ran 5). A trial made from a template (every queued
        trial) carries a random :data:`CREATE_TOKEN_ATTR` system attribute, and every attempt after
        the first (ours, or Optuna's own retries inside this call) first looks for a trial of the
        study holding that token, under the study's row lock that trial creation takes.
        """
        if template_trial is None:
            return self._retry(lambda: optuna.storages.RDBStorage._create_new_trial(self, study_id, None))
        template = copy.copy(template_trial)
        template.system_attrs = {**template_trial.system_attrs, CREATE_TOKEN_ATTR: uuid.uuid4().hex}
        self._creating.attempts = 0
        try:
            return self._retry(lambda: optuna.storages.RDBStorage._create_new_trial(self, study_id, template))
        finally:
            self._creating.attempts = 0

    def _get_prepared_new_trial(self, study_id: int, template_trial: Any, session: Any) -> Any:
        attempts = getattr(self._creating, "attempts", 0)
        self._creating.attempts = attempts + 1
        token = template_trial.system_attrs.get(CREATE_TOKEN_ATTR) if template_trial is not None else None
        if token and attempts:
            from optuna.storages._rdb import models

            made = (
                session.query(models.TrialModel)
                .join(models.TrialSystemAttributeModel, models.TrialSystemAttributeModel.trial_id == models.TrialModel.trial_id)
                .filter(
                    models.TrialModel.study_id == study_id,
                    models.TrialSystemAttributeModel.key == CREATE_TOKEN_ATTR,
                    models.TrialSystemAttributeModel.value_json == json.dumps(token),
                )
                .one_or_none()
            )
            if made is not None:  # an earlier attempt's commit reached the server
                return made
        return super()._get_prepared_new_trial(study_id, template_trial, session)

    def _get_trials(self, study_id: int, states: Any, included_trial_ids: set[int], trial_id_greater_than: int) -> list:
        """Optuna's ``RDBStorage._get_trials`` (the read behind ``get_all_trials`` and Optuna's trial
        cache), through :func:`autotune.bulk_read.read_trials`: the same trials, ~5x faster. An error that
        is not a lost connection falls back to Optuna's own read."""
        from autotune.bulk_read import read_trials

        try:
            return read_trials(self.engine, study_id, states, included_trial_ids, trial_id_greater_than)
        except Exception as e:
            if is_transient(e):
                raise
            return super()._get_trials(study_id, states, included_trial_ids, trial_id_greater_than)

    def _reason(self, error: BaseException) -> str:
        """The first line of the database driver's own message (Optuna wraps it in a generic
        "invalid data in the commit" error), password masked, at most 160 characters."""
        import sqlalchemy.exc as sa

        inner: BaseException | None = error
        seen = 0
        while inner is not None and seen < 5 and not isinstance(inner, sa.SQLAlchemyError):
            inner = inner.__cause__ or inner.__context__
            seen += 1
        chosen = inner if isinstance(inner, sa.SQLAlchemyError) else error
        if isinstance(chosen, sa.DBAPIError) and chosen.orig is not None:
            chosen = chosen.orig
        text = str(chosen).strip().splitlines()[0] if str(chosen).strip() else type(chosen).__name__
        return mask_text(text, getattr(self, "url", ""))[:160]


def _wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self, *args: Any, **kwargs: Any) -> Any:
        return self._retry(lambda: method(self, *args, **kwargs))

    return call


for _name in dir(optuna.storages.RDBStorage):
    # a method ResilientRDBStorage defines itself (``_get_trials``) is wrapped, not replaced
    _method = ResilientRDBStorage.__dict__.get(_name) or getattr(optuna.storages.RDBStorage, _name)
    public = not _name.startswith("_") or _name in _PRIVATE_CALLS
    if public and _name not in _NOT_RETRIED and callable(_method) and not isinstance(_method, type):
        setattr(ResilientRDBStorage, _name, _wrap(_name, _method))


def freeze_read_trials() -> None:
    """Exempt every object alive now (the study's trials, just read) from Python's cyclic garbage
    collector (``gc.freeze``, Python 3.7+).

    A study of 10,000 trials is ~1 million Python objects (each trial's attribute dicts): every full
    collection, which CPython starts after enough allocations, walks them all, ~0.3-0.7 s. A search
    paid that between some of its trials (``benchmarks/scale.py``: a bimodal gap between trials at
    10,000 trials, none at 10). Finished trials live as long as the process, so collecting them never
    frees anything; trials read later stay collectable.
    """
    import gc

    gc.collect()
    gc.freeze()


def heartbeat_seconds() -> tuple[int, int]:
    """``(interval, grace)``: seconds between heartbeats (of a running trial, of a search run's plan),
    and of silence after which its process counts as gone (``$AUTOTUNE_HEARTBEAT_INTERVAL``,
    ``$AUTOTUNE_HEARTBEAT_GRACE``; defaults :data:`HEARTBEAT_INTERVAL`, :data:`HEARTBEAT_GRACE`)."""
    return (
        int(os.environ.get("AUTOTUNE_HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL)),
        int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE", HEARTBEAT_GRACE)),
    )


def retry_stale_trial(study, trial, why: str = "its worker stopped sending heartbeats (killed, or its machine lost)") -> None:
    """What happens to a trial failed as stale: the study's user attribute ``stale_trial_<number>``
    says ``why``, and Optuna's ``RetryFailedTrialCallback`` queues it once more (once only)."""
    import optuna

    study.set_user_attr(f"stale_trial_{trial.number}", f"stale: {why}; retried once")
    with warnings.catch_warnings():  # Optuna's deprecation and experimental notes: noise in a user's run
        warnings.simplefilter("ignore")
        optuna.storages.RetryFailedTrialCallback(max_retry=1)(study, trial)


def _heartbeat_kwargs() -> dict[str, Any]:
    return {
        "heartbeat_interval": heartbeat_seconds()[0],
        "grace_period": heartbeat_seconds()[1],
        "heartbeat_stale_trial_callback": retry_stale_trial,
    }


#: What the CLI says when a ``grpc://`` storage's proxy stops answering in the middle of a command.
PROXY_LOST = (
    "the storage proxy stopped answering (gRPC UNAVAILABLE); every finished trial is stored: restart "
    "`autotune storage-proxy`, then run the same command again (a trial that was running is retried once it "
    "has been RUNNING longer than --trial-timeout plus $AUTOTUNE_HEARTBEAT_GRACE)"
)


def is_proxy_unreachable(error: BaseException) -> bool:
    """Whether ``error`` is a gRPC call that found no storage proxy (status ``UNAVAILABLE``: the proxy
    stopped, or its machine or network went away). ``GrpcStorageProxy`` raises gRPC's own error."""
    code = getattr(error, "code", None)
    if not type(error).__module__.startswith("grpc") or not callable(code):
        return False
    try:
        return getattr(code(), "name", "") == "UNAVAILABLE"
    except Exception:
        return False


def _create_private(path: Path) -> None:
    """Create an empty SQLite or journal file readable by its owner only (``0600`` less the umask);
    SQLite's journal and WAL files copy the database file's mode. An error is left for the opener to report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        pass


def open_storage(url: str, *, create: bool = True, heartbeat: bool = False):
    """An Optuna storage for ``url`` (:mod:`autotune.storage_url`). Open it once per process and pass
    the object to every ``optuna.load_study``.

    - A database URL: Optuna's trial cache (``_CachedStorage``) over a :class:`ResilientRDBStorage`:
      finished trials are read from the database once, and each later read fetches only new and
      unfinished trials. SQLite files get a 60 s lock timeout (at most ``$AUTOTUNE_STORAGE_RETRY``).
      Calls ride out a database that is briefly unreachable. With ``heartbeat``, running trials send
      heartbeats and a trial silent for the grace period is failed as stale and retried once
      (processes that run trials).
    - ``grpc://HOST:PORT``: Optuna's ``GrpcStorageProxy`` (its own trial cache), once the proxy
      answers (waited for up to :data:`GRPC_CONNECT_SECONDS`). No heartbeats.
    - ``journal:PATH``: Optuna's ``JournalStorage`` over ``JournalFileBackend(PATH)`` with Optuna's
      ``JournalFileSymlinkLock`` (its default, which works on NFSv2 and later). No heartbeats.

    The default folder ``studies/`` is created when ``create`` (any other folder must exist). A new
    SQLite or journal file is created readable by its owner only (``0600``, the ``studies/`` folder
    ``0700``, less what the umask also removes).

    Raises:
        StorageError: As :func:`check_storage_url`, an unreachable server or proxy, or a file that
            is not a journal. The message shows the URL without its password.
    """
    check_storage_url(url, create=create)
    path = storage_file(url)
    if path is not None and create:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            _create_private(path)
    if storage_kind(url) == "journal":
        return _open_journal(url)
    if storage_kind(url) == "grpc":
        return _open_grpc(url)
    return _open_rdb(url, heartbeat)


def _open_journal(url: str):
    """Optuna's ``JournalStorage`` over the journal file of ``url`` (which it replays at once).

    Raises:
        StorageError: The file is not an Optuna journal, or cannot be read.
    """
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage

    path = str(journal_path(url))
    try:
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileSymlinkLock(path)))
    except ValueError as e:  # a line that is not JSON: another kind of file
        raise StorageError(
            f"storage {url!r}: {path!r} is not an Optuna journal file ({str(e).splitlines()[0]}); "
            "give the file that `autotune search --storage journal:PATH` wrote"
        ) from None
    except OSError as e:
        raise StorageError(f"cannot open storage {url!r}: {e.strerror or e}") from None


def _open_grpc(url: str):
    """Optuna's ``GrpcStorageProxy`` for ``url``, once its proxy answers.

    Raises:
        StorageError: No proxy answers within :data:`GRPC_CONNECT_SECONDS` (or ``$AUTOTUNE_STORAGE_RETRY``).
    """
    import warnings

    # gRPC's fork handlers (on by default) restart its poller thread in every forked child, and that
    # thread aborts the child (SIGABRT, "epoll_wait error: Bad file descriptor") when subprocess closes
    # the child's descriptors before exec: grpc/grpc#43055, grpcio 1.80 to at least 1.85. This process
    # forks only to exec trial processes, which never touch its channel, so the handlers are not needed.
    # Read when gRPC is first imported, so set before Optuna's proxy imports it; a user's value is kept.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    host, port = grpc_address(url)
    wait = max(1.0, min(GRPC_CONNECT_SECONDS, _retry_seconds()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        proxy = optuna.storages.GrpcStorageProxy(host=host, port=port)
    try:
        proxy.wait_server_ready(timeout=wait)
    except ConnectionError:
        proxy.close()
        raise StorageError(
            f"storage {url!r}: no storage proxy answers at {host}:{port} (waited {wait:g} s); start one there with "
            f"`autotune storage-proxy --storage DATABASE_URL --port {port}`, or check the host and port"
        ) from None
    return proxy


#: A database server refusing a connection because every slot is taken (PostgreSQL, MySQL).
_TOO_MANY_CLIENTS = re.compile(r"too many (clients|connections)|remaining connection slots are reserved", re.IGNORECASE)


def _no_free_connection(error: BaseException | None) -> bool:
    """Whether ``error``, or what it wraps (Optuna wraps the driver's error in "An exception is raised
    during the commit"), is a server refusing a connection because every slot is taken."""
    seen = 0
    while error is not None and seen < 6:
        if _TOO_MANY_CLIENTS.search(str(error)):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def _open_rdb(url: str, heartbeat: bool):
    """Optuna's trial cache over a :class:`ResilientRDBStorage` (see :func:`open_storage`).

    Raises:
        StorageError: The server cannot be reached, or the database needs a schema upgrade.
    """
    # a database server: keep one idle connection per process, open more only while threads (the
    # trial's and the run's heartbeats, the pruning watcher) use them at once; SQLAlchemy's default
    # keeps up to 5 open, and 32 workers then filled PostgreSQL's default 100 slots
    engine_kwargs: dict[str, Any] = {"pool_size": 1, "max_overflow": 8}
    if _sqlite_path(url) is not None:
        # SQLite waits a lock out inside each call: never longer than the retry window, so that a lock
        # held past $AUTOTUNE_STORAGE_RETRY stops the process at the limit as an outage does
        engine_kwargs = {"connect_args": {"timeout": max(1.0, min(SQLITE_LOCK_TIMEOUT, _retry_seconds()))}}
    elif libpq_args := _libpq_timeouts(url):
        engine_kwargs["connect_args"] = libpq_args
    import warnings

    masked = mask_url(url)
    deadline, said = time.monotonic() + _retry_seconds(), False
    attempt = 0
    while True:
        attempt += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                rdb = ResilientRDBStorage(
                    url, label=f"storage {masked}", engine_kwargs=engine_kwargs, **(_heartbeat_kwargs() if heartbeat else {})
                )
                # Optuna's own cache of finished trials (``optuna.load_study`` wraps a bare RDBStorage in a
                # new, empty one on every call): each later read fetches only new and unfinished trials
                from autotune.bulk_read import OrderedTrialCache

                return OrderedTrialCache(rdb)
        except Exception as e:  # SQLAlchemy raises several types for a bad URL or server
            detail = mask_text(str(e).splitlines()[0] if str(e) else type(e).__name__, url)
            if "upgrade" in str(e) and "storage" in str(e):
                raise StorageError(
                    f"the database {masked!r} was made by an older Optuna and needs a schema upgrade; back it up, then run: "
                    f"optuna storage upgrade --storage {masked}"
                ) from None
            racing = type(e).__name__ in ("IntegrityError", "ProgrammingError") or (
                type(e).__name__ == "OperationalError" and ("locked" in detail or "already exists" in detail)
            )
            if attempt < 3 and racing:
                # another process is creating the same tables right now: try again once they exist
                time.sleep(attempt - 0.5)
                continue
            if _no_free_connection(e) and time.monotonic() < deadline:
                # every connection slot of the server is taken (many workers at once): wait for one, as for an outage
                if not said:
                    print(
                        f"warning: storage {masked} has no free connection ({detail}); retrying for up to {_retry_seconds():g} s "
                        "(many workers: put autotune storage-proxy in front of the database, docs/scaling-out.md)",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                time.sleep(1.0 + random.random())
                continue
            raise StorageError(f"cannot open storage {masked!r}: {detail}") from None
