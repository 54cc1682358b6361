"""A CNN with BatchNorm and a OneCycleLR schedule on scikit-learn's bundled digits, upsampled to 16x16.

Model-zoo entry of ``benchmarks/zoo.py`` (no download: the 1,797 digits ship with scikit-learn).
BatchNorm makes the loss depend on the per-device batch; OneCycleLR reads
``trainer.estimated_stepping_batches``, so the schedule follows the number of optimizer steps.

    autotune search benchmarks/zoo/bn_cnn.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class DigitsBNDataModule(pl.LightningDataModule):
    """Digits as ``(N, 1, 16, 16)`` float tensors in [0, 1] (bilinear upsampling), 80/20 split.

    Args:
        batch_size: Samples per batch (per device).
        num_workers: DataLoader worker processes.
        seed: Seed of the train/validation split.
    """

    def __init__(self, batch_size: int = 64, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = len(x) // 5
        self.val_set = TensorDataset(x[order[:n_val]], y[order[:n_val]])
        self.train_set = TensorDataset(x[order[n_val:]], y[order[n_val:]])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class BNConvNet(pl.LightningModule):
    """Four conv-BatchNorm-ReLU blocks, global average pooling, a linear head; SGD with OneCycleLR.

    Logs ``val_loss`` (cross-entropy) and ``val_acc``.

    Args:
        lr: Peak learning rate of OneCycleLR (SGD, momentum 0.9).
        channels: Channels of the first block (doubled after each pooling).
        weight_decay: SGD weight decay.
    """

    def __init__(self, lr: float = 0.05, channels: int = 16, weight_decay: float = 5e-4):
        super().__init__()
        self.save_hyperparameters()
        c = channels
        self.features = nn.Sequential(
            _block(1, c), _block(c, c), nn.MaxPool2d(2), _block(c, 2 * c), _block(2 * c, 2 * c), nn.AdaptiveAvgPool2d(1)
        )
        self.head = nn.Linear(2 * c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, 10)`` for images ``(batch, 1, 16, 16)``."""
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=self.hparams.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
