"""End-to-end: Lightning projects as users write them (manual optimization, their own metric names, a
DDP rank that raises) run through `autotune search` into a real SQLite study."""

import optuna
import pytest
from conftest import MODELS, load

pytestmark = pytest.mark.slow

SMALL = ("--samples", 512, "--trials", 3, "--confirm", 0)


def test_manual_optimization_without_monitor_fails_the_baseline_with_one_line_naming_the_metrics(tmp_path, cli):
    db = tmp_path / "gan.db"
    r = cli("search", MODELS / "manual_gan.py", *SMALL, "--storage", f"sqlite:///{db}", "--quiet")
    assert r.returncode == 2, r.stderr  # bad input: --monitor names no metric the model logs
    reason = "the judged metric 'val_loss' was never logged, and training_step returns no loss; logged: ['d_loss', 'g_loss']; give --monitor NAME"
    assert f"trial 0 -> FAIL: {reason}\n" in r.stdout  # the trial's line, whole on one line (--quiet: it names its trial)
    assert r.stderr.startswith(f"autotune: error: the baseline trial 0 (the model's own config) failed: {reason};")
    assert "run the same command with --monitor NAME, NAME one of the metrics it logged" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "non-finite" not in r.stdout + r.stderr
    (baseline,) = load(db, "manual_gan").trials
    assert baseline.state == optuna.trial.TrialState.FAIL
    assert (baseline.user_attrs["fail_kind"], baseline.user_attrs["fail_reason"]) == ("monitor_missing", reason)
    # the way out the message names: the same command with --monitor (no trial has completed, so the
    # study's settings can still be corrected); the objective, which sets the study's directions, cannot
    bad = cli("search", MODELS / "manual_gan.py", *SMALL, "--storage", f"sqlite:///{db}", "--objective", "goodput", "--quiet")
    assert bad.returncode == 2 and "was created with objective='throughput', not 'goodput'" in bad.stderr
    # a mistyped --config path is said to be missing, not to differ from the study's (none)
    bad = cli("search", MODELS / "manual_gan.py", *SMALL, "--storage", f"sqlite:///{db}", "--config", tmp_path / "nosuch.yaml")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("nosuch.yaml' does not exist") and "was created with" not in bad.stderr
    cli("search", MODELS / "manual_gan.py", *SMALL, "--monitor", "g_loss", "--loss-tolerance", 0.5, "--storage", f"sqlite:///{db}",
        "--quiet", check_rc=0)
    study = load(db, "manual_gan")
    assert (study.user_attrs["autotune"]["monitor"], study.user_attrs["autotune"]["monitor_explicit"]) == ("g_loss", True)
    assert any(t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs["baseline"] for t in study.trials)


def test_manual_optimization_judged_by_a_logged_metric_never_searches_accumulation(tmp_path, cli):
    db = tmp_path / "gan.db"
    r = cli("search", MODELS / "manual_gan.py", *SMALL, "--monitor", "g_loss", "--loss-tolerance", 0.5,
            "--storage", f"sqlite:///{db}", "--out", tmp_path / "best.yaml", check_rc=0)
    assert ("warning: dropped 'accumulate_grad_batches': the module uses manual optimization (automatic_optimization = False), "
            "and Lightning accumulates gradients only under automatic optimization\n") in r.stdout
    study = load(db, "manual_gan")
    # Lightning's global_step counts both optimizers' steps: every trial still trains its whole budget
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(t.user_attrs["samples_seen"] >= 512 for t in done), [t.user_attrs["samples_seen"] for t in done]
    assert "accumulate_grad_batches" not in study.user_attrs["autotune"]["space"]
    assert study.user_attrs["autotune"]["model_info"]["automatic_optimization"] is False
    assert len(study.trials) == 3
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE, t.user_attrs.get("fail_reason")
        assert "accumulate_grad_batches" not in t.params and t.user_attrs["config"]["accumulate_grad_batches"] == 1
        assert t.user_attrs["loss_source"] == "g_loss" and t.user_attrs["loss"] == t.user_attrs["metrics"]["g_loss"]
        # training_step returns nothing: the curve (and the time to the baseline's loss) is g_loss as logged per batch
        assert len(t.user_attrs["loss_curve"]) >= 2 and t.user_attrs["loss_target"] is not None, t.user_attrs.get("loss_curve")
        assert "target_reached" in t.user_attrs
    assert "never logged" not in r.stdout  # the judged metric was logged


def test_a_monitor_never_logged_is_said_after_the_baseline_and_the_returned_loss_is_not_the_user_s_train_loss(tmp_path, cli):
    db = tmp_path / "v.db"
    r = cli("search", MODELS / "valid_loss.py", *SMALL, "--storage", f"sqlite:///{db}", check_rc=0)
    lines = r.stdout.splitlines()
    baseline_end = next(i for i, line in enumerate(lines) if line.startswith("trial 0 (baseline)")) + 1
    assert lines[baseline_end].startswith("  -> ") and "autotune/train_loss" in lines[baseline_end]
    assert lines[baseline_end + 1] == (
        "warning: the judged metric 'val_loss' (--monitor) was never logged, so convergence is judged by the loss "
        "training_step returns (autotune/train_loss); logged: ['train_loss', 'valid_loss']; give --monitor NAME to judge one of them"
    )
    assert sum("was never logged" in line for line in lines) == 1  # once, after the baseline only
    trials = load(db, "valid_loss").trials
    assert trials[0].state == optuna.trial.TrialState.COMPLETE
    for t in trials:
        if t.state == optuna.trial.TrialState.COMPLETE:
            attrs = t.user_attrs
            assert attrs["loss_source"] == "autotune/train_loss"
            # the module logs its own train_loss 1000x the returned loss: autotune's loss is the returned one
            assert attrs["metrics"]["train_loss"] > 100 * attrs["loss"]
            assert attrs["loss"] == pytest.approx(attrs["train_loss_final"])


def test_early_stopping_in_the_config_is_left_out_of_trials_and_a_stop_of_the_module_s_own_fails_the_trial(tmp_path, cli):
    """helper-28: an EarlyStopping in --config cut 16,384-sample trials to 5,928-7,296 samples, each a
    different length, and every figure still said 16,384."""
    db, config = tmp_path / "stop.db", tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  callbacks:\n"
        "    - {class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val_loss, stopping_threshold: 1000.0}}\n"
        "    - {class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {monitor: val_loss}}\n"
    )
    r = cli("search", MODELS / "tiny.py", "--config", config, "--samples", 8192, "--trials", 2, "--confirm", 0,
            "--storage", f"sqlite:///{db}", env={"TINY_FAULTS": "1:stop", "TINY_EARLY_STOP": "1"})  # and one from configure_callbacks()
    assert r.returncode == 0, r.stderr
    assert "trials leave out your config's EarlyStopping, ModelCheckpoint: every trial trains its whole budget" in r.stdout
    base, stopped = load(db, "tiny").trials
    # the threshold stops training at the first validation (an epoch of 3,584 samples): left out, the baseline trains 8,192
    assert base.state == optuna.trial.TrialState.COMPLETE and base.user_attrs["samples_seen"] == 8192
    assert "stopped_early" not in base.user_attrs
    assert stopped.state == optuna.trial.TrialState.FAIL and stopped.user_attrs["fail_kind"] == "stopped_early"
    ran, planned = stopped.user_attrs["stopped_early"]
    assert ran == 6 and planned == 8192 // stopped.user_attrs["config"]["batch_size"]
    assert stopped.user_attrs["fail_reason"].startswith(f"training stopped after 6 of its {planned:,} batches (")
    assert "AUTOTUNE_TRIAL_NUMBER" in stopped.user_attrs["fail_reason"]


@pytest.mark.parametrize("launch", [(), ("--cold",)], ids=["warm", "cold"])
def test_a_ddp_rank_s_exception_reaches_the_trial_s_fail_reason(tmp_path, cli, launch):
    # warm: the ranks are forked, and the launching process gets the rank's traceback as text;
    # cold: each rank reports, and rank 0 then fails too, in the collective that rank 1 left
    db = tmp_path / "ddp.db"
    r = cli("search", MODELS / "rank_raise.py", "--samples", 512, "--trials", 1, "--devices", 2, *launch, "--storage", f"sqlite:///{db}")
    assert r.returncode == 1, r.stderr
    (trial,) = load(db, "rank_raise").trials
    reason = trial.user_attrs["fail_reason"]
    assert trial.user_attrs["fail_kind"] == "exception"
    assert reason.startswith("exception in user code: ValueError: boom at step 3 at rank_raise.py:") and reason.endswith("(rank 1)")
    assert "ValueError: boom at step 3" in r.stderr


_SKIPS_BATCHES = """
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class SkipsBatches(pl.LightningModule):
    def __init__(self, lr: float = 0.05, batch_size: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        return None if batch_idx % 2 else loss  # None: Lightning skips this batch's backward and optimizer step

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def train_dataloader(self):
        x = torch.randn(512, 4, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=64)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
"""


def test_a_training_step_that_returns_none_on_some_batches_completes_and_measures_the_gradient_noise(tmp_path, cli):
    (tmp_path / "skips.py").write_text(_SKIPS_BATCHES)
    db = tmp_path / "skips.db"
    r = cli("search", "skips.py", "--samples", 256, "--trials", 1, "--confirm", 0, "--objective", "goodput", "--storage", f"sqlite:///{db}")
    assert r.returncode == 0, r.stdout + r.stderr
    (trial,) = load(db, "skips").trials
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("fail_reason")
    assert trial.user_attrs["noise"]["method"] == "consecutive_steps" and trial.user_attrs["noise"]["measurements"] > 0
    assert trial.user_attrs["noise_method"] == "consecutive_steps" and trial.user_attrs["goodput"] > 0
