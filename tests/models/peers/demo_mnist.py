"""Lightning's own MNISTDataModule, unchanged, with a small classifier.

The data module takes ``batch_size`` and ``num_workers`` as constructor arguments, so every knob
applies as usual. Run with ``PL_USE_MOCKED_MNIST=1`` (no torchvision, no download): the data module
then reads ``training.pt``/``test.pt`` (``(images uint8 [N, 28, 28], labels int64 [N])``) from
``<data_dir>/MNIST/complete/``.
"""

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule

__all__ = ["MNISTClassifier", "MNISTDataModule"]


class MNISTClassifier(pl.LightningModule):
    """A linear classifier of 28x28 images into 10 classes."""

    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(28 * 28, 10)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x.flatten(1)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
