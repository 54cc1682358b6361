"""A resumed study whose --config file was edited in place says that its snapshot is what it searches."""

from autotune.loader import read_user_config
from autotune.study.settings import config_changed_line

from .helpers import make_settings

CONFIG = "model:\n  hidden: 64\ndata:\n  batch_size: 32\n"


def _settings(path):
    return make_settings(config_file=str(path), user_config=read_user_config(path))


def test_unchanged_config_says_nothing(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    settings = _settings(path)
    path.write_text("# a comment only\n" + CONFIG.replace("hidden: 64", "hidden:   64"))  # same values
    assert config_changed_line(settings) is None


def test_edited_config_is_named_with_the_fix(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    settings = _settings(path)
    path.write_text(CONFIG.replace("hidden: 64", "hidden: 128"))
    line = config_changed_line(settings)
    assert line is not None and str(path) in line and "--study-name" in line


def test_gone_or_broken_config_keeps_the_snapshot_quietly(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    settings = _settings(path)
    path.write_text("model: [unclosed\n")
    assert config_changed_line(settings) is None
    path.unlink()
    assert config_changed_line(settings) is None
    assert config_changed_line(make_settings()) is None  # no --config at all


def test_a_resume_names_every_flag_that_differs_in_one_error(tmp_path):
    import pytest

    from autotune.errors import StudyMismatchError
    from autotune.study.settings import SearchOptions, _check_resume

    model = tmp_path / "model.py"
    settings = make_settings(model_file=str(model), samples=2048, devices=1)
    with pytest.raises(StudyMismatchError) as e:
        _check_resume(settings, SearchOptions(model_file=str(model), samples=4096, devices=2), model)
    message = str(e.value)
    assert "samples=2048, not 4096" in message and "devices=1, not 2" in message and "drop the flags" in message
    assert len(message.splitlines()) == 1
    _check_resume(settings, SearchOptions(model_file=str(model), samples=2048), model)  # the study's own values pass
    # the LightningCLI script is the study's too (its links shaped every trial): another one is refused
    scripted = make_settings(model_file=str(model), cli={"file": str(tmp_path / "train.py"), "name": "LightningCLI"})
    with pytest.raises(StudyMismatchError, match=r"cli_script='.*train.py', not '.*evaluate.py'"):
        _check_resume(scripted, SearchOptions(model_file=str(model), cli_script=str(tmp_path / "evaluate.py")), model)
    _check_resume(scripted, SearchOptions(model_file=str(model), cli_script=str(tmp_path / "train.py")), model)
