"""``autotune storage-proxy``: Optuna's gRPC storage proxy in front of a study database.

Every ``search`` and ``worker`` process normally holds its own connections to the database; with many
workers that is many connections (PostgreSQL's default ``max_connections`` is 100). Optuna's proxy
(``optuna.storages.run_grpc_proxy_server``) holds one storage, and with it one connection pool and one
trial cache, for all of them: workers give ``--storage grpc://HOST:PORT`` and talk to it through
``optuna.storages.GrpcStorageProxy``. Here the proxy's storage is autotune's own
:func:`autotune.storage.open_storage` (Optuna's trial cache over the retrying
:class:`autotune.storage.ResilientRDBStorage`). The gRPC channel is not encrypted and has no
authentication: keep the port on a trusted network.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from autotune.errors import StorageError

__all__ = ["connect_url", "listening_line", "serve_proxy"]


def _grpc_host(host: str) -> str:
    """``host`` as a gRPC address wants it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def connect_url(host: str, port: int) -> str:
    """The ``--storage`` URL that workers give to reach a proxy bound to ``host``: this machine's name
    when it listens on every address (``0.0.0.0``, ``::``)."""
    reach = socket.gethostname() if host in ("", "0.0.0.0", "::", "[::]") else host
    return f"grpc://{_grpc_host(reach)}:{port}"


def listening_line(storage_url: str, host: str, port: int) -> str:
    """The line ``autotune storage-proxy`` prints once it serves: where, and how workers connect."""
    from autotune.storage import mask_url

    return (
        f"storage proxy for {mask_url(storage_url)} on {host}:{port}; workers give --storage {connect_url(host, port)} "
        "(no authentication: a trusted network only; Ctrl-C to stop)"
    )


def _check_address(host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go, so that a port in use or an unknown host is one clear line.

    Raises:
        StorageError: The address cannot be bound.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            # as gRPC binds: connections of an earlier proxy left in TIME_WAIT do not hold the port
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:
        raise StorageError(
            f"cannot serve on {host}:{port} ({e.strerror or e}): another process listens there (an earlier proxy still "
            "running?); stop it, or give another --port and the workers the new grpc:// address"
        ) from None


def serve_proxy(storage_url: str, host: str = "0.0.0.0", port: int = 13000, announce: Callable[[], None] | None = None) -> None:
    """Serve ``storage_url`` to ``grpc://`` storages until Ctrl-C or SIGTERM (blocks; returns then).

    Args:
        storage_url: The database to serve: a SQLAlchemy URL (SQLite or a server such as PostgreSQL;
            a new SQLite file is created as ``autotune search`` would).
        host: Address to listen on; ``0.0.0.0`` (every IPv4 address) lets other machines connect.
        port: TCP port, 1..65535.
        announce: Called once the storage is open and the address is free, just before serving.

    Raises:
        StorageError: A ``grpc://`` or ``journal:`` URL (the proxy serves a database), grpcio not
            installed, the storage cannot be opened, or the address cannot be bound.
    """
    import importlib.util
    import warnings

    import optuna

    from autotune.storage import mask_url, open_storage, storage_kind

    kind = storage_kind(storage_url)
    if kind in ("grpc", "journal"):
        raise StorageError(
            f"autotune storage-proxy serves a database, not {mask_url(storage_url)!r}; give --storage sqlite:///PATH or "
            "postgresql+psycopg://user@host/db (workers share a journal file directly: --storage journal:PATH)"
        )
    if importlib.util.find_spec("grpc") is None or importlib.util.find_spec("google.protobuf") is None:
        raise StorageError('autotune storage-proxy needs grpcio and protobuf, which are not installed: pip install -e ".[grpc]"')
    if not 1 <= port <= 65535:
        raise StorageError(f"--port must be in 1..65535, got {port}")
    storage = open_storage(storage_url)
    _check_address(host, port)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # Optuna's own "Server started" lines
    if announce is not None:
        announce()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.run_grpc_proxy_server(storage, host=_grpc_host(host), port=port)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal way a server ends
        return
