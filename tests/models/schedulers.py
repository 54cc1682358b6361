"""Schedulers written the way Lightning's docs write them.

``scheduler="onecycle"``: OneCycleLR over ``trainer.estimated_stepping_batches`` (it raises when
stepped past its total steps, and an infinite estimate is refused). ``scheduler="plateau"``:
ReduceLROnPlateau on ``val_loss`` at every epoch's end (Lightning fails the fit when the metric is
missing then). 512 training samples: a 2048-sample trial spans 4 epochs.
"""

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class SmallData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(640, 10, generator=g)
        y = x.sum(1, keepdim=True)
        self.train_set, self.val_set = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=128)


class ScheduledModel(pl.LightningModule):
    def __init__(self, lr: float = 0.05, scheduler: str = "onecycle"):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(10, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))
        self.log("ran_validations", float(self.trainer.current_epoch + 1))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        if self.hparams.scheduler == "plateau":
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss", "interval": "epoch"}}
        total = self.trainer.estimated_stepping_batches
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=int(total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
