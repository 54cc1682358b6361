import yaml

from autotune.config import TrialConfig
from autotune.export import lightning_cli_config, render_yaml

TARGETS = {
    "batch_size": {"owner": "data", "how": "init", "name": "batch_size"},
    "num_workers": {"owner": "data", "how": "attr", "name": "num_workers"},
    "lr": {"owner": "model", "how": "init", "name": "learning_rate"},
}


def test_lightning_cli_sections_and_names():
    config = TrialConfig(batch_size=64, precision="bf16-mixed", accumulate_grad_batches=2, num_workers=1, lr=0.003)
    user = {"trainer": {"gradient_clip_val": 1.0, "precision": "32-true"}, "model": {"hidden": 8}, "data": {}}
    doc, notes = lightning_cli_config(config, TARGETS, user)
    assert doc["trainer"] == {"gradient_clip_val": 1.0, "precision": "bf16-mixed", "accelerator": "cpu", "devices": 1, "strategy": "auto", "accumulate_grad_batches": 2}
    assert doc["model"] == {"hidden": 8, "learning_rate": 0.003}
    assert doc["data"] == {"batch_size": 64}
    assert notes == ["num_workers: 1  # set LightningDataModule.num_workers in your code (it is not a constructor argument)"]
    text = render_yaml(doc, ["autotune recommendation", "trial 3"], notes)
    assert text.startswith("# autotune recommendation\n# trial 3\n")
    assert yaml.safe_load(text) == doc
    assert "#   num_workers: 1" in text


def test_model_without_datamodule_exports_batch_size_under_model():
    config = TrialConfig(batch_size=32, lr=0.1)
    targets = {"batch_size": {"owner": "model", "how": "init", "name": "batch_size"}}
    doc, notes = lightning_cli_config(config, targets, None, has_datamodule=False)
    assert "data" not in doc and doc["model"] == {"batch_size": 32} and notes == []
