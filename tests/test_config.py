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


def test_trainer_args_are_the_trainer_keywords_the_config_sets():
    c = TrialConfig(batch_size=16, precision="bf16-mixed", accumulate_grad_batches=4, accelerator="gpu", devices=2, strategy="fsdp",
                    num_nodes=3, num_workers=2, lr=0.1, pin_memory=True, compile="default", channels_last=True,
                    float32_matmul_precision="high", model_args={"hidden": 8})
    args = c.trainer_args()
    assert args == {"accelerator": "gpu", "devices": 2, "strategy": "fsdp", "precision": "bf16-mixed",
                    "accumulate_grad_batches": 4, "num_nodes": 3}
    assert TrialConfig(batch_size=1).trainer_args() == {"accelerator": "cpu", "devices": 1, "strategy": "auto", "precision": "32-true",
                                                        "accumulate_grad_batches": 1, "num_nodes": 1}
    args["devices"] = 8  # a fresh plain dict each call
    assert c.trainer_args()["devices"] == 2


def test_trainer_args_feed_the_trial_trainer_and_the_export():
    from autotune.export import lightning_cli_config
    from autotune.trial_trainer import trainer_kwargs

    c = TrialConfig(batch_size=16, precision="16-mixed", accumulate_grad_batches=2, accelerator="gpu", devices=4, strategy="ddp", num_nodes=2)
    kwargs = trainer_kwargs(c, samples=1024, user_trainer={"precision": "64-true", "gradient_clip_val": 1.0}, root_dir="/tmp/x")
    assert {k: kwargs[k] for k in c.trainer_args()} == c.trainer_args()
    assert kwargs["gradient_clip_val"] == 1.0
    doc, _ = lightning_cli_config(c, {})
    assert doc["trainer"] == c.trainer_args()
    doc, _ = lightning_cli_config(c.replace(num_nodes=1), {})  # one node: num_nodes is left out of the export
    assert "num_nodes" not in doc["trainer"]


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
