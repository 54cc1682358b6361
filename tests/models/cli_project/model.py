"""A LightningCLI project: the config picks the model and data by class_path, gives the model an
encoder object (a nested class_path), and chooses the optimizer and the lr scheduler (LightningCLI
replaces configure_optimizers); the trainer keeps gradient clipping and a callback of the user's.
Each trial logs what really ran, so tests can compare it with the trial's config."""

import os

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Blobs(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0, size: int = 2048):
        super().__init__()
        self.batch_size, self.num_workers, self.size = batch_size, num_workers, size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.size, 20, generator=g)
        y = (x[:, :5].sum(1) > 0).long()
        cut = self.size * 3 // 4
        self.train_set, self.val_set = TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=128)


class Encoder(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, hidden), nn.ReLU())
        self.hidden = hidden


class Classifier(pl.LightningModule):
    """No configure_optimizers: the config's optimizer: and lr_scheduler: sections decide."""

    def __init__(self, encoder: Encoder, dropout: float = 0.0):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(encoder.hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.head(self.encoder.net(x)), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.head(self.encoder.net(x)), y))
        optimizer = self.trainer.optimizers[0]
        # what ran, next to what the trial asked for (tests read these back from the trial's metrics)
        self.log("ran_adam", float(type(optimizer).__name__ == "Adam"))
        self.log("ran_initial_lr", optimizer.param_groups[0]["initial_lr"])
        self.log("ran_encoder_hidden", float(self.encoder.hidden))
        self.log("ran_scheduler", float(len(self.trainer.lr_scheduler_configs)))
        self.log("ran_gradient_clip_val", float(self.trainer.gradient_clip_val or 0.0))


class Mark(pl.Callback):
    """The user's own callback: leaves a file behind when training starts (in $CLI_PROJECT_MARKS)."""

    def __init__(self, name: str = "mark"):
        self.name = name

    def on_train_start(self, trainer, pl_module):
        folder = os.environ.get("CLI_PROJECT_MARKS")
        if folder:
            with open(os.path.join(folder, f"{self.name}-{os.getpid()}"), "w") as f:
                f.write("ran\n")
