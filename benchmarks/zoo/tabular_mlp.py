"""A tabular MLP on scikit-learn's generated classification data (``make_classification``).

Model-zoo entry of ``benchmarks/zoo.py`` (generated data, no download): 40,000 rows of 64 features,
24 of them informative, 4 classes. A wide residual-free MLP with LayerNorm and dropout, Adam, and
a ``ReduceLROnPlateau`` on ``val_loss`` (epoch-level, not strict: a run without validation keeps its lr), as many tabular baselines are written.

    autotune search benchmarks/zoo/tabular_mlp.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import make_classification
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class TabularDataModule(pl.LightningDataModule):
    """Standardised ``(N, 64)`` float features and ``(N,)`` class ids in 0..3; the last 10% validate.

    Args:
        batch_size: Rows per batch (per device).
        num_workers: DataLoader worker processes.
        n_samples: Rows generated.
        seed: Seed of the generator.
    """

    def __init__(self, batch_size: int = 64, num_workers: int = 0, n_samples: int = 40000, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.n_samples = n_samples
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        x, y = make_classification(
            n_samples=self.n_samples, n_features=64, n_informative=24, n_redundant=8, n_classes=4, class_sep=0.8, random_state=self.seed
        )
        x = torch.tensor(x, dtype=torch.float32)
        x = (x - x.mean(0)) / x.std(0)
        y = torch.tensor(y, dtype=torch.long)
        n_val = self.n_samples // 10
        self.train_set = TensorDataset(x[n_val:], y[n_val:])
        self.val_set = TensorDataset(x[:n_val], y[:n_val])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=1024)


class TabularMLP(pl.LightningModule):
    """``depth`` blocks of Linear-LayerNorm-ReLU-Dropout and a linear head; logs ``val_loss`` and ``val_acc``.

    Args:
        lr: Adam learning rate.
        hidden: Width of each block.
        depth: Blocks (at least 1).
        dropout: Dropout probability, 0 <= p < 1.
    """

    def __init__(self, lr: float = 1e-3, hidden: int = 512, depth: int = 3, dropout: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        layers: list[nn.Module] = []
        width = 64
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        self.net = nn.Sequential(*layers, nn.Linear(width, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, 4)`` for features ``(batch, 64)``."""
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
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss", "strict": False}}
