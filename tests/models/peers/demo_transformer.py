"""Lightning's own demo transformer language model, unchanged.

Its ``train_dataloader()`` returns ``DataLoader(WikiText2())``: the batch size (1) is hard-coded, so
autotune rebuilds that DataLoader with each trial's ``batch_size`` and ``num_workers``; the learning
rate is hard-coded in ``configure_optimizers``, so ``lr`` is dropped.

``WikiText2`` reads ``./data/wikitext-2.txt`` (relative to the working directory) and downloads it
first, which needs ``requests`` and the network even when the file is there. Trials must not
download anything, so its downloader is replaced by a check that the local corpus exists.
"""

from pathlib import Path

from lightning.pytorch.demos.transformer import LightningTransformer, WikiText2

__all__ = ["LightningTransformer"]


def _local_corpus(destination: Path) -> None:
    if not Path(destination).is_file():
        raise FileNotFoundError(f"no corpus at {destination}: write a text file there (no download in trials)")


WikiText2.download = staticmethod(_local_corpus)
