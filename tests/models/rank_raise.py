"""A tiny regression model for tests whose ``training_step`` raises ``ValueError("boom at step 3")``
on global rank 1 only (a DDP trial with ``--devices 2``), at its fourth batch."""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class PointsData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, num_workers: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def setup(self, stage=None):
        x = torch.randn(1024, 4, generator=torch.Generator().manual_seed(0))
        self.train_set = TensorDataset(x, x.sum(1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, num_workers=self.num_workers)


class RankRaise(pl.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_rank == 1 and batch_idx == 3:
            raise ValueError("boom at step 3")
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
