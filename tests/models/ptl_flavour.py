"""The same tiny task written against the standalone ``pytorch_lightning`` package."""

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class PtlData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, num_workers: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def train_dataloader(self):
        x = torch.randn(1024, 4, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size, num_workers=self.num_workers)


class PtlModel(pl.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
