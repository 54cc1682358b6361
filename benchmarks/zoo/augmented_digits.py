"""An input-bound model: digits with costly per-sample augmentation in ``Dataset.__getitem__``.

Model-zoo entry of ``benchmarks/zoo.py``. Each sample is randomly rotated, scaled and shifted
onto 32x32 (bilinear), blurred, noised and partly erased, one sample at a time in NumPy, as
PIL-style transforms do. The model is a small CNN, so the DataLoader's worker
processes (``num_workers``), not the model, bound the throughput at the defaults.

    autotune search benchmarks/zoo/augmented_digits.py
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

_SIZE = 32
_GRID = np.mgrid[0:_SIZE, 0:_SIZE].astype(np.float64) - (_SIZE - 1) / 2
_BLUR = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)


def _warp(image: np.ndarray, angle: float, scale: float, dx: float, dy: float) -> np.ndarray:
    """``image`` ``(8, 8)`` rotated by ``angle`` radians, scaled by ``scale``, shifted by ``(dx, dy)``
    source pixels and resampled (bilinear, inverse mapping) onto ``(32, 32)``, then blurred by a
    5-tap binomial kernel along each axis."""
    cos, sin = math.cos(angle) / scale, math.sin(angle) / scale
    rows, cols = _GRID
    src_r = (cos * rows - sin * cols) * (8 / _SIZE) + 3.5 + dy
    src_c = (sin * rows + cos * cols) * (8 / _SIZE) + 3.5 + dx
    r0, c0 = np.floor(src_r).astype(int), np.floor(src_c).astype(int)
    fr, fc = src_r - r0, src_c - c0
    padded = np.pad(image, 1)
    r0, c0 = np.clip(r0 + 1, 0, 8), np.clip(c0 + 1, 0, 8)
    out = (
        padded[r0, c0] * (1 - fr) * (1 - fc)
        + padded[r0 + 1, c0] * fr * (1 - fc)
        + padded[r0, c0 + 1] * (1 - fr) * fc
        + padded[r0 + 1, c0 + 1] * fr * fc
    )
    for axis in (0, 1):
        p = np.pad(out, [(2, 2) if a == axis else (0, 0) for a in (0, 1)])
        out = sum(w * np.take(p, range(k, k + _SIZE), axis=axis) for k, w in enumerate(_BLUR))
    return out


def _augment(image: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """One augmented, normalised ``(1, 32, 32)`` float image from an ``(8, 8)`` image in [0, 1], in
    NumPy as PIL-style transforms work: a random rotation (up to 15 degrees), scale (up to 15%) and
    shift, ``_warp``, Gaussian noise and an erased 8x8 square."""
    angle, scale, dx, dy = rng.uniform(-1.0, 1.0, 4)
    out = _warp(image, angle * math.pi / 12, 1.0 + 0.15 * scale, dx, dy)
    out = out + rng.normal(0.0, 0.05, out.shape)
    top, left = rng.integers(0, _SIZE - 8, 2)
    out[top : top + 8, left : left + 8] = 0.0  # random erasing
    return torch.from_numpy(((out - 0.2) / 0.3).astype(np.float32)).unsqueeze(0)


class AugmentedDigits(Dataset):
    """Digits images augmented on the fly: item ``i`` is ``(image (1, 32, 32) float, label int)``.

    Args:
        images: ``(N, 1, 8, 8)`` float tensor in [0, 1].
        labels: ``(N,)`` long tensor.
        seed: Seed of the augmentation (each item and epoch differ).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, seed: int = 0):
        self.images = images.squeeze(1).numpy().astype(np.float64)
        self.labels = labels
        self.seed = seed
        self.calls = 0

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        self.calls += 1
        rng = np.random.default_rng((self.seed, index, self.calls))
        return _augment(self.images[index], rng), self.labels[index]


class AugmentedDigitsDataModule(pl.LightningDataModule):
    """Augmented digits for training, the same resampling without augmentation for validation (80/20 split).

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
        plain = [_warp(image, 0.0, 1.0, 0.0, 0.0) for image in x[order[:n_val]].squeeze(1).double().numpy()]
        val_x = torch.from_numpy((np.stack(plain)[:, None] - 0.2) / 0.3).float()
        self.val_set = TensorDataset(val_x, y[order[:n_val]])
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
