"""A head that the loss never uses: DDP needs ``find_unused_parameters``, which the user's config asks
for with ``strategy: ddp_find_unused_parameters_true``."""

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class PairData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1024, 10, generator=g)
        y = (x[:, 0] > 0).long()
        self.train_set, self.val_set = TensorDataset(x[:896], y[:896]), TensorDataset(x[896:], y[896:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)


class TwoHeads(pl.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.body = nn.Linear(10, 16)
        self.used, self.unused = nn.Linear(16, 2), nn.Linear(16, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.used(torch.relu(self.body(x))), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.used(torch.relu(self.body(x))), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
