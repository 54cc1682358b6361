"""Lightning's own ``BoringModel`` (``lightning.pytorch.demos``) with a user's DataModule.

Model-zoo entry of ``benchmarks/zoo.py``. ``BoringModel`` is a ``Linear(32, 2)`` trained to output
ones (mean squared error) from random vectors with SGD at lr 0.1 and a ``StepLR`` that divides the lr
by 10 each epoch; its own ``train_dataloader`` gives a batch of 1. Its loss can reach 0, so here the
DataModule gives labels (a noisy linear function of the vectors, so the loss has a floor) with a
``batch_size`` argument whose default, 1, is the demo's; the subclass takes ``lr`` as an argument,
scores its own ``loss`` against those labels and logs ``val_loss``. The tiniest model in the zoo: a step is nearly all
framework overhead.

    autotune search benchmarks/zoo/demo_boring.py
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos import BoringModel
from torch.utils.data import DataLoader, TensorDataset


class RandomVectorsDataModule(pl.LightningDataModule):
    """Pairs ``(x, y)``: normal ``x`` ``(32,)`` with variance 1/32 per element (norm about 1) and
    ``y = x W + 1 + noise`` ``(2,)`` (noise standard deviation 0.1), generated once from ``seed``.

    The demo's own vectors are standard normal (squared norm about 32): SGD at lr 0.1 on batches of
    one then multiplies the error by about ``1 - 0.1 * 33`` per step and diverges (the loss reaches
    inf within a thousand steps); at norm 1 the factor is about 0.8.

    Args:
        batch_size: Vectors per batch (per device); 1 as in ``BoringModel.train_dataloader``.
        num_workers: DataLoader worker processes.
        length: Vectors per training epoch (a tenth as many validate).
        seed: Seed of the generator.
    """

    def __init__(self, batch_size: int = 1, num_workers: int = 0, length: int = 4096, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.length = length
        self.seed = seed

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(self.seed)
        w = torch.randn(32, 2, generator=g)

        def pairs(n: int) -> TensorDataset:
            x = torch.randn(n, 32, generator=g) / 32**0.5
            return TensorDataset(x, x @ w + 1 + 0.1 * torch.randn(n, 2, generator=g))

        self.train_set = pairs(self.length)
        self.val_set = pairs(max(1, self.length // 10))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class BoringRegression(BoringModel):
    """``BoringModel`` with an ``lr`` argument, labels from the data (its own ``loss``, MSE) and a
    logged ``val_loss``.

    Args:
        lr: SGD learning rate (the demo's 0.1); ``StepLR`` (step 1 epoch, gamma 0.1) as in the demo.
    """

    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.lr = lr

    def step(self, batch):
        x, y = batch
        return self.loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("val_loss", loss)
        return {"x": loss}

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]
