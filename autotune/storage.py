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
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import StorageError, StorageUnreachableError, StudyNotFoundError

__all__ = [
    "RETRY_SECONDS",
    "ResilientRDBStorage",
    "check_storage_url",
    "check_writable",
    "heartbeat_seconds",
    "is_transient",
    "mask_text",
    "mask_url",
    "open_storage",
]

#: Seconds between a running trial's heartbeats, and after which a silent trial is stale
#: (environment variables ``AUTOTUNE_HEARTBEAT_INTERVAL`` and ``AUTOTUNE_HEARTBEAT_GRACE``).
HEARTBEAT_INTERVAL = 10
HEARTBEAT_GRACE = 60

#: Seconds a storage call keeps retrying a lost database before it raises (``AUTOTUNE_STORAGE_RETRY``).
RETRY_SECONDS = 120.0
#: Seconds a SQLite call waits for a lock (less when ``$AUTOTUNE_STORAGE_RETRY`` is shorter).
SQLITE_LOCK_TIMEOUT = 60.0


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


#: Private methods that Optuna's own wrappers call (``_CachedStorage``, ``fail_stale_trials``); each
#: opens and commits its own session, so it can be retried whole.
_PRIVATE_CALLS = {"_create_new_trial", "_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param"}
_NOT_RETRIED = {
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


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


def check_writable(url: str) -> None:
    """Check that this user can write a SQLite storage, before anything is measured.

    SQLite writes the database file and, beside it, its journal: so the file (when it exists) and its
    folder must be writable; for a new file, the nearest folder that exists (``studies/`` is created
    in the current folder). Other storages are checked by their server when opened.

    Raises:
        StorageError: The file or the folder is not writable (the message names it and the fix).
    """
    path = _sqlite_path(url)
    if path is None or str(path) in ("", ":memory:"):
        return
    masked = mask_url(url)
    if path.is_file() and not os.access(path, os.W_OK):
        raise StorageError(
            f"storage {masked!r}: the database file {str(path)!r} is not writable; make it writable (chmod u+w {path}) "
            "or give --storage a copy you can write"
        )
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        what = "writes its journal" if path.exists() else "creates the database"
        raise StorageError(
            f"storage {masked!r}: the folder {str(folder)!r} is not writable, and SQLite {what} there; "
            f"make it writable (chmod u+w {folder}) or give --storage a database in a folder you can write"
        )


#: Query parameters that carry a credential in a database URL (libpq's ``password``/``sslpassword``,
#: MySQL drivers' ``passwd``/``pwd``, tokens); any key containing one of these words is masked.
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token")
_SECRET_QUERY = re.compile(r"(?i)([?&;][^=&;]*(?:" + "|".join(_SECRET_WORDS) + r")[^=&;]*=)[^&;#]*")


def _is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def _secrets(url: str) -> list[str]:
    """The credential values in ``url`` (its password and secret query values), to scrub from messages."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        return []
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if _is_secret(key):
            found += [value] if isinstance(value, str) else list(value)
    return [str(v) for v in found if v and len(str(v)) >= 3]


def mask_text(text: str, url: str) -> str:
    """``text`` with ``url`` and each credential in it replaced by their masked forms."""
    if not url:
        return text
    text = text.replace(url, mask_url(url))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def mask_url(url: str) -> str:
    """The storage URL with every credential replaced by ``***``.

    Masks the password of ``user:password@host`` and the value of every query parameter whose name
    holds a credential word (``?password=``, ``?host=..&user=..&password=..``, ``sslpassword``,
    ``passwd``, ``pwd``, ``token``, ``secret``), as SQLAlchemy's ``make_url`` parses them; a URL
    SQLAlchemy cannot parse is masked by pattern.
    """
    if "://" not in url:
        return url
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        query = {k: ("***" if _is_secret(k) else v) for k, v in parsed.query.items()}
        return parsed.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")
    except Exception:  # not a SQLAlchemy URL: mask user:password@ and secret query values by pattern
        scheme, rest = url.split("://", 1)
        if "@" in rest.split("/", 1)[0]:
            creds, host = rest.split("@", 1)
            rest = f"{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else rest
        return _SECRET_QUERY.sub(r"\1***", f"{scheme}://{rest}")


def heartbeat_seconds() -> tuple[int, int]:
    """``(interval, grace)``: seconds between heartbeats (of a running trial, of a search run's plan),
    and of silence after which its process counts as gone (``$AUTOTUNE_HEARTBEAT_INTERVAL``,
    ``$AUTOTUNE_HEARTBEAT_GRACE``; defaults :data:`HEARTBEAT_INTERVAL`, :data:`HEARTBEAT_GRACE`)."""
    return (
        int(os.environ.get("AUTOTUNE_HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL)),
        int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE", HEARTBEAT_GRACE)),
    )


def _heartbeat_kwargs() -> dict[str, Any]:
    import optuna

    def stale(study, trial) -> None:
        study.set_user_attr(
            f"stale_trial_{trial.number}", "stale: its worker stopped sending heartbeats (killed, or its machine lost); retried once"
        )
        optuna.storages.RetryFailedTrialCallback(max_retry=1)(study, trial)

    return {
        "heartbeat_interval": heartbeat_seconds()[0],
        "grace_period": heartbeat_seconds()[1],
        "heartbeat_stale_trial_callback": stale,
    }


#: How a PostgreSQL URL starts (SQLAlchemy has no ``postgres://``, which Heroku and libpq accept).
_POSTGRES_SCHEMES = "postgresql:// (or postgresql+psycopg://)"


def check_storage_url(url: str, *, create: bool = True) -> None:
    """Check a storage URL without connecting to it or creating anything: its form, SQLAlchemy's
    dialect and driver for its scheme, and for SQLite the file's folder.

    Args:
        url: An SQLAlchemy database URL, e.g. ``sqlite:///studies/NAME.db`` or
            ``postgresql+psycopg://user@host/db``.
        create: The database may be created (a new SQLite file in an existing folder, or in
            ``studies/``, which :func:`open_storage` creates); else a SQLite file must exist.

    Raises:
        StorageError: An in-memory SQLite database, not a URL, a scheme SQLAlchemy does not know
            (``postgres://``: the message names ``postgresql://``), a driver that is not installed,
            or a SQLite path whose folder is missing or that is a folder. The message shows the
            URL without its password.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    path = _sqlite_path(url)
    if url.startswith("sqlite:") and (path is None or str(path) in ("", ":memory:")):
        raise StorageError(
            f"storage {url!r} is an in-memory database, which the trial processes and later commands cannot see; give a file, e.g. sqlite:///studies/NAME.db"
        )
    if path is not None:
        if not create and not path.is_file():
            raise StudyNotFoundError(f"study database {str(path)!r} does not exist; check the path, or run `autotune search` first")
        if path.is_dir():
            raise StorageError(f"storage {url!r}: {str(path)!r} is a folder; give a database file path")
        if create and not path.parent.exists() and path.parent != Path("studies"):
            raise StorageError(f"storage {url!r}: folder {str(path.parent)!r} does not exist; create it first")
        if path.parent.exists() and not path.parent.is_dir():
            raise StorageError(f"storage {url!r}: {str(path.parent)!r} is not a folder")
    masked = mask_url(url)
    try:
        parsed = make_url(url) if "://" in url else None
    except ArgumentError:
        parsed = None
    if parsed is None:
        raise StorageError(
            f"storage {masked!r} is not a database URL; use e.g. sqlite:///studies/NAME.db or postgresql+psycopg://user@host/db"
        )
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        backend, _, driver = parsed.drivername.partition("+")
        raise StorageError(f"storage {masked!r}: {_unknown_scheme(backend, driver)}") from None
    try:
        dialect.import_dbapi()
    except ImportError as e:
        extra = (
            '; for PostgreSQL: pip install -e ".[postgres]" and write postgresql+psycopg://'
            if parsed.get_backend_name() == "postgresql"
            else ""
        )
        raise StorageError(f"storage {masked!r} needs a database driver that is not installed ({e}){extra}") from None


def _unknown_scheme(backend: str, driver: str) -> str:
    """What to write instead of a URL scheme SQLAlchemy cannot load (``backend`` or ``backend+driver``)."""
    import difflib

    import sqlalchemy.dialects

    known = list(sqlalchemy.dialects.__all__)
    if backend in known:  # the database is known, the driver is not
        return f"SQLAlchemy has no driver {driver!r} for {backend}; write {backend}:// (its default driver) or name an installed one"
    if backend.startswith("postgres"):
        return f"SQLAlchemy has no URL scheme {backend!r}; write {_POSTGRES_SCHEMES}"
    close = difflib.get_close_matches(backend, known, n=1)
    hint = f"did you mean {close[0]}://?" if close else f"use one of {[f'{k}://' for k in known]}"
    return f"SQLAlchemy has no URL scheme {backend!r}; {hint}"


def _create_private(path: Path) -> None:
    """Create an empty SQLite file readable by its owner only (``0600`` less the umask); SQLite's
    journal and WAL files copy the database file's mode. An error is left for SQLite to report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        pass


def open_storage(url: str, *, create: bool = True, heartbeat: bool = False):
    """An Optuna storage for ``url``: Optuna's trial cache (``_CachedStorage``) over a
    :class:`ResilientRDBStorage`. Open it once per process and pass the object to every
    ``optuna.load_study``: finished trials are then read from the database once, and each later read
    fetches only new and unfinished trials.

    SQLite files get a 60 s lock timeout (at most ``$AUTOTUNE_STORAGE_RETRY``); the default folder ``studies/`` is created when ``create``
    (any other folder must exist). A new SQLite file is created readable by its owner only (``0600``,
    the ``studies/`` folder ``0700``, less what the umask also removes). Calls ride out a database that is briefly unreachable
    (:class:`autotune.storage.ResilientRDBStorage`). With ``heartbeat``, running trials send heartbeats and a trial
    silent for the grace period is failed as stale and retried once (processes that run trials).

    Raises:
        StorageError: As :func:`check_storage_url`, or an unreachable server. The message shows
            the URL without its password.
    """
    import optuna

    check_storage_url(url, create=create)
    path = _sqlite_path(url)
    engine_kwargs: dict[str, Any] = {}
    if path is not None:
        if create and not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if create and not path.exists():
            _create_private(path)
        # SQLite waits a lock out inside each call: never longer than the retry window, so that a lock
        # held past $AUTOTUNE_STORAGE_RETRY stops the process at the limit as an outage does
        engine_kwargs = {"connect_args": {"timeout": max(1.0, min(SQLITE_LOCK_TIMEOUT, _retry_seconds()))}}
    import warnings

    masked = mask_url(url)
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                from autotune.storage import ResilientRDBStorage

                rdb = ResilientRDBStorage(
                    url, label=f"storage {masked}", engine_kwargs=engine_kwargs, **(_heartbeat_kwargs() if heartbeat else {})
                )
                # Optuna's own cache of finished trials (``optuna.load_study`` wraps a bare RDBStorage in a
                # new, empty one on every call): each later read fetches only new and unfinished trials
                return optuna.storages._CachedStorage(rdb)
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
            if attempt < 2 and racing:
                # another process is creating the same tables right now: try again once they exist
                time.sleep(0.5 + attempt)
                continue
            raise StorageError(f"cannot open storage {masked!r}: {detail}") from None
    raise AssertionError("unreachable")
