"""A tiny regression model for tests, with faults injected per trial.

``TINY_FAULTS`` maps trial numbers to faults, e.g. ``"1:raise,2:nan,3:kill,4:hang,5:oom"``; the
trial number comes from ``AUTOTUNE_TRIAL_NUMBER``, which autotune sets in every trial process.
``stop`` sets ``trainer.should_stop`` at step 5 (a stop of the module's own, before the budget).
``TINY_EARLY_STOP=1`` makes ``configure_callbacks()`` return an ``EarlyStopping`` that stops at the first
validation (trials leave it out).
``fast_infeasible`` makes a trial skip ``TINY_SAMPLE_SLEEP`` (faster than the others) and log a
``val_loss`` 10 above its own (beyond any loss tolerance).
``TINY_IGNORE_BATCH=1`` makes the datamodule ignore its ``batch_size`` (always 16).
``TINY_SAMPLE_SLEEP=S`` makes every training step sleep ``S`` seconds per sample (longer trials).
``TINY_SLOW_BATCH=N`` makes every step of batch size ``N`` sleep 50 ms more (a slow config).
``TINY_SLOW_WORKERS=N`` makes every step sleep 20 ms more when the training DataLoader has ``N`` workers
(a slow config whose loss is the same as the others').
``TINY_MIB_PER_SAMPLE=M`` makes every step allocate and touch ``M`` MiB per sample (memory that grows
with the batch, for the memory model on a CPU).
``TINY_ITERABLE=N`` makes the training set an ``IterableDataset`` that yields only its first ``N``
samples per epoch (its length is unknown at inspection: a batch above ``N`` is only learned from a trial).
``TINY_OOM_ABOVE=N`` raises CUDA's out-of-memory error for any batch larger than ``N`` samples (a
memory limit, on a CPU).
``TINY_PRINT=1`` makes every training step print ``TINY-MARKER trial T step S`` (the user's own
``print``); the fault ``print_lots`` prints 256 KiB of filler lines (``filler N ...``) at step 0 first.
"""

import os
import signal
import time

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset


class _FirstSamples(IterableDataset):
    """The first ``n`` samples of a dataset, as an iterable dataset (no ``len``)."""

    def __init__(self, dataset, n: int):
        self.dataset, self.n = dataset, n

    def __iter__(self):
        return (self.dataset[i] for i in range(self.n))


def _fault() -> str:
    """This trial's fault; read at run time, since a warm process imports this file once for all trials."""
    faults = dict(item.split(":") for item in os.environ.get("TINY_FAULTS", "").split(",") if item)
    return faults.get(os.environ.get("AUTOTUNE_TRIAL_NUMBER", "0"), "")


class TinyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, num_workers: int = 0, shuffle: bool = True):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.shuffle = shuffle

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(4096, 8, generator=g)
        y = x @ torch.arange(8.0).unsqueeze(1) / 8
        self.train_set, self.val_set = TensorDataset(x[:3584], y[:3584]), TensorDataset(x[3584:], y[3584:])

    def train_dataloader(self):
        size = 16 if os.environ.get("TINY_IGNORE_BATCH") else self.batch_size
        if os.environ.get("TINY_ITERABLE"):
            return DataLoader(_FirstSamples(self.train_set, int(os.environ["TINY_ITERABLE"])), batch_size=size, num_workers=self.num_workers)
        return DataLoader(self.train_set, batch_size=size, shuffle=self.shuffle, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)


class TinyModel(pl.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 0):
        super().__init__()
        self.save_hyperparameters()
        # hidden > 0: a small MLP instead of the linear model (a searched constructor argument in tests)
        self.layer = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)) if hidden else torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        FAULT = _fault()
        if FAULT == "print_lots" and batch_idx == 0:
            for i in range(4096):  # 4096 lines of 64 bytes
                print(f"filler {i:06d} " + "." * 49)
        if os.environ.get("TINY_PRINT"):
            print(f"TINY-MARKER trial {os.environ.get('AUTOTUNE_TRIAL_NUMBER')} step {batch_idx}")
        if os.environ.get("TINY_SAMPLE_SLEEP") and FAULT != "fast_infeasible":
            time.sleep(float(os.environ["TINY_SAMPLE_SLEEP"]) * len(x))
        if FAULT == "raise" and batch_idx == 2:
            raise ValueError("boom from the user's training_step")
        if FAULT == "stop" and batch_idx == 5:
            self.trainer.should_stop = True
        if FAULT == "nan" and batch_idx == 3:
            loss = loss * float("nan")
        if FAULT == "kill" and batch_idx == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if FAULT == "hang" and batch_idx == 2:
            time.sleep(3600)
        if os.environ.get("TINY_MIB_PER_SAMPLE"):
            block = torch.ones(len(x), int(float(os.environ["TINY_MIB_PER_SAMPLE"]) * 2**18))  # 2**18 float32 = 1 MiB
            loss = loss + 0 * block.sum()
        if os.environ.get("TINY_SLOW_BATCH") and len(x) == int(os.environ["TINY_SLOW_BATCH"]):
            time.sleep(0.05)
        if os.environ.get("TINY_SLOW_WORKERS") and self.trainer.train_dataloader.num_workers == int(os.environ["TINY_SLOW_WORKERS"]):
            time.sleep(0.02)
        if os.environ.get("TINY_OOM_ABOVE") and len(x) > int(os.environ["TINY_OOM_ABOVE"]):
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (TINY_OOM_ABOVE={os.environ['TINY_OOM_ABOVE']}, batch {len(x)})")
        if FAULT == "oom" and batch_idx == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if FAULT == "oom_runtime" and batch_idx == 1:
            raise RuntimeError("CUDA error: out of memory")
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        worse = 10.0 if _fault() == "fast_infeasible" else 0.0
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y) + worse, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def configure_callbacks(self):
        if os.environ.get("TINY_EARLY_STOP"):
            return pl.callbacks.EarlyStopping(monitor="val_loss", stopping_threshold=1000.0)
        return []
