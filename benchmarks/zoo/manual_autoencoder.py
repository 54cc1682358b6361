"""Manual optimization: a digits autoencoder whose encoder and decoder have their own optimizers.

Model-zoo entry of ``benchmarks/zoo.py`` (no download). ``automatic_optimization = False``: the
``training_step`` runs ``manual_backward``, clips the gradients itself and steps both optimizers,
as GAN and meta-learning code does. Lightning accumulates no gradients for such a module, so
autotune leaves ``accumulate_grad_batches`` out of the search. The step returns its loss, which
Lightning passes on untouched, and ``val_loss`` (reconstruction MSE) is logged. Lightning counts
both optimizers' steps in ``trainer.global_step``, so ``max_steps=N`` trains N/2 batches here.

    autotune search benchmarks/zoo/manual_autoencoder.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class DigitsVectorsDataModule(pl.LightningDataModule):
    """Digits as ``(N, 64)`` float vectors in [0, 1], each a 1-tuple batch element; 80/20 split.

    Args:
        batch_size: Vectors per batch (per device).
        num_workers: DataLoader worker processes.
        seed: Seed of the split.
    """

    def __init__(self, batch_size: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        x = torch.tensor(load_digits().data, dtype=torch.float32) / 16.0
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = len(x) // 5
        self.val_set = TensorDataset(x[order[:n_val]])
        self.train_set = TensorDataset(x[order[n_val:]])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class ManualAutoencoder(pl.LightningModule):
    """MLP encoder ``64 -> hidden -> latent`` and decoder back to ``64`` (sigmoid), two Adam optimizers.

    Args:
        lr: Adam learning rate of both optimizers.
        hidden: Hidden width.
        latent: Code width.
        clip: Gradient-norm clip applied by hand to each part before its step.
    """

    def __init__(self, lr: float = 2e-3, hidden: int = 256, latent: int = 16, clip: float = 1.0):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.encoder = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstructions ``(batch, 64)`` in [0, 1] of ``x`` ``(batch, 64)``."""
        return torch.sigmoid(self.decoder(self.encoder(x)))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        enc_opt, dec_opt = self.optimizers()
        loss = F.mse_loss(self(x), x)
        enc_opt.zero_grad()
        dec_opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(enc_opt, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")
        self.clip_gradients(dec_opt, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")
        enc_opt.step()
        dec_opt.step()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_loss", F.mse_loss(self(x), x))

    def configure_optimizers(self):
        return (
            torch.optim.Adam(self.encoder.parameters(), lr=self.hparams.lr),
            torch.optim.Adam(self.decoder.parameters(), lr=self.hparams.lr),
        )
