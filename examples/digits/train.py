"""Train the digits example with LightningCLI: ``python examples/digits/train.py fit --config FILE``."""

from lightning.pytorch.cli import LightningCLI
from model import DigitsClassifier, DigitsDataModule


def main() -> None:
    LightningCLI(DigitsClassifier, DigitsDataModule)


if __name__ == "__main__":
    main()
