"""batch_size is an argument of both the DataModule and the LightningModule, which LightningCLI links
(``parser.link_arguments("data.batch_size", "model.batch_size")`` in train.py's CLI subclass); the
module scales its lr with the batch size, so a trial that left the module's batch size alone would
train another model than the exported config."""

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class LinkedData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 20, generator=g)
        y = (x[:, :5].sum(1) > 0).long()
        self.train_set, self.val_set = TensorDataset(x[:1536], y[:1536]), TensorDataset(x[1536:], y[1536:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=128)


class LinkedModel(pl.LightningModule):
    def __init__(self, batch_size: int = 32, base_lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        if batch_idx == 0:
            self.log("ran_loader_batch", float(x.shape[0]), on_step=False, on_epoch=True, reduce_fx="max")
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))
        self.log("ran_module_batch", float(self.hparams.batch_size))
        self.log("ran_gradient_clip_val", float(self.trainer.gradient_clip_val or 0.0))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.base_lr * self.hparams.batch_size / 32)
