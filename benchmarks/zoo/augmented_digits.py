"""An input-bound model: digits with costly per-sample augmentation in ``Dataset.__getitem__``.

Model-zoo entry of ``benchmarks/zoo.py``. Each sample is upsampled to 32x32, randomly rotated,
scaled and shifted (an affine ``grid_sample``), blurred, noised and partly erased, one sample at a
time as torchvision-style transforms do. The model is a small CNN, so the DataLoader's worker
processes (``num_workers``), not the model, bound the throughput at the defaults.

    autotune search benchmarks/zoo/augmented_digits.py
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

_SIZE = 32


def _augment(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One augmented ``(1, 32, 32)`` image from an ``(1, 8, 8)`` image in [0, 1]."""
    x = F.interpolate(image.unsqueeze(0), size=(_SIZE, _SIZE), mode="bicubic", align_corners=False)
    angle, scale, dx, dy = (torch.rand(4, generator=generator) * 2 - 1).tolist()
    angle *= math.pi / 12  # up to 15 degrees
    scale = 1.0 + 0.15 * scale
    cos, sin = math.cos(angle) / scale, math.sin(angle) / scale
    theta = torch.tensor([[[cos, -sin, 0.1 * dx], [sin, cos, 0.1 * dy]]])
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    kernel = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
    kernel = (kernel[:, None] * kernel[None, :] / 256.0).view(1, 1, 5, 5)
    x = F.conv2d(x, kernel, padding=2)
    x = x + 0.05 * torch.randn(x.shape, generator=generator)
    top, left = torch.randint(0, _SIZE - 8, (2,), generator=generator).tolist()
    x[..., top : top + 8, left : left + 8] = 0.0  # random erasing
    return ((x - 0.2) / 0.3).squeeze(0)


class AugmentedDigits(Dataset):
    """Digits images augmented on the fly: item ``i`` is ``(image (1, 32, 32) float, label int)``.

    Args:
        images: ``(N, 1, 8, 8)`` float tensor in [0, 1].
        labels: ``(N,)`` long tensor.
        seed: Seed of the augmentation (each item and epoch differ).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, seed: int = 0):
        self.images = images
        self.labels = labels
        self.seed = seed
        self.calls = 0

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        self.calls += 1
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index * 7919 + self.calls)
        return _augment(self.images[index], generator), self.labels[index]


class AugmentedDigitsDataModule(pl.LightningDataModule):
    """Augmented digits for training, plain upsampled digits for validation (80/20 split).

    Args:
        batch_size: Samples per batch (per device).
        num_workers: DataLoader worker processes (each runs the per-sample augmentation).
        seed: Seed of the split and the augmentation.
    """

    def __init__(self, batch_size: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = len(x) // 5
        val_x = F.interpolate(x[order[:n_val]], size=(_SIZE, _SIZE), mode="bicubic", align_corners=False)
        self.val_set = TensorDataset((val_x - 0.2) / 0.3, y[order[:n_val]])
        self.train_set = AugmentedDigits(x[order[n_val:]], y[order[n_val:]], self.seed)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class AugmentedCNN(pl.LightningModule):
    """A small strided CNN for ``(batch, 1, 32, 32)`` images; logs ``val_loss`` and ``val_acc``.

    Args:
        lr: Adam learning rate.
        channels: Channels of the first conv layer (the second has twice as many).
    """

    def __init__(self, lr: float = 2e-3, channels: int = 16):
        super().__init__()
        self.save_hyperparameters()
        c = channels
        self.net = nn.Sequential(
            nn.Conv2d(1, c, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * c, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, 10)``."""
        return self.net(x)

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
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
