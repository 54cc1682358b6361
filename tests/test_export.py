import re

import pytest
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


def test_knobs_applied_to_the_rebuilt_dataloader_are_notes_when_changed():
    targets = {k: {"owner": "model", "how": "loader", "name": k} for k in ("batch_size", "num_workers")}
    info = {"class_names": {"model": "LightningTransformer", "data": None}}
    baseline = TrialConfig(batch_size=1, num_workers=0)
    doc, notes = lightning_cli_config(baseline.replace(batch_size=16), targets, None, has_datamodule=False, model_info=info, baseline=baseline)
    assert "model" not in doc and "batch_size" not in doc["trainer"]
    assert notes == [
        "batch_size: 16  # pass batch_size=16 to the DataLoader(...) that LightningTransformer.train_dataloader() returns "
        "(it is not a constructor argument; was 1)"
    ]  # num_workers is the baseline's: nothing to change


def test_an_export_reads_back_as_the_same_config_and_params():
    import optuna

    from autotune.config import TrialConfig
    from autotune.export import config_from_lightning_cli, lightning_cli_config
    from autotune.space import params_of, suggest_config

    targets = {"lr": {"owner": "model", "how": "init", "name": "learning_rate"},
               "batch_size": {"owner": "data", "how": "init", "name": "batch_size"},
               "num_workers": {"owner": "data", "how": "init", "name": "num_workers"}}
    baseline = TrialConfig(batch_size=32, lr=1e-3)
    resolved = {"batch_size": {"choices": [16, 32, 64]}, "precision": {"choices": ["32-true", "bf16-mixed"]},
                "accumulate_grad_batches": {"low": 1, "high": 4, "log": False}, "lr": {"low": 0.5, "high": 2.0, "log": True, "scaling": "linear"}}
    config = baseline.replace(batch_size=64, precision="bf16-mixed", accumulate_grad_batches=2, lr=1e-3 * 1.5 * 4)
    doc, _ = lightning_cli_config(config, targets)
    parsed = config_from_lightning_cli(yaml.safe_load(yaml.safe_dump(doc)), targets, baseline)
    assert parsed == config
    params = params_of(parsed, resolved, baseline)
    assert params == {"batch_size": 64, "precision": "bf16-mixed", "accumulate_grad_batches": 2, "lr_multiplier": pytest.approx(1.5)}
    study = optuna.create_study()
    study.enqueue_trial(params)
    assert suggest_config(study.ask(), resolved, baseline).lr == pytest.approx(config.lr)


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"data": {"batch_size": 48}}, "batch_size = 48 is not one of the space's choices [16, 32, 64]; add it to the space or change the file"),
        ({"trainer": {"accumulate_grad_batches": 9}}, "accumulate_grad_batches = 9 is outside the space's range 1..4; widen the space"),
        ({"data": {"num_workers": 3}}, "num_workers = 3, but the space does not search num_workers (every trial uses 0)"),
        (  # every value outside the space is named, in one line
            {"data": {"batch_size": 48, "num_workers": 3}, "trainer": {"accumulate_grad_batches": 9}},
            "seed.yaml: batch_size = 48 is not one of the space's choices [16, 32, 64] (add it to the space or change the file); "
            "accumulate_grad_batches = 9 is outside the space's range 1..4 (widen the space or change the file); "
            "num_workers = 3, but the space does not search num_workers (every trial uses 0) (add num_workers to the space or drop it from the file)",
        ),
        ({"data": {"batch_size": "big"}}, "batch_size must be an integer, got 'big'"),
        (["trainer"], "not a LightningCLI config"),
    ],
)
def test_enqueued_configs_outside_the_space_are_one_line_errors(doc, message):
    from autotune.config import TrialConfig
    from autotune.errors import UsageError
    from autotune.export import config_from_lightning_cli
    from autotune.space import params_of

    targets = {"batch_size": {"owner": "data", "how": "init", "name": "batch_size"},
               "num_workers": {"owner": "data", "how": "init", "name": "num_workers"}}
    baseline = TrialConfig(batch_size=32)
    resolved = {"batch_size": {"choices": [16, 32, 64]}, "accumulate_grad_batches": {"low": 1, "high": 4, "log": False}}
    with pytest.raises(UsageError, match=re.escape(message)):
        params_of(config_from_lightning_cli(doc, targets, baseline, source="seed.yaml"), resolved, baseline, source="seed.yaml")


def test_an_early_stopping_of_the_users_is_named_only_for_a_recommendation_of_other_math():
    from types import SimpleNamespace

    from autotune.export import early_stopping_line
    from autotune.study.publish import _early_stopping

    stopping = {"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "val_loss"}}
    line = early_stopping_line([stopping, "lightning.pytorch.callbacks.ModelCheckpoint"], changes_math=True)
    assert line.startswith("early stopping: your EarlyStopping decides when training ends, and this config changes the training math")
    assert early_stopping_line(stopping, changes_math=True) == line  # one entry, not a list
    assert early_stopping_line([stopping], changes_math=False) is None  # the same math stops where the baseline would
    assert early_stopping_line(["lightning.pytorch.callbacks.ModelCheckpoint"], changes_math=True) is None
    assert early_stopping_line(None, changes_math=True) is None
    settings = SimpleNamespace(baseline_config=TrialConfig(batch_size=32, lr=0.1).to_dict())
    user = {"trainer": {"callbacks": [stopping]}}
    assert _early_stopping(TrialConfig(batch_size=64, lr=0.1), settings, user) == line  # another effective batch
    assert _early_stopping(TrialConfig(batch_size=32, lr=0.1, num_workers=2), settings, user) is None


def test_the_users_training_length_is_carried_and_a_missing_one_is_said():
    from autotune.export import training_length_line

    config = TrialConfig(batch_size=32, lr=0.1)
    # a default of the user's LightningCLI goes under trainer:, the user's own --config value wins over it
    user = {"trainer": {"max_steps": 500}, "model": {}, "data": {}}
    doc, _ = lightning_cli_config(config, TARGETS, user, training_length={"max_epochs": 10, "max_steps": 300})
    assert doc["trainer"]["max_epochs"] == 10 and doc["trainer"]["max_steps"] == 500
    assert training_length_line({"max_epochs": 10, "max_steps": 300}, user["trainer"]) == (
        "training length: max_steps=500, max_epochs=10 (your LightningCLI's default), as in your own runs "
        "(the search's trials trained a fixed number of samples)"
    )
    # none set anywhere: nothing is invented, the header says what Lightning does and how to set it
    doc, _ = lightning_cli_config(config, TARGETS, None, training_length={})
    assert not {"max_epochs", "max_steps", "max_time"} & doc["trainer"].keys()
    line = training_length_line({}, {})
    assert line.startswith("training length: your --config and your LightningCLI's defaults set no max_epochs, max_steps or max_time")
    assert "default max_epochs=1000; set yours: add --trainer.max_epochs N to the run line below" in line
    # a study inspected before the training length was: only the --config is known
    assert training_length_line(None, {}).startswith("training length: your --config sets no max_epochs")
    assert training_length_line(None, {"max_epochs": 3}).startswith("training length: max_epochs=3, as in your own runs")


def test_the_export_header_names_the_training_length(tmp_path):
    from autotune.study.publish import export_study
    from autotune.study.settings import settings_of
    from tests.study.helpers import add, make_study

    cpu = {"accelerator": "cpu", "device_count": 1, "device_name": "cpu", "cpu_count": 2, "bf16_supported": False, "device_memory_gib": 8.0}
    for info, expected in (
        ({"training_length": {}}, "# training length: your --config and your LightningCLI's defaults set no max_epochs"),
        ({"training_length": {"max_epochs": 7}}, "# training length: max_epochs=7 (your LightningCLI's default)"),
    ):
        study = make_study(model_info=info, hardware=cpu)
        baseline = add(study, 100.0, baseline=True)
        trial = add(study, 150.0, batch_size=32)
        out = export_study(study, settings_of(study), trial, baseline, tmp_path / "best.yaml", "sqlite:///x.db")
        text = out.read_text()
        assert expected in text
        assert yaml.safe_load(text)["trainer"].get("max_epochs") == info["training_length"].get("max_epochs")


def test_max_steps_is_scaled_to_the_baseline_s_samples_at_the_recommended_effective_batch():
    """max_steps counts optimizer steps: the user's 1,000 at effective batch 32 are 32,000 samples,
    which effective batch 128 trains in 250 (max_epochs counts passes: only a samples ratio moves it)."""
    from autotune.export import scale_training_length

    trainer = {"max_steps": 1000, "max_epochs": 7, "max_time": "00:01:00:00"}
    assert scale_training_length(trainer, 32, 128) == {"max_steps": (1000, 250)}
    assert trainer == {"max_steps": 250, "max_epochs": 7, "max_time": "00:01:00:00"}
    trainer = {"max_steps": 1000, "max_epochs": 10}
    assert scale_training_length(trainer, 32, 96, ratio=1.7) == {"max_steps": (1000, 567), "max_epochs": (10, 17)}
    # no limit (-1, None), a bool, or the same effective batch without a ratio: nothing changes
    for trainer in ({"max_steps": -1, "max_epochs": None}, {"max_steps": True}, {"max_steps": 1000}):
        before = dict(trainer)
        assert scale_training_length(trainer, 32, 128 if "max_epochs" in trainer else 32) == {}
        assert trainer == before
    assert scale_training_length({"max_steps": 400}, 128, 32) == {"max_steps": (400, 1600)}  # a smaller batch needs more steps


def test_an_integer_val_check_interval_is_scaled_to_validate_every_as_many_samples():
    """helper-36: val_check_interval: 50 (training batches) kept at 4x the batch validated 3 times instead of 12."""
    from autotune.export import scale_val_check_interval

    trainer = {"val_check_interval": 50, "max_steps": 75}
    assert scale_val_check_interval(trainer, 32, 128) == (
        "validation: val_check_interval from 50 to 12 training batches (128 samples a batch, the baseline's 32): "
        "validation comes every ~1,600 samples, as in your runs"
    )
    assert trainer == {"val_check_interval": 12, "max_steps": 75}
    for unchanged, samples in (({"val_check_interval": 0.25}, 128), ({"val_check_interval": 50}, 32), ({}, 128), ({"val_check_interval": 1}, 40)):
        before = dict(unchanged)
        assert scale_val_check_interval(unchanged, 32, samples) is None and unchanged == before  # a fraction, the same batch, none, no change
    assert scale_val_check_interval({"val_check_interval": 1}, 32, 128) is None  # at least one batch: 1 stays 1


def test_the_export_header_says_when_it_scales_the_user_s_max_steps(tmp_path):
    from autotune.study.publish import export_study
    from autotune.study.settings import settings_of
    from tests.study.helpers import add, make_study

    cpu = {"accelerator": "cpu", "device_count": 1, "device_name": "cpu", "cpu_count": 2, "bf16_supported": False, "device_memory_gib": 8.0}
    study = make_study(model_info={"training_length": {"max_steps": 1000, "max_epochs": 7}}, hardware=cpu)
    baseline = add(study, 100.0, baseline=True)  # batch 16
    larger = add(study, 150.0, batch_size=64)
    split = add(study, 140.0, num_workers=1)  # the baseline's effective batch
    text = export_study(study, settings_of(study), larger, baseline, tmp_path / "a.yaml", "sqlite:///x.db").read_text()
    assert yaml.safe_load(text)["trainer"] == {**yaml.safe_load(text)["trainer"], "max_steps": 250, "max_epochs": 7}
    assert (
        "# training length: the export lowers max_steps from 1,000 to 250: at effective batch size 64 they train the 16,000 "
        "samples of the baseline's 1,000 steps at 16 (the rest of the length as in your own runs)"
    ) in text
    text = export_study(study, settings_of(study), split, baseline, tmp_path / "b.yaml", "sqlite:///x.db").read_text()
    assert yaml.safe_load(text)["trainer"]["max_steps"] == 1000
    assert "# training length: max_steps=1000 (your LightningCLI's default), max_epochs=7 (your LightningCLI's default), as in" in text


def test_a_scheduler_sized_to_the_training_length_follows_it_and_others_are_named():
    """A new user's manually stepped cosine with T_max 300 under max_steps 300: the export lowered max_steps
    to 150 and kept T_max, so the lr stopped halfway down its cosine. LightningCLI's own lr_scheduler under
    automatic optimization steps once an epoch: a smaller max_steps at a larger batch is the same epochs."""
    from autotune.export import scale_schedules

    def doc():
        return {
            "trainer": {"max_steps": 150},
            "lr_scheduler": {"class_path": "torch.optim.lr_scheduler.CosineAnnealingLR", "init_args": {"T_max": 300, "eta_min": 0}},
            "model": {"class_path": "m.Net", "init_args": {"hidden": 300, "sched": {"class_path": "torch.optim.lr_scheduler.StepLR",
                                                                                    "init_args": {"step_size": 100, "gamma": 0.5}}}},
            "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.002}},
        }

    manual = doc()
    lines = scale_schedules(manual, {"max_steps": (300, 150)}, manual=True)
    assert manual["lr_scheduler"]["init_args"] == {"T_max": 150, "eta_min": 0}
    assert manual["model"]["init_args"]["sched"]["init_args"] == {"step_size": 100, "gamma": 0.5}  # not sized to max_steps: named
    assert manual["model"]["init_args"]["hidden"] == 300  # not a scheduler's argument
    assert lines == [
        "lr schedule: lr_scheduler (CosineAnnealingLR): the export changes T_max from 300 to 150, as max_steps (equal to it: taken as "
        "sized to it)",
        "lr schedule: model.init_args.sched (StepLR): it keeps step_size 100: scale it by 0.5 if it counts optimizer steps "
        "(max_steps 300 -> 150)",
    ]
    automatic = doc()
    lines = scale_schedules(automatic, {"max_steps": (300, 150)})
    assert automatic["lr_scheduler"]["init_args"]["T_max"] == 300 and len(lines) == 1 and "(StepLR)" in lines[0]
    milestones = {"lr_scheduler": {"class_path": "torch.optim.lr_scheduler.MultiStepLR", "init_args": {"milestones": [5, 8]}}}
    (line,) = scale_schedules(milestones, {"max_steps": (300, 87), "max_epochs": (10, 12)})
    assert line == "lr schedule: lr_scheduler (MultiStepLR): it keeps milestones [5, 8]: scale it by 1.2 if it counts epochs (max_epochs 10 -> 12)"
    epochs = {"lr_scheduler": {"class_path": "torch.optim.lr_scheduler.CosineAnnealingLR", "init_args": {"T_max": 10}}}
    assert scale_schedules(epochs, {"max_epochs": (10, 17)}) and epochs["lr_scheduler"]["init_args"]["T_max"] == 17
    assert scale_schedules(doc(), {}) == [] and scale_schedules({"lr_scheduler": {"class_path": "x.ReduceLROnPlateau"}}, {"max_steps": (3, 1)}) == []


def test_a_schedule_length_the_model_takes_as_a_plain_argument_is_named_when_the_effective_batch_changes():
    """helper-31: a manually optimized module built CosineAnnealingLR(T_max=self.hparams.cosine_t_max) in code; the
    export moved batch 32 to 64 under max_epochs and kept cosine_t_max: 720 unsaid, so the cosine went halfway down."""
    from autotune.export import step_length_lines

    signature = {"model": {"cosine_t_max": {"type": "int", "default": 720}, "hidden": {"type": "int", "default": 128},
                           "lr": {"type": "float", "default": 0.001}},
                 "data": {"batch_size": {"type": "int", "default": 32}}}
    (line,) = step_length_lines({"model": {"hidden": 64}}, signature, 32, 64)  # at its default
    assert line == ("lr schedule: model.cosine_t_max=720: at effective batch size 64 (the baseline's 32) an epoch takes 0.5x the optimizer "
                    "steps; if it counts optimizer steps, scale it by 0.5 (the export keeps it; a schedule your code sizes from "
                    "trainer.estimated_stepping_batches follows by itself)")
    # the config's own value wins; class_path/init_args sections and several names alike
    doc = {"model": {"class_path": "m.Net", "init_args": {"cosine_t_max": 1000, "warmup_steps": 50, "sched": {"class_path": "x.StepLR"}}},
           "data": {"milestones": [30, 60], "num_workers": 2}}
    (line,) = step_length_lines(doc, signature, 64, 16)
    assert line.startswith("lr schedule: model.cosine_t_max=1000, model.warmup_steps=50, data.milestones=[30, 60]: at effective batch size "
                           "16 (the baseline's 64) an epoch takes 4x the optimizer steps; if they count optimizer steps, scale them by 4")
    assert step_length_lines(doc, signature, 32, 32) == []  # the baseline's effective batch: the same steps per epoch
    assert step_length_lines({"model": {"hidden": 300, "use_steps": True, "t_max": 0}}, {}, 32, 64) == []  # no count by that name


def test_the_export_scales_the_user_s_scheduler_with_max_steps_and_leaves_the_study_s_config_alone(tmp_path):
    from autotune.study.publish import export_study
    from autotune.study.settings import settings_of
    from tests.study.helpers import add, make_study

    cosine = {"class_path": "torch.optim.lr_scheduler.CosineAnnealingLR", "init_args": {"T_max": 1000}}
    user = {"trainer": {"max_steps": 1000}, "model": {}, "data": {}, "extra": {"lr_scheduler": cosine}, "document": {}}
    cpu = {"accelerator": "cpu", "device_count": 1, "device_name": "cpu", "cpu_count": 2, "bf16_supported": False, "device_memory_gib": 8.0}
    for manual in (True, False):
        info = {"training_length": {"max_steps": 1000}, "automatic_optimization": not manual}
        study = make_study(model_info=info, user_config=user, hardware=cpu)
        baseline = add(study, 100.0, baseline=True)  # batch 16
        larger = add(study, 150.0, batch_size=64)
        settings = settings_of(study)
        text = export_study(study, settings, larger, baseline, tmp_path / "a.yaml", "sqlite:///x.db").read_text()
        exported = yaml.safe_load(text)
        assert exported["trainer"]["max_steps"] == 250
        assert exported["lr_scheduler"]["init_args"]["T_max"] == (250 if manual else 1000)  # once an epoch: the same epochs
        assert ("# lr schedule: lr_scheduler (CosineAnnealingLR): the export changes T_max from 1,000 to 250, as max_steps" in text) is manual
        assert settings.user_config["extra"]["lr_scheduler"]["init_args"]["T_max"] == 1000  # a second export scales it again


def test_the_export_header_gives_the_loss_limit_the_recommended_config_was_held_to(tmp_path):
    """A config of the baseline's math is judged against the sanity check's wider limit (15% at the
    default 5%): its header says so, not "tolerance 5%" beside a loss 8% above the baseline's."""
    from autotune.study.publish import export_study
    from autotune.study.settings import settings_of
    from tests.study.helpers import add, make_study

    cpu = {"accelerator": "cpu", "device_count": 1, "device_name": "cpu", "cpu_count": 2, "bf16_supported": False, "device_memory_gib": 8.0}
    study = make_study(hardware=cpu)
    baseline = add(study, 100.0, loss=1.0, baseline=True)
    same_math = add(study, 150.0, loss=1.084, num_workers=1, attrs={"math": "preserving", "feasible": True, "constraint": -0.07})
    other_math = add(study, 160.0, loss=1.03, batch_size=64, lr=0.02, attrs={"math": "changing"})
    header = export_study(study, settings_of(study), same_math, baseline, tmp_path / "a.yaml", "sqlite:///x.db").read_text()
    assert "vs baseline 1 (limit +15%: the baseline's math, so only rounding and data order differ; 5% for other math)" in header
    assert "tolerance 5%" not in header
    header = export_study(study, settings_of(study), other_math, baseline, tmp_path / "b.yaml", "sqlite:///x.db").read_text()
    assert "vs baseline 1 (tolerance 5%)" in header
