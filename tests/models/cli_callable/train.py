"""How the user trains the project: ``python train.py fit --config config.yaml``."""

from lightning.pytorch.cli import LightningCLI
from model import Blobs, Net

if __name__ == "__main__":
    LightningCLI(Net, Blobs, save_config_callback=None)
