"""Train the charlm example with LightningCLI: ``python examples/charlm/train.py fit --config FILE``."""

from lightning.pytorch.cli import LightningCLI
from model import CharTransformer, StdlibTextDataModule


def main() -> None:
    LightningCLI(CharTransformer, StdlibTextDataModule)


if __name__ == "__main__":
    main()
