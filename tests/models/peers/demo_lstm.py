"""Lightning's own demo LSTM language model, unchanged.

Its ``train_dataloader()`` returns a DataLoader with its own batch sampler
(``SequenceSampler(dataset, batch_size=20)``), which fixes the batch size: autotune drops
``batch_size`` from the space (and ``lr``, hard-coded in ``configure_optimizers``) and tunes the rest,
``num_workers`` through a rebuilt DataLoader that keeps the batch sampler.

``WikiText2`` reads ``./data/wikitext-2.txt`` (relative to the working directory); its downloader
is replaced by a check that the local corpus exists (trials must not download anything).
"""

from pathlib import Path

from lightning.pytorch.demos.lstm import LightningLSTM
from lightning.pytorch.demos.transformer import WikiText2

__all__ = ["LightningLSTM"]


def _local_corpus(destination: Path) -> None:
    if not Path(destination).is_file():
        raise FileNotFoundError(f"no corpus at {destination}: write a text file there (no download in trials)")


WikiText2.download = staticmethod(_local_corpus)
