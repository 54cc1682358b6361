"""Lightning's own demo transformer (``lightning.pytorch.demos``), fed the standard library's source.

Model-zoo entry of ``benchmarks/zoo.py``. ``LightningTransformer`` trains on WikiText2, which it
downloads; here a user subclass keeps its model, ``training_step`` and SGD, and a DataModule gives
it the same kind of word-level windows cut from the ``.py`` files of the running interpreter's
standard library (always on disk). Like the demo, the module logs no metric: autotune judges the
loss ``training_step`` returns.

    autotune search benchmarks/zoo/demo_transformer.py
"""

from __future__ import annotations

import re
import sysconfig
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos import LightningTransformer, Transformer
from torch.utils.data import DataLoader, Dataset

_UNK = "<unk>"


def stdlib_words(max_words: int) -> list[str]:
    """The first ``max_words`` words (identifiers, numbers, single punctuation marks) of the
    standard library's top-level ``.py`` files, in name order."""
    words: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        words += re.findall(r"\w+|[^\w\s]", path.read_text(encoding="utf-8", errors="replace"))
        if len(words) >= max_words:
            break
    return words[:max_words]


class WordWindows(Dataset):
    """Item ``i``: ``(inputs, target)``, two ``(block_size,)`` long tensors, target shifted by one
    word, as the demo's ``WikiText2`` gives them.

    Args:
        ids: ``(n,)`` long tensor of word ids.
        block_size: Words per window.
    """

    def __init__(self, ids: torch.Tensor, block_size: int):
        self.ids = ids
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.ids) // self.block_size - 1

    def __getitem__(self, index: int):
        start = index * self.block_size
        return self.ids[start : start + self.block_size], self.ids[start + 1 : start + 1 + self.block_size]


class StdlibWordsDataModule(pl.LightningDataModule):
    """Word windows of the standard library's source, the ``vocab_size - 1`` commonest words kept
    (the rest map to ``<unk>``).

    Args:
        batch_size: Windows per batch (per device).
        num_workers: DataLoader worker processes.
        block_size: Words per window (35, as WikiText2 in the demo).
        vocab_size: Vocabulary size, ``<unk>`` included (must match the model's).
        max_words: Words of source read.
    """

    def __init__(self, batch_size: int = 16, num_workers: int = 0, block_size: int = 35, vocab_size: int = 2048, max_words: int = 400000):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.max_words = max_words

    def setup(self, stage: str | None = None) -> None:
        words = stdlib_words(self.max_words)
        vocab = [_UNK] + [w for w, _ in Counter(words).most_common(self.vocab_size - 1)]
        index = {w: i for i, w in enumerate(vocab)}
        ids = torch.tensor([index.get(w, 0) for w in words], dtype=torch.long)
        self.train_set = WordWindows(ids, self.block_size)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, persistent_workers=self.num_workers > 0
        )


class StdlibTransformer(LightningTransformer):
    """``lightning.pytorch.demos.LightningTransformer`` sized by arguments, with an ``lr`` argument and
    no WikiText2 download; its ``training_step`` (NLL of the next word) is the demo's own.

    The demo's ``Transformer`` (encoder-decoder, dropout 0.2) is built with a narrower default than
    the demo's 200 wide, 2+2 layers, so that a trial of 8,192 windows takes seconds on two CPU cores.

    Args:
        vocab_size: Vocabulary size (must match the data's).
        lr: SGD learning rate (the demo's 0.1).
        ninp: Embedding and model width (the demo's 200).
        nhead: Attention heads (the demo's 2).
        nhid: Feed-forward width (the demo's 200).
        nlayers: Encoder and decoder layers each (the demo's 2).
    """

    def __init__(self, vocab_size: int = 2048, lr: float = 0.1, ninp: int = 64, nhead: int = 2, nhid: int = 128, nlayers: int = 1):
        super().__init__(vocab_size=vocab_size)
        self.lr = lr
        self.model = Transformer(vocab_size=vocab_size, ninp=ninp, nhead=nhead, nhid=nhid, nlayers=nlayers)

    def prepare_data(self) -> None:
        """Nothing to download: the DataModule reads the standard library."""

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=self.lr)
