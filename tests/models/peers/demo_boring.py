"""Lightning's own BoringModel and BoringDataModule, unchanged (``autotune search demo_boring.py --data BoringDataModule``).

Both build their DataLoaders with the default batch size of 1 and no arguments to change it, so
autotune rebuilds the training DataLoader with each trial's ``batch_size`` and ``num_workers``;
the module's learning rate is hard-coded in ``configure_optimizers``, so ``lr`` is dropped.
"""

from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

__all__ = ["BoringDataModule", "BoringModel"]
