"""A small transformer character language model on the Python standard library's own source.

The text is read from the ``.py`` files of the running interpreter's standard library (always on
disk, no download), as bytes (a 256-symbol vocabulary):

    autotune search examples/charlm/model.py --trials 12
    python examples/charlm/train.py fit --config studies/charlm.best.yaml
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def stdlib_text(max_bytes: int) -> bytes:
    """The first ``max_bytes`` bytes of the standard library's top-level ``.py`` files, in name order."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for path in sorted(folder.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        size += len(data)
        if size >= max_bytes:
            break
    return b"".join(chunks)[:max_bytes]


class StdlibTextDataModule(pl.LightningDataModule):
    """Non-overlapping windows of ``block_size + 1`` bytes; the last 10% of windows validate.

    Args:
        batch_size: Windows per batch (per device).
        num_workers: DataLoader worker processes.
        block_size: Context length in bytes (tokens).
        max_bytes: Bytes of source text read (default 1 MiB).
    """

    def __init__(self, batch_size: int = 32, num_workers: int = 0, block_size: int = 64, max_bytes: int = 1 << 20):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.block_size = block_size
        self.max_bytes = max_bytes

    def setup(self, stage: str | None = None) -> None:
        data = torch.frombuffer(bytearray(stdlib_text(self.max_bytes)), dtype=torch.uint8).long()
        n = (len(data) - 1) // (self.block_size + 1)
        windows = data[: n * (self.block_size + 1)].view(n, self.block_size + 1)
        n_val = max(1, n // 10)
        self.train_set = TensorDataset(windows[:-n_val])
        self.val_set = TensorDataset(windows[-n_val:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)


class CharTransformer(pl.LightningModule):
    """Decoder-only transformer over bytes; logs ``val_loss`` (cross-entropy, nats per byte).

    Args:
        lr: AdamW learning rate.
        d_model: Width of the residual stream.
        n_layers: Transformer blocks.
        n_heads: Attention heads.
        block_size: Longest context, in bytes.
    """

    def __init__(self, lr: float = 3e-3, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, block_size: int = 64):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(256, d_model)
        self.position = nn.Parameter(torch.zeros(block_size, d_model))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, time, 256)`` for tokens ``(batch, time)``."""
        t = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        x = self.embed(tokens) + self.position[:t]
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))

    def _loss(self, batch) -> torch.Tensor:
        (window,) = batch
        logits = self(window[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1))

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
