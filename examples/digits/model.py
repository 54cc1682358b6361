"""A small CNN on scikit-learn's bundled handwritten digits (1,797 8x8 grey images, 10 classes).

Real data that ships inside a package, so it runs anywhere without a download:

    autotune search examples/digits/model.py --trials 12
    python examples/digits/train.py fit --config studies/digits.best.yaml
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class DigitsDataModule(pl.LightningDataModule):
    """Digits images as ``(N, 1, 8, 8)`` float tensors in [0, 1], 80/20 train/validation split.

    Args:
        batch_size: Samples per batch (per device).
        num_workers: DataLoader worker processes.
        val_fraction: Fraction of the images held out for validation, 0 < f < 1.
        seed: Seed of the split.
    """

    def __init__(self, batch_size: int = 32, num_workers: int = 0, val_fraction: float = 0.2, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.val_fraction = val_fraction
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = int(len(x) * self.val_fraction)
        self.val_set = TensorDataset(x[order[:n_val]], y[order[:n_val]])
        self.train_set = TensorDataset(x[order[n_val:]], y[order[n_val:]])

    def _loader(self, dataset: TensorDataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)


class DigitsClassifier(pl.LightningModule):
    """Two conv layers and a linear head; logs ``val_loss`` (cross-entropy) and ``val_acc``.

    Args:
        lr: Adam learning rate.
        channels: Channels of the first conv layer (the second has twice as many).
    """

    def __init__(self, lr: float = 1e-3, channels: int = 32):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * channels * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
