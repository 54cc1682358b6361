"""The scale-out storages Optuna provides: a journal file (``journal:PATH``) and the gRPC storage proxy
(``autotune storage-proxy``, ``grpc://HOST:PORT``), end to end through the CLI, and their bad inputs."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

import optuna
import pytest
import yaml
from conftest import MODELS, served_dashboard
from test_search_e2e import POSTGRES, _postgres_answers

from autotune.storage import open_storage

requires_grpc = pytest.mark.skipif(
    __import__("importlib").util.find_spec("grpc") is None, reason="grpcio is not installed (pip install -e '.[grpc]')"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args, cwd, env=None):
    full = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STORAGE"}
    full.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "autotune", *map(str, args)], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def storage_proxy(storage_url, cwd):
    """``autotune storage-proxy`` over ``storage_url`` on a free port of 127.0.0.1 until the block ends;
    yields ``(grpc URL, the proxy process)``. Leaving the block stops it with SIGTERM."""
    port = _free_port()
    proc = _spawn(["storage-proxy", "--storage", storage_url, "--host", "127.0.0.1", "--port", port], cwd)
    try:
        line = proc.stdout.readline()  # printed once the storage is open and the port is free
        assert line.startswith(f"storage proxy for {storage_url} on 127.0.0.1:{port}; workers give --storage grpc://127.0.0.1:{port}"), (
            line, proc.stderr.read() if proc.poll() is not None else "")
        yield f"grpc://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _trial_lines(text):
    """The trial numbers a process printed as started (``trial N: ...``, ``trial N (baseline): ...``)."""
    return [int(n) for n in re.findall(r"^trial (\d+)(?::| \()", text, flags=re.M)]


# --- the journal file -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_journal_file_study_runs_shows_exports_and_resumes(tmp_path, cli):
    url = "journal:studies/tiny.log"  # the default folder is created, as for SQLite
    r = cli("search", MODELS / "tiny.py", "--trials", 3, "--samples", 256, "--confirm", 0, "--storage", url, check_rc=0)
    assert f"created study 'tiny' in {url}" in r.stdout
    assert (tmp_path / "studies" / "tiny.best.yaml").is_file()  # the export lands beside the journal file
    assert (tmp_path / "studies" / "tiny.log").stat().st_mode & 0o077 == 0  # created private, as a SQLite file is
    assert not list((tmp_path / "studies").glob("*.lock"))  # Optuna's lock file is released

    shown = yaml.safe_load(cli("show", "tiny", "--storage", url, "--format", "yaml", check_rc=0).stdout)
    assert [t["number"] for t in shown] == [0, 1, 2] and all(t["state"] == "COMPLETE" for t in shown)
    # the file's path alone works too: it is recognised as a journal, not taken for SQLite
    assert "study tiny" in cli("show", "studies/tiny.log", check_rc=0).stdout
    r = cli("export", "tiny", "--storage", url, "--out", "best.yaml", check_rc=0)
    assert yaml.safe_load((tmp_path / "best.yaml").read_text())["trainer"]
    assert f"({url})" in (tmp_path / "best.yaml").read_text()  # the header names the storage

    # resumed, with a worker (another process appending to the same file) sharing the new trials
    worker = _spawn(["worker", "--storage", url, "--study-name", "tiny"], tmp_path)
    search = _spawn(["search", MODELS / "tiny.py", "--trials", 3, "--samples", 256, "--confirm", 0, "--storage", url], tmp_path)
    (s_out, s_err), (w_out, w_err) = search.communicate(timeout=300), worker.communicate(timeout=300)
    assert search.returncode == 0 and worker.returncode == 0, (s_err[-3000:], w_err[-3000:])
    assert "resuming study 'tiny' (3 trials so far)" in s_out
    study = optuna.load_study(study_name="tiny", storage=open_storage(f"journal:{tmp_path / 'studies' / 'tiny.log'}", create=False))
    assert [t.number for t in study.trials] == list(range(6)) and all(t.state.name == "COMPLETE" for t in study.trials)
    assert sorted(_trial_lines(s_out) + _trial_lines(w_out)) == [3, 4, 5], (s_out, w_out)  # each new trial ran once
    plans = [k for k in study._storage.get_study_system_attrs(study._study_id) if k.startswith("autotune:plan:")]
    assert len(plans) == 2  # each run's plan (a study system attribute) is stored in the journal

    with served_dashboard(url, tmp_path) as (_port, studies):  # optuna-dashboard serves the journal too
        assert [s["study_name"] for s in studies] == ["tiny"]


def test_journal_bad_inputs_are_one_line_and_create_nothing(tmp_path, cli):
    r = cli("search", MODELS / "tiny.py", "--storage", "journal:missing/x.log")
    assert r.returncode == 2 and r.stderr == "autotune: error: storage 'journal:missing/x.log': folder 'missing' does not exist; create it first\n"
    r = cli("show", "x", "--storage", "journal:nothing.log")
    assert r.returncode == 2 and r.stderr == ("autotune: error: journal file 'nothing.log' does not exist; check the path, "
                                              "or run `autotune search` first\n")
    r = cli("show", "x", "--storage", "journal:")
    assert r.returncode == 2 and "names no file; write journal:PATH, e.g. journal:studies/NAME.log" in r.stderr
    (tmp_path / "notes.log").write_text("not a journal\nat all\n")
    r = cli("show", "x", "--storage", "journal:notes.log")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "'notes.log' is not an Optuna journal file" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.log"]  # no file, folder or lock left behind


def test_journal_url_forms_paths_and_export_folders(tmp_path):
    from autotune.storage import check_writable, mask_url
    from autotune.storage_url import journal_path, storage_file, url_of_file
    from autotune.study import default_export_path

    assert journal_path("journal:studies/a.log") == journal_path("journal://studies/a.log") == journal_path("journal:studies/a.log")
    assert str(journal_path("journal:///shared/fs/a.log")) == "/shared/fs/a.log" == str(journal_path("journal:/shared/fs/a.log"))
    for url in ("journal:/shared/fs/a.log", "grpc://proxy-host:13000"):
        assert mask_url(url) == url  # nothing to mask, nothing broken
    assert default_export_path("journal:/shared/fs/a.log", "a") == journal_path("journal:/shared/fs/a.log").parent / "a.best.yaml"
    assert str(default_export_path("grpc://proxy-host:13000", "a")) == "studies/a.best.yaml"  # a server: the default folder
    assert storage_file("grpc://proxy-host:13000") is None

    storage = open_storage(f"journal:{tmp_path / 'j.log'}")
    optuna.create_study(study_name="s", storage=storage)
    import sqlite3

    sqlite3.connect(tmp_path / "s.db").execute("CREATE TABLE t (x)").connection.close()
    assert url_of_file(tmp_path / "j.log") == f"journal:{tmp_path / 'j.log'}"
    assert url_of_file(tmp_path / "s.db") == f"sqlite:///{tmp_path / 's.db'}"
    check_writable(f"journal:{tmp_path / 'j.log'}")  # writable: no error


def test_a_dead_worker_s_trial_is_failed_and_retried_once_without_heartbeats(tmp_path, monkeypatch):
    """A journal file has no heartbeats: a RUNNING trial past its --trial-timeout plus the grace
    period is failed as stale and queued again once, as Optuna's heartbeats would do."""
    from types import SimpleNamespace

    from autotune.optuna_compat import claim_waiting, heartbeat_interval, set_trial_system_attr
    from autotune.study.queue import _fail_stale
    from autotune.study.trial import TIMEOUT_ATTR

    study = optuna.create_study(study_name="s", storage=open_storage(f"journal:{tmp_path / 'j.log'}", heartbeat=True))
    assert heartbeat_interval(study) is None  # heartbeat=True is not offered by a journal file
    study.enqueue_trial({"x": 1.0})
    study.enqueue_trial({"x": 2.0})
    first, second = (claim_waiting(study, t) for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,)))
    set_trial_system_attr(study, second, TIMEOUT_ATTR, 3600.0)  # the cap this trial runs under, recorded when it started
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE", "0")
    _fail_stale(study, SimpleNamespace(trial_timeout=3600.0))
    assert [t.state.name for t in study.trials] == ["RUNNING", "RUNNING"]  # both well within their cap
    _fail_stale(study, SimpleNamespace(trial_timeout=0.0))  # the study's cap for a trial that recorded none
    states = [t.state.name for t in study.trials]
    assert states == ["FAIL", "RUNNING", "WAITING"], states  # trial 0 failed and queued again; trial 1 keeps its own cap
    retry = study.trials[2]
    assert retry.system_attrs["failed_trial"] == 0
    assert "still running 0 s after it started, past its --trial-timeout" in study.user_attrs["stale_trial_0"]
    _fail_stale(study, SimpleNamespace(trial_timeout=0.0))  # a second pass fails nothing twice
    assert len(study.trials) == 3 and first.number == 0


def test_a_running_trial_that_never_sent_a_heartbeat_is_failed_and_retried_past_twice_its_cap(tmp_path, monkeypatch):
    """A claim whose commit reached the server but whose answer was lost in an outage leaves a trial
    RUNNING with no heartbeat and no worker: Optuna never finds it stale. Past twice its
    --trial-timeout plus the grace it is failed and queued again; a trial with a worker is not."""
    from types import SimpleNamespace

    from autotune.optuna_compat import claim_waiting, heartbeat_interval, set_trial_system_attr
    from autotune.study.queue import _fail_stale
    from autotune.study.trial import TIMEOUT_ATTR

    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat=True))
    assert heartbeat_interval(study)
    study.enqueue_trial({"x": 1.0})
    study.enqueue_trial({"x": 2.0})
    orphan, mine = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    study._storage.set_trial_state_values(orphan._trial_id, state=optuna.trial.TrialState.RUNNING)  # the lost claim
    claimed = claim_waiting(study, mine)  # a worker's claim: a first heartbeat at once
    set_trial_system_attr(study, claimed, TIMEOUT_ATTR, 3600.0)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE", "0")
    _fail_stale(study, SimpleNamespace(trial_timeout=3600.0))
    assert [t.state.name for t in study.trials] == ["RUNNING", "RUNNING"]  # within twice the cap: waited for
    _fail_stale(study, SimpleNamespace(trial_timeout=0.0))
    states = [t.state.name for t in study.trials]
    assert states == ["FAIL", "RUNNING", "WAITING"], states  # the orphan failed and queued once more; the live trial kept
    assert study.trials[2].system_attrs["failed_trial"] == 0 and "claim was lost" in study.user_attrs["stale_trial_0"]
    _fail_stale(study, SimpleNamespace(trial_timeout=0.0))
    assert len(study.trials) == 3


def test_waiting_for_another_process_s_trial_without_heartbeats_says_until_when_once(tmp_path, monkeypatch):
    """A new user's report: after a proxy restart a resumed search waited silently for a dead
    worker's RUNNING trial (up to --trial-timeout + grace). It now says so, once per trial."""
    import datetime
    from types import SimpleNamespace

    from autotune.optuna_compat import claim_waiting, set_trial_system_attr
    from autotune.study.queue import _Worker
    from autotune.study.trial import TIMEOUT_ATTR

    study = optuna.create_study(study_name="s", storage=open_storage(f"journal:{tmp_path / 'j.log'}", heartbeat=True))
    study.enqueue_trial({"x": 1.0})
    (other,) = (claim_waiting(study, t) for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,)))
    set_trial_system_attr(study, other, TIMEOUT_ATTR, 600.0)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE", "60")
    said = []
    worker = _Worker.__new__(_Worker)
    worker.study, worker.settings, worker.waited_for = study, SimpleNamespace(trial_timeout=900.0), set()
    worker.ctx = SimpleNamespace(asked=[], ui=SimpleNamespace(info=said.append))
    worker._say_overdue_wait()
    worker._say_overdue_wait()
    start = study.trials[0].datetime_start
    until = start + datetime.timedelta(seconds=660)
    assert said == [
        f"waiting for trial 0, RUNNING in another process since {start:%H:%M:%S}; this storage has no heartbeats, so if that "
        f"process is gone the trial is retried at {until:%H:%M:%S} (--trial-timeout + $AUTOTUNE_HEARTBEAT_GRACE)"
    ]


# --- the gRPC storage proxy -------------------------------------------------------------------------


@requires_grpc
@pytest.mark.slow
def test_a_search_and_a_worker_share_a_study_through_the_storage_proxy(tmp_path):
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    with storage_proxy(db, tmp_path) as (url, proxy):
        worker = _spawn(["worker", "--storage", url, "--study-name", "shared"], tmp_path)  # waits for the study
        search = _spawn(["search", MODELS / "tiny.py", "--trials", 6, "--samples", 256, "--confirm", 0, "--storage", url,
                         "--study-name", "shared"], tmp_path)
        (s_out, s_err), (w_out, w_err) = search.communicate(timeout=300), worker.communicate(timeout=300)
        assert search.returncode == 0, s_err[-3000:]
        assert worker.returncode == 0, w_err[-3000:]
        study = optuna.load_study(study_name="shared", storage=open_storage(url))
        trials = study.get_trials()
        assert [t.number for t in trials] == list(range(6)) and all(t.state.name == "COMPLETE" for t in trials), (
            [t.state.name for t in trials])
        # every budgeted trial ran exactly once, in one of the two processes
        assert sorted(_trial_lines(s_out) + _trial_lines(w_out)) == list(range(6)), (s_out, w_out)
        assert sum(t.user_attrs["baseline"] for t in trials) == 1
        assert "worker ran" in w_out and "waiting up to 120 s for the study to be created" in w_out
        shown = yaml.safe_load(subprocess.run([sys.executable, "-m", "autotune", "show", "shared", "--storage", url, "--format", "yaml"],
                                              cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout)
        assert len(shown) == 6
        assert proxy.poll() is None
        proxy.send_signal(signal.SIGTERM)
        _out, err = proxy.communicate(timeout=30)
        assert proxy.returncode == 0 and err.strip().splitlines()[-1] == f"storage proxy on 127.0.0.1:{url.rsplit(':', 1)[1]} stopped"
    assert len(optuna.load_study(study_name="shared", storage=db).trials) == 6  # it all lives in the database behind the proxy


@requires_grpc
@pytest.mark.parametrize("given", [None, "true"])
def test_a_grpc_storage_turns_grpc_s_fork_handlers_off_before_grpc_loads_unless_the_user_set_them(tmp_path, given):
    """grpc/grpc#43055: with its fork handlers on, a trial process forked while the channel is busy can abort
    before exec (SIGABRT, "epoll_wait error: Bad file descriptor"); the search's first trial was the inspection."""
    probe = ("import os, sys\nfrom autotune.storage import open_storage\nopen_storage(sys.argv[1])\n"
             "from grpc._cython import cygrpc\nprint(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), 'grpc' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    if given is not None:
        env["GRPC_ENABLE_FORK_SUPPORT"] = given
    with storage_proxy(f"sqlite:///{tmp_path / 'fork.db'}", tmp_path) as (url, _proxy):
        out = subprocess.run([sys.executable, "-c", probe, url], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [given or "false", "True"]


@requires_grpc
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_study_attributes_the_dashboard_and_a_lost_proxy_over_grpc(tmp_path, restore_dashboard, database):
    from conftest import dashboard_api
    from optuna_dashboard import wsgi

    from autotune.dashboard import _recommended
    from autotune.optuna_compat import dashboard_honours_constraints, heartbeat_interval, set_study_system_attr, study_system_attrs
    from autotune.storage import is_proxy_unreachable

    backend = f"sqlite:///{tmp_path / 'p.db'}"
    name = f"p-{uuid.uuid4().hex[:8]}"
    if database == "postgresql":
        if not _postgres_answers():
            pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432 (database test)")
        backend = POSTGRES
    with storage_proxy(backend, tmp_path) as (url, proxy):
        storage = open_storage(url, heartbeat=True)
        study = optuna.create_study(study_name=name, storage=storage)
        assert heartbeat_interval(study) is None  # GrpcStorageProxy has no heartbeats: autotune does not send any
        set_study_system_attr(study, "autotune:plan:1", {"state": "running", "held": 2})  # how a search run's plan is stored
        assert study_system_attrs(study)["autotune:plan:1"] == {"state": "running", "held": 2}
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        dashboard_honours_constraints(storage, _recommended(open_storage(url)))
        app = wsgi(storage)  # optuna-dashboard over the proxy, as `autotune dashboard grpc://...` serves it
        assert name in [s["study_name"] for s in dashboard_api(app, "/api/studies")["study_summaries"]]
        assert len(dashboard_api(app, f"/api/studies/{study._study_id}")["trials"]) == 2
        with served_dashboard(url, tmp_path) as (_port, studies):  # `autotune dashboard grpc://...`
            assert name in [s["study_name"] for s in studies]
        if database == "postgresql":
            optuna.delete_study(study_name=name, storage=POSTGRES)  # the shared test database stays tidy
        proxy.send_signal(signal.SIGKILL)
        proxy.wait(timeout=30)
        with pytest.raises(Exception) as lost:
            storage.get_all_studies()
        assert is_proxy_unreachable(lost.value)
        assert not is_proxy_unreachable(ValueError("x"))


@requires_grpc
def test_grpc_bad_inputs_are_one_line_and_never_hang(tmp_path, cli):
    r = cli("show", "x", "--storage", "grpc://")
    assert r.returncode == 2 and r.stderr.startswith("autotune: error: storage 'grpc://' names no host; write grpc://HOST:PORT")
    r = cli("worker", "--storage", "grpc://proxy-host")
    assert r.returncode == 2 and r.stderr == ("autotune: error: storage 'grpc://proxy-host' has no port; write grpc://proxy-host:PORT, "
                                              "the --port of `autotune storage-proxy` (default 13000)\n")
    r = cli("show", "x", "--storage", "grpc://proxy-host:70000")
    assert r.returncode == 2 and "the port must be a number in 1..65535" in r.stderr
    port = _free_port()
    start = time.monotonic()  # nobody listens: a bounded wait ($AUTOTUNE_STORAGE_RETRY shortens it), then one line
    r = cli("search", MODELS / "tiny.py", "--storage", f"grpc://127.0.0.1:{port}", env={"AUTOTUNE_STORAGE_RETRY": "2"}, timeout=60)
    assert time.monotonic() - start < 45
    assert r.returncode == 2 and r.stderr == (
        f"autotune: error: storage 'grpc://127.0.0.1:{port}': no storage proxy answers at 127.0.0.1:{port} (waited 2 s); start one there "
        f"with `autotune storage-proxy --storage DATABASE_URL --port {port}`, or check the host and port\n")
    assert "inspecting" not in r.stdout and not (tmp_path / "studies").exists()

    r = cli("storage-proxy", "--storage", "journal:j.log")
    assert r.returncode == 2 and "autotune storage-proxy serves a database, not 'journal:j.log'" in r.stderr
    r = cli("storage-proxy")
    assert r.returncode == 2 and r.stderr == "autotune: error: autotune storage-proxy serves a database: give --storage URL or set $AUTOTUNE_STORAGE\n"
    with socket.socket() as busy:  # a port in use: one line, not gRPC's own failure
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        r = cli("storage-proxy", "--storage", f"sqlite:///{tmp_path / 'p.db'}", "--host", "127.0.0.1", "--port", taken, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(f"autotune: error: cannot serve on 127.0.0.1:{taken} (") and len(r.stderr.splitlines()) == 1


def test_the_proxy_port_is_free_again_at_once_after_a_proxy_stopped_but_not_while_one_listens():
    """A new user's report: a restarted proxy was refused its port for ~20-60 s (connections of the
    stopped one in TIME_WAIT), and the message said to pick another port, which every worker names."""
    import socket

    from autotune.errors import StorageError
    from autotune.storage_proxy import _check_address

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    with pytest.raises(StorageError, match="another process listens there"):
        _check_address("127.0.0.1", port)
    conn.close()  # the server side closes first: its end of the connection stays in TIME_WAIT
    client.close()
    server.close()
    _check_address("127.0.0.1", port)  # free for a new proxy at once
