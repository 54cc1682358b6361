"""What a storage URL says, read without opening it: its kind, its file or address, its checks before
anything is created, and the URL with its credentials masked for messages.

autotune opens four kinds of Optuna storage (docs/scaling-out.md, "Which storage"):

- ``sqlite:///PATH``: a SQLite file (one machine);
- any other SQLAlchemy database URL, e.g. ``postgresql+psycopg://user@host/db`` (many machines);
- ``grpc://HOST:PORT``: Optuna's gRPC storage proxy (``optuna.storages.GrpcStorageProxy``) in front of
  a database, started with ``autotune storage-proxy`` (many workers, one connection pool);
- ``journal:PATH``: Optuna's journal file (``optuna.storages.JournalStorage`` over
  ``optuna.storages.journal.JournalFileBackend``), for a shared file system and no database.
  ``journal://PATH`` and ``journal:///ABSOLUTE/PATH`` name the same files as ``journal:PATH``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from autotune.errors import StorageError, StudyNotFoundError, nearest_file

__all__ = [
    "LIBPQ_TIMEOUTS",
    "check_storage_url",
    "check_writable",
    "grpc_address",
    "journal_path",
    "mask_text",
    "mask_url",
    "storage_file",
    "storage_kind",
    "url_of_file",
]

#: How a journal-file storage URL starts, and how a gRPC storage proxy's does.
JOURNAL_SCHEME = "journal:"
GRPC_SCHEME = "grpc://"
#: The port ``autotune storage-proxy`` listens on by default (Optuna's ``run_grpc_proxy_server``'s).
GRPC_DEFAULT_PORT = 13000


def storage_kind(url: str) -> str:
    """``"journal"``, ``"grpc"``, ``"sqlite"`` or ``"database"`` (any other SQLAlchemy URL), by the URL's scheme."""
    if url.startswith(JOURNAL_SCHEME):
        return "journal"
    if url.startswith("grpc:"):
        return "grpc"
    if url.startswith("sqlite:"):
        return "sqlite"
    return "database"


def journal_path(url: str) -> Path | None:
    """The file of a ``journal:PATH`` URL (``journal://PATH`` and ``journal:///ABS`` too), else ``None``.

    Raises:
        StorageError: ``journal:`` names no file.
    """
    if not url.startswith(JOURNAL_SCHEME):
        return None
    rest = url[len(JOURNAL_SCHEME) :]
    rest = rest[2:] if rest.startswith("//") else rest  # journal://studies/x.log, journal:///shared/x.log
    if not rest.strip():
        raise StorageError(f"storage {url!r} names no file; write journal:PATH, e.g. journal:studies/NAME.log")
    return Path(rest)


def grpc_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of a ``grpc://HOST:PORT`` URL (an IPv6 host keeps its brackets, as gRPC wants it).

    Raises:
        StorageError: Not ``grpc://HOST:PORT`` (no host, no port, a port outside 1..65535, a path,
            a query or a user name); the message says what to write.
    """
    from urllib.parse import urlsplit

    example = f"grpc://HOST:PORT, e.g. grpc://proxy-host:{GRPC_DEFAULT_PORT} (where `autotune storage-proxy` listens)"
    if not url.startswith(GRPC_SCHEME):
        raise StorageError(f"storage {url!r}: write {example}")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise StorageError(f"storage {url!r}: the port must be a number in 1..65535; write {example}") from None
    if not parts.hostname:
        raise StorageError(f"storage {url!r} names no host; write {example}")
    if port is None:
        raise StorageError(
            f"storage {url!r} has no port; write grpc://{parts.netloc}:PORT, the --port of `autotune storage-proxy` "
            f"(default {GRPC_DEFAULT_PORT})"
        )
    if not 1 <= port <= 65535:
        raise StorageError(f"storage {url!r}: the port must be in 1..65535; write {example}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise StorageError(f"storage {url!r}: a proxy URL has only a host and a port; write {example}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host, port


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


def storage_file(url: str) -> Path | None:
    """The file a SQLite or journal-file storage lives in (``None`` for a server: a database, a proxy)."""
    return _sqlite_path(url) if url.startswith("sqlite:") else journal_path(url) if url.startswith(JOURNAL_SCHEME) else None


#: The first bytes of every SQLite database file (its header string).
_SQLITE_MAGIC = b"SQLite format 3\x00"


def url_of_file(path: Path) -> str:
    """The storage URL of a study file given as a path: ``journal:PATH`` for an Optuna journal file
    (JSON lines, each an operation with an ``op_code``), else ``sqlite:///PATH``."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        head = b""
    if not head.startswith(_SQLITE_MAGIC) and head.lstrip().startswith(b'{"op_code"'):
        return f"{JOURNAL_SCHEME}{path}"
    return f"sqlite:///{path}"


def check_writable(url: str) -> None:
    """Check that this user can write a SQLite or journal-file storage, before anything is measured.

    SQLite writes the database file and, beside it, its journal; Optuna's journal file is appended to
    under a lock file beside it (``PATH.lock``). So the file (when it exists) and its folder must be
    writable; for a new file, the nearest folder that exists (``studies/`` is created in the current
    folder). Other storages are checked by their server when opened.

    Raises:
        StorageError: The file or the folder is not writable (the message names it and the fix).
    """
    path = storage_file(url)
    if path is None or str(path) in ("", ":memory:"):
        return
    masked = mask_url(url)
    journal = url.startswith(JOURNAL_SCHEME)
    noun = "journal file" if journal else "database file"
    if path.is_file() and not os.access(path, os.W_OK):
        raise StorageError(
            f"storage {masked!r}: the {noun} {str(path)!r} is not writable; make it writable (chmod u+w {path}) "
            "or give --storage a copy you can write"
        )
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        if journal:
            what = "Optuna writes the journal's lock file" if path.exists() else "Optuna creates the journal file"
        else:
            what = "SQLite writes its journal" if path.exists() else "SQLite creates the database"
        raise StorageError(
            f"storage {masked!r}: the folder {str(folder)!r} is not writable, and {what} there; "
            f"make it writable (chmod u+w {folder}) or give --storage a {'file' if journal else 'database'} in a folder you can write"
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
    if "://" not in url or url.startswith(JOURNAL_SCHEME):  # a path: nothing to mask
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


_POSTGRES_SCHEMES = "postgresql:// (or postgresql+psycopg://)"


def check_storage_url(url: str, *, create: bool = True) -> None:
    """Check a storage URL without connecting to it or creating anything: its form, SQLAlchemy's
    dialect and driver for its scheme, for a file (SQLite, journal) its folder, and for a gRPC proxy
    its address and that grpcio is installed.

    Args:
        url: An SQLAlchemy database URL (e.g. ``sqlite:///studies/NAME.db``,
            ``postgresql+psycopg://user@host/db``), ``grpc://HOST:PORT`` or ``journal:PATH``.
        create: The storage may be created (a new SQLite or journal file in an existing folder, or
            in ``studies/``, which :func:`autotune.storage.open_storage` creates); else the file must exist.

    Raises:
        StorageError: An in-memory SQLite database, not a URL, a scheme SQLAlchemy does not know
            (``postgres://``: the message names ``postgresql://``), a driver that is not installed,
            a file path whose folder is missing or that is a folder, a malformed ``grpc://`` address
            (:func:`grpc_address`) or grpcio missing. The message shows the URL without its password.
        StudyNotFoundError: ``create`` is false and the SQLite or journal file does not exist.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    kind = storage_kind(url)
    if kind == "journal":
        _check_file(url, journal_path(url), "journal file", create)
        return
    if kind == "grpc":
        grpc_address(url)
        if importlib.util.find_spec("grpc") is None or importlib.util.find_spec("google.protobuf") is None:
            raise StorageError(
                f"storage {mask_url(url)!r} needs grpcio and protobuf, which are not installed: "
                'pip install -e ".[grpc]" (or pip install grpcio protobuf)'
            )
        return
    path = _sqlite_path(url)
    if url.startswith("sqlite:") and not url.startswith("sqlite://"):  # sqlite:/x.db, sqlite:x.db (helper-34)
        rest = url[len("sqlite:") :].lstrip("/")
        raise StorageError(
            f"storage {url!r} is not an SQLite URL: write sqlite:///{rest} for a path relative to here, or "
            f"sqlite:////{rest} for an absolute one (three slashes, then the path)"
        )
    if url.startswith("sqlite:") and (path is None or str(path) in ("", ":memory:")):
        raise StorageError(
            f"storage {url!r} is an in-memory database, which the trial processes and later commands cannot see; give a file, e.g. sqlite:///studies/NAME.db"
        )
    if path is not None:
        _check_file(url, path, "database file", create)
    masked = mask_url(url)
    try:
        parsed = make_url(url) if "://" in url else None
    except ArgumentError:
        parsed = None
    if parsed is None:
        raise StorageError(
            f"storage {masked!r} is not a database URL; use e.g. sqlite:///studies/NAME.db or postgresql+psycopg://user@host/db "
            "(or grpc://HOST:PORT for a storage proxy, journal:PATH for a journal file)"
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


def _near(path: Path) -> str:
    """``"did you mean 'studies/proj.db'? "`` for :func:`autotune.errors.nearest_file`, else ``""``."""
    near = nearest_file(path, ".db")  # studies/proj given for studies/proj.db
    return f"did you mean {str(near)!r}? " if near else ""


def _check_file(url: str, path: Path | None, noun: str, create: bool) -> None:
    """The checks of a file storage's path (``noun``: ``database file``, ``journal file``).

    Raises:
        StudyNotFoundError: ``create`` is false and the file does not exist.
        StorageError: The path is a folder, or its folder is missing (other than ``studies/``) or not a folder.
    """
    if path is None:
        return
    if not create and not path.is_file():
        what = "study database" if noun == "database file" else noun
        raise StudyNotFoundError(f"{what} {str(path)!r} does not exist; {_near(path)}check the path, or run `autotune search` first")
    if path.is_dir():
        raise StorageError(f"storage {url!r}: {str(path)!r} is a folder; give a {noun} path")
    if create and not path.parent.exists() and path.parent != Path("studies"):
        raise StorageError(f"storage {url!r}: folder {str(path.parent)!r} does not exist; create it first")
    if path.parent.exists() and not path.parent.is_dir():
        raise StorageError(f"storage {url!r}: {str(path.parent)!r} is not a folder")


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


#: libpq connection parameters that turn a PostgreSQL server gone silent (a network partition drops
#: packets without a reset) into a connection error, which :class:`ResilientRDBStorage` retries, instead
#: of a call that waits forever: a connect attempt gives up after 10 s; an idle connection is probed
#: after 30 s and declared dead after 3 probes 10 s apart; data unacknowledged for 60 s closes the
#: connection (``tcp_user_timeout``, libpq 12+). Values in the URL's query string take precedence.
#: Source: the PostgreSQL manual, "Parameter Key Words" (libpq connection strings).
LIBPQ_TIMEOUTS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60000,
}


def _libpq_timeouts(url: str) -> dict[str, int]:
    """:data:`LIBPQ_TIMEOUTS` less those the URL sets, for a PostgreSQL URL whose driver is built on libpq
    (``psycopg``, ``psycopg2``: SQLAlchemy's default); ``{}`` for any other URL."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # a bad URL is reported where the storage is opened
        return {}
    if parsed.get_backend_name() != "postgresql" or parsed.get_driver_name() not in ("psycopg", "psycopg2"):
        return {}
    return {k: v for k, v in LIBPQ_TIMEOUTS.items() if k not in parsed.query}
