import os
import subprocess
import sys
from pathlib import Path

import pytest

# Searches in tests skip the confirmation runs unless a test asks for them with --confirm K
# (they would multiply the suite's time; tests/test_search_e2e.py checks confirmation itself).
os.environ.setdefault("AUTOTUNE_CONFIRM", "0")
# Likewise pruning (it would make trial states depend on timing); the pruning tests pass --pruner.
os.environ.setdefault("AUTOTUNE_PRUNER", "none")
# And the staged search: the tests that count or order trials assume every trial samples every knob
# at full budget; tests/test_staged.py checks --search staged.
os.environ.setdefault("AUTOTUNE_SEARCH", "flat")

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "models"
EXAMPLES = ROOT / "examples"


def run_cli(args, cwd, env=None, timeout=600, check_rc=None):
    """Run ``python -m autotune ARGS`` in ``cwd``; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.pop("AUTOTUNE_STORAGE", None)
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
