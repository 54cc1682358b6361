"""How the user trains the project: ``python train.py fit --config config.yaml``."""

from lightning.pytorch.cli import LightningCLI
from model import Blobs, Classifier

if __name__ == "__main__":
    LightningCLI(Classifier, Blobs, subclass_mode_model=True, subclass_mode_data=True, save_config_callback=None)
