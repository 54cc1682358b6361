"""The user's training script: its LightningCLI subclass links the two batch sizes."""

from lightning.pytorch.cli import LightningCLI
from model import LinkedData, LinkedModel


class LinkedCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        parser.link_arguments("data.batch_size", "model.batch_size")
        parser.set_defaults({"trainer.gradient_clip_val": 0.25})


if __name__ == "__main__":
    LinkedCLI(LinkedModel, LinkedData, save_config_callback=None)
