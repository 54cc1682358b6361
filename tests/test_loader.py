import pytest
from conftest import EXAMPLES, MODELS

from autotune.config import TrialConfig
from autotune.errors import ModelFileError, UsageError
from autotune.loader import (
    build_objects,
    check_model_file,
    find_classes,
    load_user_module,
    locate_knobs,
    read_user_config,
)


def test_check_model_file_errors(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        check_model_file(tmp_path / "missing.py")
    (tmp_path / "model.txt").write_text("x = 1")
    with pytest.raises(ModelFileError, match=r"is not a Python file \(.py\)"):
        check_model_file(tmp_path / "model.txt")
    with pytest.raises(ModelFileError, match=r"syntax_error.py:3: syntax error"):
        check_model_file(MODELS / "syntax_error.py")


def test_discovery_and_choice():
    module = load_user_module(MODELS / "two_modules.py")
    with pytest.raises(ModelFileError, match=r"several LightningModule classes \['First', 'Second'\]; choose one with --model"):
        find_classes(module)
    assert find_classes(module, "Second")[0].__name__ == "Second"
    with pytest.raises(ModelFileError, match="no LightningModule named 'Third'"):
        find_classes(module, "Third")
    with pytest.raises(ModelFileError, match="defines no LightningModule"):
        find_classes(load_user_module(MODELS / "no_module.py"))


def test_module_with_own_loaders_sibling_import_and_learning_rate():
    module = load_user_module(MODELS / "model_loaders.py")  # its __main__ block would raise
    model_cls, data_cls = find_classes(module)
    assert model_cls.__name__ == "SelfContained" and data_cls is None  # the imported TinyData is not used
    targets = locate_knobs(model_cls, data_cls, model_cls(), None)
    assert targets["lr"].name == "learning_rate" and targets["batch_size"].owner == "model"
    model, _ = build_objects(model_cls, data_cls, read_user_config(None), targets, {"batch_size": 64, "lr": 0.5})
    assert model.hparams.batch_size == 64 and model.hparams.learning_rate == 0.5


def test_config_file_init_args_and_attribute_knobs(tmp_path):
    module = load_user_module(EXAMPLES / "digits" / "model.py")
    model_cls, data_cls = find_classes(module)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model:\n  class_path: model.DigitsClassifier\n  init_args:\n    channels: 8\ndata:\n  batch_size: 48\n")
    user = read_user_config(cfg)
    assert user["model"] == {"channels": 8} and user["data"] == {"batch_size": 48}
    targets = locate_knobs(model_cls, data_cls)
    model, dm = build_objects(model_cls, data_cls, user, targets, TrialConfig(batch_size=16, lr=0.01).to_dict())
    assert (dm.batch_size, model.hparams.lr, model.hparams.channels) == (16, 0.01, 8)
    with pytest.raises(UsageError, match=r"DigitsClassifier takes no argument\(s\) \['hidden'\]"):
        build_objects(model_cls, data_cls, {"model": {"hidden": 3}, "data": {}}, targets, {})
