"""An embedding-heavy model: neural collaborative filtering on generated user-item clicks.

Model-zoo entry of ``benchmarks/zoo.py``. The data is generated (no download): users and items
get random latent factors, and a click is drawn with probability ``sigmoid(u . v + b_i)``. The
model's two embedding tables hold most of its parameters (0.96 M of their 0.98 M at the defaults), and
Adam updates every row of them at every step, so a step costs about the same at any batch size.

    autotune search benchmarks/zoo/recsys.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class ClicksDataModule(pl.LightningDataModule):
    """Generated ``(user, item, click)`` triples: long, long, float in {0, 1}; the last 10% validate.

    Args:
        batch_size: Triples per batch (per device).
        num_workers: DataLoader worker processes.
        n_users: Users (rows of the user table).
        n_items: Items (rows of the item table).
        n_clicks: Triples generated.
        seed: Seed of the generator.
    """

    def __init__(
        self, batch_size: int = 64, num_workers: int = 0, n_users: int = 10000, n_items: int = 5000, n_clicks: int = 200000, seed: int = 0
    ):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.n_users = n_users
        self.n_items = n_items
        self.n_clicks = n_clicks
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(self.seed)
        users = torch.randn(self.n_users, 8, generator=g)
        items = torch.randn(self.n_items, 8, generator=g)
        bias = torch.randn(self.n_items, generator=g)
        u = torch.randint(0, self.n_users, (self.n_clicks,), generator=g)
        i = torch.randint(0, self.n_items, (self.n_clicks,), generator=g)
        p = torch.sigmoid((users[u] * items[i]).sum(1) / 2 + bias[i])
        clicks = torch.bernoulli(p, generator=g)
        n_val = self.n_clicks // 10
        self.train_set = TensorDataset(u[n_val:], i[n_val:], clicks[n_val:])
        self.val_set = TensorDataset(u[:n_val], i[:n_val], clicks[:n_val])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=4096)


class NeuralCF(pl.LightningModule):
    """User and item embeddings, concatenated, through an MLP to a click logit; logs ``val_loss`` (BCE).

    Args:
        lr: Adam learning rate.
        n_users: Rows of the user table (must match the data).
        n_items: Rows of the item table (must match the data).
        dim: Embedding width.
        hidden: Width of the MLP's hidden layer.
    """

    def __init__(self, lr: float = 1e-3, n_users: int = 10000, n_items: int = 5000, dim: int = 64, hidden: int = 128):
        super().__init__()
        self.save_hyperparameters()
        self.users = nn.Embedding(n_users, dim)
        self.items = nn.Embedding(n_items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Click logits ``(batch,)`` for user and item ids ``(batch,)``."""
        return self.mlp(torch.cat([self.users(users), self.items(items)], dim=1)).squeeze(1)

    def training_step(self, batch, batch_idx):
        users, items, clicks = batch
        loss = F.binary_cross_entropy_with_logits(self(users, items), clicks)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        users, items, clicks = batch
        self.log("val_loss", F.binary_cross_entropy_with_logits(self(users, items), clicks))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
