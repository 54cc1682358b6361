import math
import re

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


def test_a_trial_raises_the_users_max_epochs_only_where_it_would_end_before_the_budget():
    from autotune.trial_trainer import budget_epochs, trainer_kwargs, trial_max_epochs

    c = TrialConfig(batch_size=32)
    # 20,000 samples of a 456-sample set, batch 32: 14 full batches an epoch (the partial one may be dropped)
    assert budget_epochs(c, 20000, 456) == 45
    assert trial_max_epochs(15, c, 20000, 456) == 45  # the user's 15 would stop at 6,840 samples
    assert trial_max_epochs(100, c, 20000, 456) == 100  # the budget fits: the user's, for a schedule that reads it
    assert trial_max_epochs(None, c, 20000, 456) == -1 and trial_max_epochs(15, c, 20000, None) == 15
    # two devices: each rank sees half an epoch's samples per epoch
    assert budget_epochs(c.replace(devices=2, strategy="ddp"), 20000, 456) == math.ceil(313 / 7)
    kwargs = trainer_kwargs(c, samples=20000, user_trainer={"max_epochs": 15}, root_dir="/tmp/x", train_samples=456)
    assert kwargs["max_epochs"] == 45


@pytest.mark.parametrize("monitor, refused", [
    ("val_acc", True), ("val/f1", True), ("test_auroc", True), ("valid_acc_top1", True), ("val_mAP", True),
    ("val_loss", False), ("val_top1_error", False), ("val_acc_loss", False), ("val_ppl", False), ("reward", False),
])
def test_a_new_study_minimising_a_metric_named_as_a_score_is_refused(monitor, refused):
    from autotune.study.options import check_monitor_mode

    check_monitor_mode(monitor, "min")  # an explicit --mode is the user's word
    check_monitor_mode(monitor, "max")
    if refused:
        with pytest.raises(UsageError, match=f"--monitor {re.escape(monitor)} reads like a score .* pass --mode max"):
            check_monitor_mode(monitor, None)
    else:
        check_monitor_mode(monitor, None)


@pytest.mark.parametrize("monitor, mode, warned", [
    ("val_loss", "max", "reads like a loss or an error, where lower is better, but --mode max maximises it: a config is then "
                        "feasible for a higher val_loss; pass --mode min"),
    ("val_acc", "min", "reads like a score, where higher is better, but --mode min minimises it: a config is then feasible "
                       "for a lower val_acc; pass --mode max"),
    ("val_loss", "min", None), ("val_acc", "max", None), ("neg_loss", "max", None), ("reward", "max", None),
    ("val_acc_loss", "max", None), ("val_loss", None, None),
])
def test_an_explicit_mode_against_what_the_metric_s_name_reads_as_is_warned(monitor, mode, warned):
    """helper-29: --monitor val_loss --mode max was accepted silently (a higher loss then counts as feasible)."""
    from autotune.study.options import monitor_mode_warning

    said = monitor_mode_warning(monitor, mode)
    assert (said is None) if warned is None else (said is not None and warned in said), said
