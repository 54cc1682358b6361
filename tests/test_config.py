import pytest

from autotune.config import TrialConfig
from autotune.errors import UsageError
from autotune.study import default_study_name, mask_url


def test_trial_config_validation_and_effective_batch():
    c = TrialConfig(batch_size=16, accumulate_grad_batches=4, devices=2, strategy="ddp")
    assert c.effective_batch_size == 128
    assert TrialConfig.from_dict(c.to_dict()) == c
    with pytest.raises(UsageError, match=r"unknown config key\(s\) \['bs'\]"):
        TrialConfig.from_dict({"bs": 1})
    with pytest.raises(UsageError, match="precision '16' is not one of"):
        TrialConfig(batch_size=1, precision="16")
    with pytest.raises(UsageError, match="batch_size must be an integer >= 1, got 0"):
        TrialConfig(batch_size=0)


def test_default_names_and_masking():
    assert default_study_name("examples/digits/model.py") == "digits"
    assert default_study_name("examples/digits/my_net.py") == "my_net"
    assert mask_url("postgresql+psycopg://bob:s3cret@db:5432/test") == "postgresql+psycopg://bob:***@db:5432/test"
    assert mask_url("sqlite:///studies/x.db") == "sqlite:///studies/x.db"


def test_import_and_help_stay_light():
    import subprocess
    import sys

    code = "import sys, autotune.cli; print(sorted(m for m in ('torch', 'lightning', 'optuna', 'sqlalchemy') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stderr
    r = subprocess.run([sys.executable, "-m", "autotune", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "search" in r.stdout and "dashboard" in r.stdout
