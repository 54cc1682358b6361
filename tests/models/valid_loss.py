"""A tiny regression model for tests that logs ``valid_loss`` (not autotune's default ``val_loss``) and
its own metric named ``train_loss``, on another scale than the loss ``training_step`` returns (x 1000),
so that the returned loss autotune falls back on cannot pass for the user's ``train_loss``."""

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class PointsData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def setup(self, stage=None):
        x = torch.randn(1280, 4, generator=torch.Generator().manual_seed(0))
        y = x.sum(1, keepdim=True)
        self.train_set, self.val_set = TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class ValidLossModel(pl.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss.detach() * 1000)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("valid_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
