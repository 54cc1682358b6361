"""``autotune dashboard``: optuna-dashboard on a study's storage, bound to 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import StorageError

__all__ = ["serve", "storage_for_dashboard"]


def storage_for_dashboard(target: str | None) -> str:
    """The storage URL to serve: a URL as is (a database, ``grpc://HOST:PORT``, ``journal:PATH``), a
    path to an existing SQLite or journal file, or, with no argument, ``$AUTOTUNE_STORAGE`` or the only
    ``studies/*.db``.

    Raises:
        StorageError: The path does not exist (optuna-dashboard would create an empty database and
            then fail), or no/several databases are found with no argument.
    """
    from autotune.storage_url import JOURNAL_SCHEME, check_storage_url, url_of_file
    from autotune.study import ENV_STORAGE

    if target is None:
        if os.environ.get(ENV_STORAGE):
            return os.environ[ENV_STORAGE]
        found = sorted(Path("studies").glob("*.db"))
        if len(found) != 1:
            raise StorageError(
                f"found {len(found)} databases in studies/ ({[str(p) for p in found]}); give one: autotune dashboard studies/NAME.db"
            )
        target = str(found[0])
    if target.startswith(JOURNAL_SCHEME):
        check_storage_url(target, create=False)  # a missing journal file would be created empty
        return target
    if "://" in target:
        if target.startswith("sqlite:///") and not Path(target[len("sqlite:///") :]).is_file():
            raise StorageError(f"study database {target[len('sqlite:///') :]!r} does not exist; run `autotune search` first")
        return target
    path = Path(target)
    if not path.is_file():
        raise StorageError(
            f"study database {target!r} does not exist; give the .db file written by `autotune search` (e.g. studies/NAME.db)"
        )
    return url_of_file(path)


def serve(storage_url: str, host: str = "127.0.0.1", port: int = 8080, announce=None) -> None:
    """Serve optuna-dashboard until interrupted (blocks).

    The dashboard's best trial is autotune's recommendation, its Pareto front holds feasible
    trials only (see :func:`autotune.optuna_compat.dashboard_honours_constraints`), and its parameter
    importances are computed over the full-budget trials, as ``autotune report``'s are
    (:func:`_importances`).

    Args:
        storage_url: Storage to serve (must exist).
        host: Address to bind; 127.0.0.1 keeps it on this machine.
        port: TCP port, 1..65535.
        announce: Called once the storage is open and the address is free, just before serving.

    Raises:
        StorageError: The storage cannot be opened, or the address cannot be bound (port in use,
            unknown host).
    """
    import socket

    from optuna_dashboard import run_server

    from autotune.optuna_compat import dashboard_honours_constraints, dashboard_importances
    from autotune.study import open_storage

    storage = open_storage(storage_url, create=False)
    dashboard_honours_constraints(storage, _recommended(open_storage(storage_url, create=False)))
    dashboard_importances(_importances)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
    except OSError as e:
        raise StorageError(f"cannot serve on {host}:{port} ({e.strerror or e}); give another --port or --host") from None
    if announce is not None:
        announce()
    run_server(storage, host=host, port=port)


def _recommended(storage):
    """For the dashboard: a study name to autotune's recommended trial (read through ``storage``), or
    ``None`` for a study autotune did not make or with nothing to recommend."""

    def best(study_name: str):
        import optuna

        from autotune.study.records import recommendation
        from autotune.study.settings import settings_of

        study = optuna.load_study(study_name=study_name, storage=storage)
        settings = settings_of(study)
        return None if settings is None else recommendation(study, settings)[0]

    return best


def _importances(trials: list, directions: list, objective_id: int) -> dict[str, float]:
    """For the dashboard's importance panel: :func:`autotune.importance.param_importances` of one
    objective over the full-budget trials (for samples/s, the figure ``autotune report`` draws)."""
    import optuna

    from autotune.importance import param_importances

    maximize = directions[objective_id] == optuna.study.StudyDirection.MAXIMIZE
    return param_importances(trials, lambda t: t.values[objective_id], maximize)
