import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Searches in tests skip the confirmation runs unless a test asks for them with --confirm K
# (they would multiply the suite's time; tests/test_search_e2e.py checks confirmation itself).
os.environ.setdefault("AUTOTUNE_CONFIRM", "0")
# Searches use every core whatever the load: the other xdist worker keeps a core busy now and then, and a run
# that left it out (autotune.jobs.measure_busy_cores) would measure on fewer cores than a test assumes;
# tests/test_jobs.py and tests/test_host_load.py check leaving a busy core out.
os.environ.setdefault("AUTOTUNE_BUSY_CORES", "none")
# Likewise pruning (it would make trial states depend on timing); the pruning tests pass --pruner.
os.environ.setdefault("AUTOTUNE_PRUNER", "none")
# And the staged search: the tests that count or order trials assume every trial samples every knob
# at full budget; tests/test_staged.py checks --search staged.
os.environ.setdefault("AUTOTUNE_SEARCH", "flat")

# A test suite started in the background of a shell without job control (`bash .ci/run &`, nohup)
# inherits SIGINT ignored, and an ignored signal stays ignored across exec: the searches and dashboards
# the tests stop with Ctrl-C would never see it. A handled signal is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "models"
EXAMPLES = ROOT / "examples"


def run_cli(args, cwd, env=None, timeout=600, check_rc=None):
    """Run ``python -m autotune ARGS`` in ``cwd``; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.pop("AUTOTUNE_STORAGE", None)
    # pytest-xdist's workers set COLUMNS=80: the CLI's tables would drop columns a test looks for
    full_env.pop("COLUMNS", None)
    full_env.pop("LINES", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check_rc is not None and proc.returncode != check_rc:
        raise AssertionError(f"exit code {proc.returncode} != {check_rc}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def cli(tmp_path):
    def _run(*args, **kwargs):
        return run_cli(args, cwd=kwargs.pop("cwd", tmp_path), **kwargs)

    return _run


def load(db_path, name):
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{db_path}")


def dashboard_api(app, path):
    """GET ``path`` from an optuna-dashboard WSGI ``app`` (no server), as JSON; asserts status 200."""
    import io
    import json
    from wsgiref.util import setup_testing_defaults

    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status = []
    body = b"".join(app(environ, lambda s, h, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), (status, body[:500])
    return json.loads(body)


@pytest.fixture
def restore_dashboard():
    """Undo what ``autotune dashboard`` patches into optuna-dashboard's app module in this process."""
    import optuna_dashboard._app as dashboard_app

    saved = dashboard_app.get_pareto_front_trials, dashboard_app.get_param_importance_from_trials_cache
    yield
    dashboard_app.get_pareto_front_trials, dashboard_app.get_param_importance_from_trials_cache = saved


@contextlib.contextmanager
def served_dashboard(target, cwd):
    """``autotune dashboard TARGET`` on a free port until the block ends; yields ``(port, study summaries)``."""
    import json
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", str(target), "--port", str(port)], cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        studies = None
        for _ in range(100):
            try:
                studies = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5))["study_summaries"]
                break
            except OSError:
                time.sleep(0.3)
        assert studies is not None, "autotune dashboard did not answer"
        yield port, studies
    finally:
        server.terminate()
        server.communicate(timeout=30)
