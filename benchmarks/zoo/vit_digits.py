"""A small vision transformer on scikit-learn's bundled digits: 2x2 patches, a class token.

Model-zoo entry of ``benchmarks/zoo.py`` (no download). Each 8x8 digit becomes 16 patch tokens of
4 pixels plus a learned class token; pre-norm encoder blocks (``nn.TransformerEncoderLayer``);
AdamW with a linear warm-up (a ``LambdaLR`` stepped per optimizer step).

    autotune search benchmarks/zoo/vit_digits.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class DigitsPatchesDataModule(pl.LightningDataModule):
    """Digits as ``(N, 16, 4)`` float patch sequences in [0, 1] (row-major 2x2 patches), 80/20 split.

    Args:
        batch_size: Images per batch (per device).
        num_workers: DataLoader worker processes.
        seed: Seed of the split.
    """

    def __init__(self, batch_size: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
        patches = x.view(-1, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, 16, 4)
        y = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
        n_val = len(x) // 5
        self.val_set = TensorDataset(patches[order[:n_val]], y[order[:n_val]])
        self.train_set = TensorDataset(patches[order[n_val:]], y[order[n_val:]])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class DigitsViT(pl.LightningModule):
    """Patch embedding, class token, learned positions, encoder blocks, a linear head on the class token.

    Logs ``val_loss`` (cross-entropy) and ``val_acc``.

    Args:
        lr: AdamW peak learning rate.
        d_model: Width of the residual stream.
        n_layers: Encoder blocks.
        n_heads: Attention heads.
        warmup_steps: Optimizer steps of linear lr warm-up.
    """

    def __init__(self, lr: float = 1e-3, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, warmup_steps: int = 20):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Linear(4, d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position = nn.Parameter(0.02 * torch.randn(1, 17, d_model))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 10)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, 10)`` for patches ``(batch, 16, 4)``."""
        x = self.embed(patches)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.position
        return self.head(self.norm(self.blocks(x))[:, 0])

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
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        warmup = max(1, self.hparams.warmup_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
