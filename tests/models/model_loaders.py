"""A LightningModule with its own dataloaders (no DataModule), ``learning_rate`` and a sibling import."""

import lightning.pytorch as pl
import torch
from tiny import TinyData  # sibling import: the model's folder is importable
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["TinyData"]


class SelfContained(pl.LightningModule):
    def __init__(self, batch_size: int = 16, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 1)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.hparams.batch_size)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


if __name__ == "__main__":
    raise SystemExit("the __main__ block must not run under autotune")
