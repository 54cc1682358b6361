"""The resilient storage: which calls retry, on what, and for how long."""

import inspect
import re

import optuna
import pytest
import sqlalchemy.exc

from autotune.storage import ResilientRDBStorage, is_transient


def _lost_connection():
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))


def test_every_session_call_optuna_makes_is_retried():
    # Optuna's cache and stale-trial code call some private RDBStorage methods; an Optuna upgrade that
    # adds one must not silently bypass the retries
    import optuna.storages._cached_storage as cached

    called = set(re.findall(r"self\._backend\.(\w+)", inspect.getsource(cached)))
    called |= {"_get_stale_trial_ids"}
    not_retried = {"get_heartbeat_interval", "get_heartbeat_stale_trial_callback"}
    missing = [name for name in sorted(called - not_retried) if name not in ResilientRDBStorage.__dict__]
    assert not missing


def test_a_lost_connection_is_retried_and_other_errors_are_not(tmp_path, monkeypatch, capsys):
    storage = ResilientRDBStorage(f"sqlite:///{tmp_path / 's.db'}", label="storage test", retry_seconds=30)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MAXIMIZE], "s")
    calls = []
    original = optuna.storages.RDBStorage.set_study_user_attr

    def flaky(self, *args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise optuna.exceptions.StorageInternalError("commit failed") from _lost_connection()
        return original(self, *args, **kwargs)

    from autotune import (
        storage as module,  # the retry wrapper around a method that fails twice
    )

    monkeypatch.setattr(ResilientRDBStorage, "set_study_user_attr", module._wrap("set_study_user_attr", flaky))
    storage.set_study_user_attr(study_id, "k", 1)
    assert len(calls) == 3 and storage.get_study_user_attrs(study_id) == {"k": 1}
    err = capsys.readouterr().err
    assert "storage test is unreachable" in err and "storage test is reachable again after" in err

    def bad_data(self, *args, **kwargs):
        raise optuna.exceptions.StorageInternalError("too long") from sqlalchemy.exc.DataError("INSERT", {}, Exception("value too long"))

    monkeypatch.setattr(ResilientRDBStorage, "set_study_user_attr", module._wrap("set_study_user_attr", bad_data))
    with pytest.raises(optuna.exceptions.StorageInternalError):
        storage.set_study_user_attr(study_id, "k", 2)


def test_an_outage_longer_than_the_retry_window_raises(tmp_path, monkeypatch):
    storage = ResilientRDBStorage(f"sqlite:///{tmp_path / 's.db'}", retry_seconds=0.5)
    from autotune import storage as module

    def down(self, *args, **kwargs):
        raise _lost_connection()

    monkeypatch.setattr(ResilientRDBStorage, "get_all_studies", module._wrap("get_all_studies", down))
    with pytest.raises(sqlalchemy.exc.OperationalError) as info:
        storage.get_all_studies()
    assert is_transient(info.value)
    assert not is_transient(ValueError("x"))


@pytest.mark.parametrize("url, message", [
    ("postgres://me:secret@db-host/autotune", "storage 'postgres://me:***@db-host/autotune': SQLAlchemy has no URL scheme 'postgres'; "
     "write postgresql:// (or postgresql+psycopg://)"),
    ("sqlit:///studies/x.db", "SQLAlchemy has no URL scheme 'sqlit'; did you mean sqlite://?"),
    ("mongodb://host/db", "SQLAlchemy has no URL scheme 'mongodb'; use one of ["),
    ("postgresql+nosuchdriver://host/db", "SQLAlchemy has no driver 'nosuchdriver' for postgresql"),
    ("studies/x.db", "is not a database URL; use e.g. sqlite:///studies/NAME.db"),
])
def test_a_bad_storage_url_says_what_to_write(url, message):
    from autotune.errors import StorageError
    from autotune.storage import check_storage_url

    with pytest.raises(StorageError) as caught:
        check_storage_url(url)
    assert message in str(caught.value) and "secret" not in str(caught.value)


def test_checking_a_storage_url_creates_nothing(tmp_path, monkeypatch):
    from autotune.storage import check_storage_url

    monkeypatch.chdir(tmp_path)
    check_storage_url(f"sqlite:///{tmp_path / 'new.db'}")
    check_storage_url("sqlite:///studies/new.db")  # open_storage would create the default folder
    assert list(tmp_path.iterdir()) == []
