"""An integer limit_val_batches validates every trial on the baseline's samples (autotune.val_limit)."""

import pytest
from conftest import load

from autotune.val_limit import scaled_limit

MODEL = '''import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Counted(pl.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.lr = lr
        self.layer = torch.nn.Linear(4, 2)
        self.seen = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def on_validation_epoch_start(self):
        self.seen = 0

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.seen += len(x)
        self.log("val_loss", F.cross_entropy(self.layer(x), y))

    def on_validation_epoch_end(self):
        self.log("ran_val_samples", float(self.seen))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(768, 4, generator=g)
        y = (x.sum(1) > 0).long()
        self.train_set, self.val_set = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):  # the same batch_size as training: ten batches are 160 samples at 16, 640 at 64
        return DataLoader(self.val_set, batch_size=self.batch_size)
'''


@pytest.mark.parametrize("limit, val_batch, batch, baseline, expected", [
    (4, 64, 64, 32, 2),  # the loader follows batch_size: the baseline's 128 samples
    (4, 16, 16, 32, 8),
    (1, 64, 64, 16, 1),  # at least one batch
    (4, 128, 64, 32, None),  # a loader of its own batch size validates the same samples at any batch
    (4, 32, 32, 32, None),  # the baseline's batch size
    (0.25, 64, 64, 32, None),  # a fraction of the batches: the same share of the samples at any batch size
    (True, 64, 64, 32, None),
    (4, None, 64, 32, None),  # the loader's batch size is unknown
])
def test_an_integer_limit_is_scaled_only_when_the_validation_loader_follows_the_batch_size(limit, val_batch, batch, baseline, expected):
    assert scaled_limit(limit, val_batch, batch, baseline) == expected


def test_every_trial_validates_on_the_baseline_s_samples_under_an_integer_limit_val_batches(tmp_path, cli):
    """helper-36: with limit_val_batches: 10 and a validation loader of the searched batch_size, batch 16 was judged on
    160 samples and batch 128 on 1,280, and a same-math split of the baseline's batch failed the loss by 18%."""
    (tmp_path / "counted.py").write_text(MODEL)
    (tmp_path / "config.yaml").write_text("trainer:\n  limit_val_batches: 4\n")
    (tmp_path / "b16.yaml").write_text("data:\n  batch_size: 16\n")
    (tmp_path / "b64.yaml").write_text("data:\n  batch_size: 64\n")
    (tmp_path / "space.yaml").write_text("batch_size: {choices: [16, 32, 64]}\n")
    cli("search", "counted.py", "--config", "config.yaml", "--space", "space.yaml", "--enqueue", "b16.yaml", "--enqueue", "b64.yaml",
        "--trials", 3, "--samples", 256, check_rc=0)
    trials = load(tmp_path / "studies" / "counted.db", "counted").trials
    seen = {t.user_attrs["config"]["batch_size"]: t.user_attrs["metrics"]["ran_val_samples"] for t in trials if t.state.name == "COMPLETE"}
    assert seen == {32: 128.0, 16: 128.0, 64: 128.0}, seen  # 4 batches of 32, 8 of 16, 2 of 64
