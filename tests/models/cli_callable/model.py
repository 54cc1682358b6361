"""A LightningCLI project in the dependency-injection style of Lightning's docs: the module takes its
optimizer and scheduler as callables (``OptimizerCallable``), which the config picks by class_path
under ``model:``, so the lr lives at ``model.optimizer.init_args.lr``. Each trial logs what really ran."""

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Blobs(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 20, generator=g)
        self.train_set = TensorDataset(x, (x[:, :5].sum(1) > 0).long())

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)


class Net(pl.LightningModule):
    def __init__(
        self,
        hidden: int = 32,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable = torch.optim.lr_scheduler.ConstantLR,
    ):
        super().__init__()
        self.optimizer, self.scheduler = optimizer, scheduler
        self.net = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        optimizer = self.trainer.optimizers[0]
        # what ran, next to what the trial asked for (tests read these back from the trial's metrics)
        self.log("ran_adamw", float(type(optimizer).__name__ == "AdamW"))
        self.log("ran_initial_lr", optimizer.param_groups[0]["initial_lr"])
        self.log("ran_weight_decay", optimizer.param_groups[0]["weight_decay"])
        return loss

    def configure_optimizers(self):
        optimizer = self.optimizer(self.parameters())
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler(optimizer)}
