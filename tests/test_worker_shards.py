"""An IterableDataset that every DataLoader worker reads in full fails its trial (autotune.worker_shards)."""

import pytest
import torch
from conftest import load
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from autotune.measure import TrialFault
from autotune.worker_shards import DuplicateWorkers, same_batch


class Stream(IterableDataset):
    def __init__(self, shard: bool):
        self.shard = shard

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if self.shard and info is not None else (0, 1)
        for i in range(start, 64, step):
            yield torch.tensor([float(i)]), i % 2


def _check(loader, batches=2):
    shards = DuplicateWorkers()
    for i, batch in enumerate(loader):
        if i == batches:
            break
        shards.check(batch, loader)


def test_same_batch_compares_values_through_tuples_and_dicts():
    a = (torch.arange(4.0), {"y": torch.tensor([1, 0])}, "text")
    assert same_batch(a, (torch.arange(4.0), {"y": torch.tensor([1, 0])}, "text"))
    assert not same_batch(a, (torch.arange(4.0) + 1, {"y": torch.tensor([1, 0])}, "text"))
    assert not same_batch(torch.zeros(2), torch.zeros(3)) and not same_batch([1, 2], [1, 2, 3])


def test_only_a_stream_every_worker_reads_in_full_fails():
    with pytest.raises(TrialFault) as caught:
        _check(DataLoader(Stream(shard=False), batch_size=8, num_workers=2))
    assert caught.value.kind == "workers_duplicate_data" and "get_worker_info()" in str(caught.value)
    _check(DataLoader(Stream(shard=True), batch_size=8, num_workers=2))  # each worker its share
    _check(DataLoader(Stream(shard=False), batch_size=8, num_workers=0))  # one process reads it once
    _check(DataLoader(list(range(64)), batch_size=8, num_workers=2))  # a map-style dataset: the sampler splits it


MODEL = '''import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):  # no get_worker_info(): every worker yields all of it
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for _ in range(4096):
            x = torch.randn(4, generator=g)
            yield x, int(x.sum() > 0)


class Streamed(pl.LightningModule):
    def __init__(self, batch_size: int = 16, num_workers: int = 0, lr: float = 0.05):
        super().__init__()
        self.batch_size, self.num_workers, self.lr = batch_size, num_workers, lr
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(Stream(), batch_size=self.batch_size, num_workers=self.num_workers)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)
'''


def test_a_trial_whose_workers_each_read_the_whole_stream_fails_with_the_reason(tmp_path, cli):
    (tmp_path / "streamed.py").write_text(MODEL)
    (tmp_path / "space.yaml").write_text("num_workers: {choices: [0, 2]}\n")
    (tmp_path / "two.yaml").write_text("model:\n  num_workers: 2\n")
    cli("search", "streamed.py", "--space", "space.yaml", "--enqueue", "two.yaml", "--trials", 2, "--samples", 256,
        "--monitor", "train_loss", check_rc=0)
    trials = load(tmp_path / "studies" / "streamed.db", "streamed").trials
    assert trials[0].state.name == "COMPLETE"  # the baseline's one process reads the stream once
    assert trials[1].state.name == "FAIL" and trials[1].user_attrs["fail_kind"] == "workers_duplicate_data", trials[1].user_attrs
