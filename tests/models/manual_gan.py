"""A tiny GAN in Lightning's manual-optimization style, for tests: two optimizers, ``training_step``
returns nothing and logs ``g_loss``/``d_loss``, no validation (synthetic points on a ring)."""

import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class RingData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        angle = torch.rand(1024, generator=g) * 6.2832
        self.train_set = TensorDataset(torch.stack([angle.cos(), angle.sin()], 1))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)


class TinyGAN(pl.LightningModule):
    def __init__(self, lr: float = 2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.gen = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.disc = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        fake = self.gen(torch.randn(real.size(0), 4))
        d_real, d_fake = self.disc(real), self.disc(fake.detach())
        d_loss = F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real)) + F.binary_cross_entropy_with_logits(
            d_fake, torch.zeros_like(d_fake)
        )
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        g_out = self.disc(fake)
        g_loss = F.binary_cross_entropy_with_logits(g_out, torch.ones_like(g_out))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss})

    def configure_optimizers(self):
        return [torch.optim.Adam(self.gen.parameters(), lr=self.hparams.lr), torch.optim.Adam(self.disc.parameters(), lr=self.hparams.lr)]
