"""The resilient storage: which calls retry, on what, and for how long."""

import inspect
import re
import time

import optuna
import pytest
import sqlalchemy.exc

from autotune.errors import StorageUnreachableError
from autotune.storage import ResilientRDBStorage, is_transient, open_storage
from autotune.storage_url import LIBPQ_TIMEOUTS


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
    start = time.monotonic()
    with pytest.raises(StorageUnreachableError) as info:
        storage.get_all_studies()
    assert 0.5 <= time.monotonic() - start < 5  # gives up at the limit
    assert is_transient(info.value)  # the lost connection is its cause
    assert not is_transient(ValueError("x"))
    message = str(info.value)
    assert message.startswith("the study database was unreachable for ") and "longer than $AUTOTUNE_STORAGE_RETRY (0.5 s" in message
    assert "server closed the connection" in message and "invalid data" not in message and "\n" not in message
    # a second call in the same outage does not wait a whole window again: the deadline is the outage's
    start = time.monotonic()
    with pytest.raises(StorageUnreachableError):
        storage.get_all_studies()
    assert time.monotonic() - start < 0.5


def test_the_unreachable_line_names_the_driver_s_error_not_optunas_wrapper(tmp_path, monkeypatch):
    storage = ResilientRDBStorage(f"sqlite:///{tmp_path / 's.db'}", retry_seconds=0.2)
    from autotune import storage as module

    def down(self, *args, **kwargs):
        try:
            raise _lost_connection()
        except sqlalchemy.exc.OperationalError as e:  # as Optuna's _create_scoped_session wraps it
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit. This typically happens "
                                                          "due to invalid data in the commit, e.g. exceeding max length. ") from e

    monkeypatch.setattr(ResilientRDBStorage, "get_all_studies", module._wrap("get_all_studies", down))
    with pytest.raises(StorageUnreachableError) as info:
        storage.get_all_studies()
    assert "invalid data" not in str(info.value) and "server closed the connection" in str(info.value)


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

_REAL_ACCESS = __import__("os").access


def _deny_writes(monkeypatch, *denied):
    """Make ``os.access`` say the paths ``denied`` (only those) are not writable: root may write
    anything, so chmod alone tests nothing when the tests run as root."""
    import os

    real = _REAL_ACCESS

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and os.path.abspath(path) in {os.path.abspath(p) for p in denied}:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_a_read_only_sqlite_file_or_folder_is_named_and_not_retried(tmp_path, monkeypatch):
    import sqlite3

    from autotune.errors import StorageError
    from autotune.storage import check_writable

    db = tmp_path / "ro.db"
    sqlite3.connect(db).close()
    check_writable(f"sqlite:///{db}")  # writable: no error
    _deny_writes(monkeypatch, db)
    with pytest.raises(StorageError) as info:
        check_writable(f"sqlite:///{db}")
    assert str(info.value) == (f"storage 'sqlite:///{db}': the database file '{db}' is not writable; make it writable "
                               f"(chmod u+w {db}) or give --storage a copy you can write")
    _deny_writes(monkeypatch, tmp_path)
    with pytest.raises(StorageError, match=f"the folder '{tmp_path}' is not writable, and SQLite writes its journal there"):
        check_writable(f"sqlite:///{db}")  # the file is writable, but not its journal's folder
    monkeypatch.chdir(tmp_path)  # a new database in studies/, which does not exist yet: the current folder
    with pytest.raises(StorageError, match=r"the folder '\.' is not writable, and SQLite creates the database there"):
        check_writable("sqlite:///studies/new.db")
    check_writable("postgresql+psycopg://user@host/db")  # a server storage: its server checks

    # a database that turns read-only while a search runs is not waited for as if it were unreachable
    readonly = sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("attempt to write a readonly database"))
    assert not is_transient(readonly) and is_transient(_lost_connection())


def test_search_on_a_read_only_database_stops_at_once_with_one_line(tmp_path, monkeypatch, capfd):
    import sqlite3

    from conftest import MODELS

    from autotune.cli import main

    db = tmp_path / "ro.db"
    sqlite3.connect(db).close()
    monkeypatch.chdir(tmp_path)
    _deny_writes(monkeypatch, db)
    assert main(["search", str(MODELS / "tiny.py"), "--storage", f"sqlite:///{db}"]) == 2
    out, err = capfd.readouterr()
    assert err == f"autotune: error: storage 'sqlite:///{db}': the database file '{db}' is not writable; make it writable (chmod u+w {db}) or give --storage a copy you can write\n"
    assert "inspecting" not in out  # before the model inspection
    _deny_writes(monkeypatch, tmp_path)  # a new database in a folder that is not writable
    assert main(["search", str(MODELS / "tiny.py"), "--storage", f"sqlite:///{tmp_path / 'new.db'}"]) == 2
    out, err = capfd.readouterr()
    assert f"the folder '{tmp_path}' is not writable, and SQLite creates the database there" in err and "inspecting" not in out
    assert not (tmp_path / "new.db").exists()


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root writes read-only files: the test above forces the check instead")
def test_a_chmod_read_only_database_is_refused_by_the_cli(tmp_path, cli):
    import sqlite3

    from conftest import MODELS

    db = tmp_path / "ro.db"
    sqlite3.connect(db).close()
    db.chmod(0o444)
    r = cli("search", MODELS / "tiny.py", "--storage", f"sqlite:///{db}")
    assert r.returncode == 2 and r.stderr.strip() == (f"autotune: error: storage 'sqlite:///{db}': the database file '{db}' is not writable; "
                                                      f"make it writable (chmod u+w {db}) or give --storage a copy you can write")


def test_sqlite_waits_a_lock_no_longer_than_the_retry_window(tmp_path, monkeypatch):
    from autotune.errors import UsageError
    from autotune.storage import open_storage

    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY", "4")
    assert open_storage(f"sqlite:///{tmp_path / 'a.db'}")._backend.engine_kwargs["connect_args"]["timeout"] == 4.0
    monkeypatch.delenv("AUTOTUNE_STORAGE_RETRY")
    assert open_storage(f"sqlite:///{tmp_path / 'b.db'}")._backend.engine_kwargs["connect_args"]["timeout"] == 60.0
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY", "soon")
    with pytest.raises(UsageError, match=r"\$AUTOTUNE_STORAGE_RETRY='soon' must be a number of seconds >= 0"):
        open_storage(f"sqlite:///{tmp_path / 'c.db'}")


def test_a_server_with_no_free_connection_is_waited_for_when_opening(tmp_path, monkeypatch, capsys):
    """32 workers on one PostgreSQL (max_connections 100) made one worker stop with exit 2 ("sorry,
    too many clients already") while opening the storage; it now waits for a slot, as for an outage."""
    import sqlalchemy.exc

    import autotune.storage as module

    calls = []
    original = module.ResilientRDBStorage.__init__

    def crowded(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise sqlalchemy.exc.OperationalError("connect", {}, Exception('FATAL:  sorry, too many clients already'))
        if len(calls) == 2:  # as Optuna raises it from a commit: the driver's error is its cause
            try:
                raise sqlalchemy.exc.OperationalError("commit", {}, Exception("FATAL:  remaining connection slots are reserved"))
            except sqlalchemy.exc.OperationalError as cause:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
        original(self, *args, **kwargs)

    monkeypatch.setattr(module.ResilientRDBStorage, "__init__", crowded)
    monkeypatch.setattr(module.time, "sleep", lambda s: None)
    storage = module.open_storage(f"sqlite:///{tmp_path / 's.db'}")
    assert len(calls) == 3 and storage.get_all_studies() == []
    err = capsys.readouterr().err
    assert err.count("has no free connection") == 1 and "storage-proxy" in err
    calls.clear()
    monkeypatch.setenv("AUTOTUNE_STORAGE_RETRY", "0")  # no time left to wait: one line, exit 2 as before
    with pytest.raises(module.StorageError, match="too many clients"):
        module.open_storage(f"sqlite:///{tmp_path / 't.db'}")


@pytest.mark.parametrize("token_check", [True, False])
def test_a_queued_trial_whose_commit_landed_before_the_connection_was_lost_is_not_queued_twice(tmp_path, monkeypatch, token_check):
    """The server commits ``enqueue_trial``'s insert, then the connection drops before it answers: the
    retry finds the trial the lost attempt made instead of queueing a second one (without the check,
    the control case, it does queue two)."""
    import contextlib

    import optuna.storages._rdb.storage as rdb

    from autotune import storage as module

    storage = ResilientRDBStorage(f"sqlite:///{tmp_path / 's.db'}", retry_seconds=30)
    study = optuna.create_study(storage=storage, study_name="s")
    original, lost = rdb._create_scoped_session, []

    @contextlib.contextmanager
    def commit_then_lose(*args, **kwargs):
        with original(*args, **kwargs) as session:
            yield session
            inserts_trial = any(isinstance(o, rdb.models.TrialModel) for o in [*session.new, *session.identity_map.values()])
        if inserts_trial and not lost:  # committed: the answer is lost
            lost.append(1)
            raise optuna.exceptions.StorageInternalError("commit failed") from _lost_connection()

    monkeypatch.setattr(rdb, "_create_scoped_session", commit_then_lose)
    if not token_check:
        monkeypatch.setattr(module, "CREATE_TOKEN_ATTR", "")  # no token: every attempt inserts
        monkeypatch.setattr(module.ResilientRDBStorage, "_get_prepared_new_trial", optuna.storages.RDBStorage._get_prepared_new_trial)
    study.enqueue_trial({"x": 1.0}, user_attrs={"baseline": True})
    study.enqueue_trial({"x": 2.0})
    trials = study.get_trials()
    assert lost == [1]
    if token_check:
        assert [t.system_attrs["fixed_params"] for t in trials] == [{"x": 1.0}, {"x": 2.0}] and [t.number for t in trials] == [0, 1]
        assert trials[0].user_attrs == {"baseline": True} and trials[0].state.name == "WAITING"
    else:
        assert len(trials) == 3


def test_the_bookkeeping_after_ctrl_c_gives_up_on_a_locked_database_instead_of_hanging(tmp_path, monkeypatch):
    """A new user's Ctrl-C hung 4 minutes on `database is locked` and exited 1: after the interruption a
    locked database is waited for at most INTERRUPT_STORE_SECONDS, then the process goes on to exit (a
    trial left RUNNING goes stale and is retried)."""
    import sqlite3

    from autotune.study import tell
    from autotune.study.tell import _fail_interrupted, after_interrupt

    path = tmp_path / "s.db"
    study = optuna.create_study(storage=open_storage(f"sqlite:///{path}"), study_name="s")
    running = study.ask().number
    monkeypatch.setattr(tell, "INTERRUPT_STORE_SECONDS", 1.0)
    monkeypatch.setattr(tell, "_gave_up", False)
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the database
    start = time.monotonic()
    assert after_interrupt(lambda: _fail_interrupted(study, running), "resume") == "resume"
    assert time.monotonic() - start < 5.0 and tell._gave_up
    start = time.monotonic()
    assert after_interrupt(lambda: 1 / 0, "again") == "again" and time.monotonic() - start < 0.5  # no second wait
    lock.execute("ROLLBACK")  # (the abandoned write may still land now: in a real run the process has exited)
    lock.close()
    # a database that answers: the interruption is stored and the call's result returned
    monkeypatch.setattr(tell, "_gave_up", False)
    fresh = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 't.db'}"), study_name="t")
    number = fresh.ask().number
    assert after_interrupt(lambda: (_fail_interrupted(fresh, number), "stored")[1], "resume") == "stored"
    assert fresh.trials[number].state.name == "FAIL" and fresh.trials[number].user_attrs["fail_kind"] == "interrupted"


@pytest.mark.parametrize(
    "url, expected",
    [
        ("postgresql+psycopg://u@db:5432/s", LIBPQ_TIMEOUTS),
        ("postgresql://u@db/s", LIBPQ_TIMEOUTS),  # SQLAlchemy's default driver, psycopg2: libpq too
        ("postgresql+psycopg://u@db/s?connect_timeout=3", {k: v for k, v in LIBPQ_TIMEOUTS.items() if k != "connect_timeout"}),
        ("postgresql+pg8000://u@db/s", {}),  # not libpq: other parameter names
        ("mysql+pymysql://u@db/s", {}),
        ("sqlite:///studies/x.db", {}),
    ],
)
def test_libpq_timeouts_go_to_libpq_drivers_only_and_leave_the_url_s_own(url, expected):
    from autotune.storage_url import _libpq_timeouts

    assert _libpq_timeouts(url) == expected
