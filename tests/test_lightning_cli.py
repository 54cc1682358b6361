"""Real Lightning projects, unchanged: every trial trains what the user's own LightningCLI would run.

Each test copies a small project of tests/models/ (a model file, its LightningCLI script and config)
to a temporary folder, searches it, and reads back from the trials' logged metrics what really ran.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MODELS, load

from autotune.lightning_cli import find_cli_class, set_dotted


def _project(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(MODELS / name, folder)
    return folder


def _complete(study):
    return [t for t in study.trials if t.state.name == "COMPLETE"]


def test_the_users_cli_class_is_found_without_running_any_script(tmp_path):
    linked = _project(tmp_path, "cli_linked")
    found = find_cli_class(linked / "model.py")
    assert (found.name, found.file, found.subcommands) == ("LinkedCLI", str(linked / "train.py"), True)
    plain = find_cli_class(_project(tmp_path, "cli_project") / "model.py")
    assert plain.name == "LightningCLI"  # train.py calls Lightning's own class: trials use it too
    (linked / "runs.py").write_text("from model import LinkedModel\nfrom lightning.pytorch.cli import LightningCLI\n"
                                    "class EagerCLI(LightningCLI):\n    pass\nEagerCLI(LinkedModel)\n")
    (linked / "train.py").unlink()
    assert find_cli_class(linked / "model.py") is None  # importing runs.py would train: passed over
    assert find_cli_class(MODELS / "tiny.py") is None


def test_several_cli_scripts_a_train_script_comes_first_and_cli_script_names_another(tmp_path):
    from autotune.errors import UsageError
    from autotune.lightning_cli import cli_scripts

    project = _project(tmp_path, "cli_project")
    (project / "evaluate.py").write_text(  # sorts before train.py, but a script named *train* is looked at first
        "from lightning.pytorch.cli import LightningCLI\nfrom model import Blobs, Classifier\n\n"
        "class EvalCLI(LightningCLI):\n    pass\n\nif __name__ == '__main__':\n    EvalCLI(Classifier, Blobs, run=False)\n"
    )
    (project / "a_train_helpers.py").write_text("from model import Classifier\n")  # imports the model, runs no CLI
    assert [(c.file, c.name) for c in cli_scripts(project / "model.py")] == [
        (str(project / "train.py"), "LightningCLI"), (str(project / "evaluate.py"), "EvalCLI")]
    # the script the user trains with, though evaluate.py subclasses (a new user's export ran the evaluation script)
    assert find_cli_class(project / "model.py").file == str(project / "train.py")
    (project / "model_cli.py").write_text(  # a subclass beside a plain call in no *train* script: the subclass
        "from lightning.pytorch.cli import LightningCLI\nimport model\n\nclass LinkCLI(LightningCLI):\n    pass\n")
    (project / "train.py").rename(project / "fit.py")
    assert [c.file for c in cli_scripts(project / "model.py")] == [str(project / p) for p in ("evaluate.py", "model_cli.py", "fit.py")]
    (project / "fit.py").rename(project / "train.py")
    chosen = find_cli_class(project / "model.py", project / "train.py")
    assert (chosen.file, chosen.name, chosen.subcommands) == (str(project / "train.py"), "LightningCLI", True)
    with pytest.raises(UsageError, match=r"--cli-script '.*nosuch.py' does not exist; name the Python script"):
        find_cli_class(project / "model.py", project / "nosuch.py")
    with pytest.raises(UsageError, match=r"a_train_helpers.py' neither subclasses LightningCLI nor calls LightningCLI"):
        find_cli_class(project / "model.py", project / "a_train_helpers.py")
    from autotune.lightning_cli import imports_model

    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "train.py").write_text((project / "train.py").read_text())  # imports the model.py of its own folder
    assert imports_model(project / "train.py", project / "model.py") and imports_model(project / "model.py", project / "model.py")
    assert not imports_model(elsewhere / "train.py", project / "model.py")


def test_a_bad_cli_script_exits_2_with_one_line_before_any_trial(tmp_path, cli):
    project = _project(tmp_path, "cli_project")
    r = cli("search", "model.py", "--cli-script", "nosuch.py", "--trials", 1, cwd=project)
    assert r.returncode == 2 and r.stderr == (
        "autotune: error: --cli-script 'nosuch.py' does not exist; name the Python script that runs your LightningCLI\n"), r.stderr
    assert "inspecting" not in r.stdout and not (project / "studies" / "cli_project.db").exists()
    r = cli("search", "model.py", "--cli-script", "model.py", "--config", "config.yaml", "--trials", 1, cwd=project)
    assert r.returncode == 2 and "'model.py' neither subclasses LightningCLI nor calls LightningCLI(...)" in r.stderr, r.stderr


def test_a_misspelled_top_level_key_is_named_with_the_key_it_was_meant_to_be(tmp_path, cli):
    """A user's own CLI may add top-level keys, so its config is handed to it unchecked; LightningCLI then
    refuses one of the key's nested options (a new user's 'lr_schedulr.init_args.monitor'): the line
    names the key and what it was meant to be."""
    bad = "lr_schedulr:\n  class_path: torch.optim.lr_scheduler.StepLR\n  init_args:\n    step_size: 1\n"
    linked = _project(tmp_path, "cli_linked")
    (linked / "bad.yaml").write_text(bad)
    r = cli("search", "model.py", "--config", "bad.yaml", "--trials", 1, "--samples", 256, cwd=linked)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ("'lr_schedulr' is not a top-level key of a LightningCLI config (did you mean 'lr_scheduler'?); "
            f"fix --config {linked / 'bad.yaml'} (or the model's constructor arguments)" in r.stderr), r.stderr
    # a model file with no CLI script: its config's top-level keys are checked before the inspection
    (tmp_path / "bad.yaml").write_text(bad.replace("lr_schedulr", "optimzer"))
    r = cli("search", MODELS / "tiny.py", "--config", "bad.yaml", "--trials", 1, cwd=tmp_path)
    assert r.returncode == 2 and "unknown top-level key(s) ['optimzer'] (did you mean 'optimizer'?)" in r.stderr, r.stderr
    assert "inspecting" not in r.stdout


def test_set_dotted_writes_where_lightning_cli_reads():
    doc = {"model": {"class_path": "m.Net", "init_args": {"depth": 2}}, "data": {"batch_size": 8}, "optimizer": {"class_path": "torch.optim.Adam"}}
    set_dotted(doc, "model.depth", 3)
    set_dotted(doc, "data.batch_size", 64)
    set_dotted(doc, "optimizer.lr", 0.01)
    set_dotted(doc, "trainer.precision", "bf16-mixed")
    assert doc == {
        "model": {"class_path": "m.Net", "init_args": {"depth": 3}},
        "data": {"batch_size": 64},
        "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.01}},
        "trainer": {"precision": "bf16-mixed"},
    }


@pytest.mark.slow
def test_a_cli_project_trains_its_config_in_every_trial_and_the_export_builds_the_same(tmp_path, cli):
    project = _project(tmp_path, "cli_project")
    marks = tmp_path / "marks"
    marks.mkdir()
    (project / "space.yaml").write_text("batch_size: [16, 32]\nlr: {low: 0.5, high: 2.0, log: true, relative: true}\n")
    # a second script on the model: train.py, named for training, is still the run line's, and the output says how to pick
    (project / "predict.py").write_text("from lightning.pytorch.cli import LightningCLI\nfrom model import Blobs, Classifier\n\n"
                                        "if __name__ == '__main__':\n    LightningCLI(Classifier, Blobs, run=False)\n")
    r = cli("search", "model.py", "--config", "config.yaml", "--space", "space.yaml", "--trials", 3, "--samples", 1024,
            cwd=project, env={"CLI_PROJECT_MARKS": str(marks)}, check_rc=0)
    assert "the export's run line uses train.py; predict.py also run(s) a LightningCLI on this model: --cli-script" in r.stdout
    study = load(project / "studies" / "cli_project.db", "cli_project")
    trials = _complete(study)
    assert len(trials) == 3, [(t.number, t.user_attrs.get("fail_reason")) for t in study.trials]
    for t in trials:
        ran, config = t.user_attrs["metrics"], t.user_attrs["config"]
        assert ran["ran_adam"] == 1.0 and ran["ran_scheduler"] == 1.0  # the config's optimizer: and lr_scheduler:
        assert ran["ran_initial_lr"] == pytest.approx(config["lr"], rel=1e-6)  # lr tunes optimizer.init_args.lr
        assert ran["ran_encoder_hidden"] == 24.0  # the nested class_path object, as configured
        assert ran["ran_gradient_clip_val"] == 0.5  # the user's trainer settings are kept
    assert len(list(marks.iterdir())) >= 1  # the user's own callback ran (ModelCheckpoint was left out)
    assert study.user_attrs["autotune"]["targets"]["lr"]["owner"] == "optimizer"

    export = project / "studies" / "cli_project.best.yaml"
    text = export.read_text()
    assert "# run: python train.py fit --config" in text
    doc = yaml.safe_load(text)
    assert doc["model"]["class_path"] == "model.Classifier" and doc["model"]["init_args"]["encoder"]["init_args"]["hidden"] == 24
    assert doc["trainer"]["gradient_clip_val"] == 0.5 and doc["lr_scheduler"]["class_path"] == "torch.optim.lr_scheduler.StepLR"
    assert doc["trainer"]["max_epochs"] == 100 and "# training length: max_epochs=100, as in your own runs" in text  # the config's
    recommended = next(t for t in trials if t.number == _recommended_number(study))
    # the export, loaded back through the user's LightningCLI, builds the trial's optimizer, lr, batch size, precision
    code = (
        "import json, sys\nfrom lightning.pytorch.cli import LightningCLI\nfrom model import Blobs, Classifier\n"
        "cli = LightningCLI(Classifier, Blobs, subclass_mode_model=True, subclass_mode_data=True, run=False, "
        "save_config_callback=None, args=['--config', sys.argv[1]])\n"
        "opt = cli.model.configure_optimizers()[0][0]\n"
        "print(json.dumps({'optimizer': type(opt).__name__, 'lr': opt.param_groups[0]['lr'], "
        "'batch_size': cli.datamodule.batch_size, 'precision': str(cli.trainer.precision), "
        "'max_epochs': cli.trainer.max_epochs}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(export)], cwd=project, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    built = json.loads(out.stdout.strip().splitlines()[-1])
    config = recommended.user_attrs["config"]
    assert built == {"optimizer": "Adam", "lr": pytest.approx(config["lr"]), "batch_size": config["batch_size"],
                     "precision": config["precision"], "max_epochs": 100}


def test_an_optimizer_callable_of_the_module_gets_the_trials_lr_and_the_export_keeps_its_class(tmp_path, cli):
    # Lightning's dependency-injection style: Net(optimizer: OptimizerCallable), picked under model: in the config
    project = _project(tmp_path, "cli_callable")
    (project / "space.yaml").write_text("batch_size: [32, 64]\nlr: {low: 0.5, high: 2.0, log: true, relative: true}\n")
    r = cli("search", "model.py", "--config", "config.yaml", "--space", "space.yaml", "--trials", 3, "--samples", 1024,
            "--confirm", 0, cwd=project, check_rc=0)
    assert "dropped 'lr'" not in r.stdout + r.stderr
    study = load(project / "studies" / "cli_callable.db", "cli_callable")
    autotune = study.user_attrs["autotune"]
    assert autotune["targets"]["lr"] == {"knob": "lr", "owner": "model", "how": "init", "name": "optimizer.lr"}
    trials = _complete(study)
    assert trials[0].user_attrs["config"]["lr"] == pytest.approx(0.003)  # the baseline: the config's, not torch's default
    assert len(trials) == 3 and len({t.user_attrs["config"]["lr"] for t in trials}) > 1
    for t in trials:
        ran, config = t.user_attrs["metrics"], t.user_attrs["config"]
        assert ran["ran_adamw"] == 1.0 and ran["ran_weight_decay"] == pytest.approx(0.05)  # the config's class and arguments
        assert ran["ran_initial_lr"] == pytest.approx(config["lr"], rel=1e-6)  # lr tunes model.optimizer.init_args.lr
    doc = yaml.safe_load((project / "studies" / "cli_callable.best.yaml").read_text())
    optimizer = doc["model"]["optimizer"]
    recommended = next(t for t in trials if t.number == _recommended_number(study))
    assert optimizer["class_path"] == "torch.optim.AdamW" and optimizer["init_args"]["weight_decay"] == 0.05
    assert optimizer["init_args"]["lr"] == pytest.approx(recommended.user_attrs["config"]["lr"])


def test_a_module_with_two_optimizer_callables_has_its_lr_dropped_with_the_reason(tmp_path, monkeypatch):
    from autotune.inspection import inspect_model

    project = _project(tmp_path, "cli_callable")
    model = project / "model.py"
    model.write_text(model.read_text().replace("        hidden: int = 32,\n",
                                               "        hidden: int = 32,\n        critic: OptimizerCallable = torch.optim.SGD,\n"))
    for name in ("model", "train"):
        monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.delitem(sys.modules, name)
    report = inspect_model({"model_file": str(model), "config_file": str(project / "config.yaml")})
    assert "lr" not in report["targets"]
    assert report["model_info"]["unreachable"]["lr"] == "the model takes 2 optimizers (critic, optimizer): autotune sets one lr, not several"


def _recommended_number(study):
    from autotune.study import recommendation
    from autotune.study.settings import settings_of

    recommended, _ = recommendation(study, settings_of(study))
    return recommended.number


@pytest.mark.slow
def test_a_linked_batch_size_reaches_every_linked_target(tmp_path, cli):
    project = _project(tmp_path, "cli_linked")
    (project / "space.yaml").write_text("batch_size: [32, 128]\n")
    r = cli("search", "model.py", "--space", "space.yaml", "--sampler", "grid", "--trials", 2, "--samples", 1024,
            cwd=project, check_rc=0)
    assert "trials parse the config with LinkedCLI from train.py" in r.stdout + r.stderr
    trials = _complete(load(project / "studies" / "cli_linked.db", "cli_linked"))
    assert sorted(t.user_attrs["config"]["batch_size"] for t in trials) == [32, 128]
    for t in trials:  # the module's batch size (and so its lr) follows the loader's, as LightningCLI links them
        batch = float(t.user_attrs["config"]["batch_size"])
        assert t.user_attrs["metrics"]["ran_loader_batch"] == batch and t.user_attrs["metrics"]["ran_module_batch"] == batch
        assert t.user_attrs["metrics"]["ran_gradient_clip_val"] == 0.25  # a default of the user's CLI (set_defaults)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["onecycle", "plateau"])
def test_schedulers_written_as_lightnings_docs_write_them_train(tmp_path, cli, scheduler):
    config = tmp_path / "config.yaml"
    config.write_text(f"model:\n  scheduler: {scheduler}\n")
    # 512 training samples, 2048 per trial: four epochs, validated at each epoch's end
    cli("search", MODELS / "schedulers.py", "--config", config, "--trials", 2, "--samples", 2048, "--storage",
        f"sqlite:///{tmp_path / 's.db'}", check_rc=0)
    trials = _complete(load(tmp_path / "s.db", "schedulers"))
    assert trials and trials[0].user_attrs["baseline"]
    baseline = trials[0]
    assert baseline.user_attrs["metrics"]["ran_validations"] >= 4.0


@pytest.mark.slow
def test_the_users_ddp_options_are_kept(tmp_path, cli):
    project = _project(tmp_path, "ddp_unused")
    cli("search", "model.py", "--config", "config.yaml", "--devices", 2, "--trials", 1, "--samples", 512, cwd=project, check_rc=0)
    trial = load(project / "studies" / "ddp_unused.db", "ddp_unused").trials[0]
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("fail_reason")
    assert yaml.safe_load((project / "studies" / "ddp_unused.best.yaml").read_text())["trainer"]["strategy"] == "ddp_find_unused_parameters_true"


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # pytest's own argv, in this process
def test_inspection_finds_the_training_length_of_the_config_and_of_the_cli_defaults(tmp_path, monkeypatch):
    from autotune.inspection import inspect_model, training_length

    def inspect(**spec):
        for name in ("model", "train"):  # both projects have a model.py (and the linked one a train.py): none is left behind
            monkeypatch.setitem(sys.modules, name, None)
            monkeypatch.delitem(sys.modules, name)
        return inspect_model(spec)["model_info"]["training_length"]

    project = _project(tmp_path, "cli_project")
    assert inspect(model_file=str(project / "model.py"), config_file=str(project / "config.yaml")) == {"max_epochs": 100}
    linked = _project(tmp_path, "cli_linked")
    train = linked / "train.py"
    train.write_text(train.read_text().replace('{"trainer.gradient_clip_val": 0.25}',
                                               '{"trainer.gradient_clip_val": 0.25, "trainer.max_time": "00:00:10:00"}'))
    assert inspect(model_file=str(linked / "model.py")) == {"max_time": "00:00:10:00"}  # a default of the user's CLI
    assert training_length({"max_epochs": None, "max_steps": -1, "max_time": None, "gradient_clip_val": 1.0}) == {}  # Lightning's own


@pytest.mark.parametrize("old, new, reason", [
    ("class_path: model.Classifier", "class_path: model.Classifierr", "module 'model' has no attribute 'Classifierr'"),
    ("    dropout: 0.1", "    dropuot: 0.1", "dropuot"),
], ids=["class-name-typo", "init-args-key-typo"])
def test_a_typo_inside_class_path_init_args_names_the_class_and_the_reason(tmp_path, cli, old, new, reason):
    """A new user's report: jsonargparse's first lines ("Does not validate against any of the Union
    subtypes") hid which class or key was wrong; the line now carries the union's own reason."""
    project = _project(tmp_path, "cli_project")
    config = (project / "config.yaml").read_text()
    assert old in config
    (project / "bad.yaml").write_text(config.replace(old, new, 1))
    r = cli("search", "model.py", "--config", "bad.yaml", "--trials", 1, "--samples", 256, cwd=project)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Problem with given class_path 'model.Classifier" in line and reason in line, line


def test_a_mistyped_argument_or_class_in_the_config_gets_a_did_you_mean_and_a_space_file_is_named(tmp_path, monkeypatch):
    """helper-31: `hiden:`, `max_epoch:` and `EarlyStoping` were refused with no guess, where a mistyped
    top-level key got one; a search space given as --config read as 'not a top-level key'."""
    from lightning.pytorch.cli import LightningCLI

    from autotune.errors import UsageError
    from autotune.lightning_cli import build
    from autotune.loader import read_user_config

    project = _project(tmp_path, "cli_project")
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.delitem(sys.modules, "model", raising=False)  # another test's model.py, imported in this process
    from model import Blobs, Classifier

    config = (project / "config.yaml").read_text()
    for old, new, hint in [
        ("    batch_size: 32", "    batch_sise: 32", "Option 'batch_sise' is not accepted (did you mean 'batch_size'?)"),  # init_args
        ("  max_epochs: 100", "  max_epoch: 100", "Group 'trainer' does not accept option 'max_epoch' (did you mean 'max_epochs'?)"),
        ("callbacks.ModelCheckpoint", "callbacks.ModelCheckpiont", "has no attribute 'ModelCheckpiont' (did you mean 'ModelCheckpoint'?)"),
        ("class_path: torch.optim.Adam\n", "class_path: torch.optim.RMSProp\n", "has no attribute 'RMSProp' (did you mean 'RMSprop'?)"),
    ]:
        assert old in config, old
        (project / "bad.yaml").write_text(config.replace(old, new, 1))
        with pytest.raises(UsageError) as refused:
            build(LightningCLI, Classifier, Blobs, read_user_config(project / "bad.yaml")["document"], {}, 0, tmp_path, "bad.yaml")
        assert hint in str(refused.value) and str(refused.value).endswith("; fix --config bad.yaml (or the model's constructor arguments)")
    (project / "bad.yaml").write_text(config.replace("  max_epochs: 100", "  zzzzzz: 100", 1))
    with pytest.raises(UsageError, match=r"does not accept option 'zzzzzz'; fix --config"):  # nothing alike: no guess
        build(LightningCLI, Classifier, Blobs, read_user_config(project / "bad.yaml")["document"], {}, 0, tmp_path, "bad.yaml")
    (project / "space.yaml").write_text("batch_size: {choices: [16, 32]}\nlr: {low: 0.001, high: 0.1, log: true}\n")
    with pytest.raises(UsageError, match=r"^--config .*space.yaml looks like a search space .*: pass it with --space$"):
        read_user_config(project / "space.yaml")


def test_a_bad_trainer_value_names_the_value_and_the_accepted_ones(tmp_path, cli):
    """A new user's ``precision: 32-ture`` was refused as "Does not validate against any of the Union
    subtypes", naming neither the value nor what is accepted."""
    project = _project(tmp_path, "cli_project")
    config = (project / "config.yaml").read_text()
    (project / "bad.yaml").write_text(config.replace("trainer:\n", "trainer:\n  precision: 32-ture\n", 1))
    r = cli("search", "model.py", "--config", "bad.yaml", "--trials", 1, "--samples", 256, cwd=project)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and 'Parser key "trainer.precision"' in line, line
    assert "(given '32-ture'; accepted: " in line and "bf16-mixed, 32-true" in line, line


def test_the_export_run_line_warns_when_the_script_hands_its_cli_another_model_class(tmp_path):
    from autotune.study.publish import run_hint

    linked = _project(tmp_path, "cli_linked")
    found = find_cli_class(linked / "model.py")
    assert found.model == "LinkedModel"
    cli, out = found.to_dict(), tmp_path / "best.yaml"
    assert "warning" not in run_hint(cli, out, "LinkedModel")
    line = run_hint(cli, out, "OtherModel")
    assert line.startswith("python ") and f"train.py fit --config {out} (warning: train.py hands" in line
    assert "hands LinkedCLI the class LinkedModel, not the searched OtherModel" in line
    # a script in subclass mode lets the config pick the class: nothing to warn about
    assert find_cli_class(_project(tmp_path, "cli_project") / "model.py").model is None


def test_the_run_line_of_a_plain_model_file_imports_its_classes_by_the_file_s_name(tmp_path, monkeypatch):
    from autotune.study.publish import run_hint

    monkeypatch.chdir(tmp_path)
    out = Path("studies/m.best.yaml")
    line = run_hint(None, out, "Net", None, str(tmp_path / "model.py"))  # no DataModule: the module alone
    assert line == ('python -c "from lightning.pytorch.cli import LightningCLI; from model import Net; LightningCLI(Net)" '
                    "fit --config studies/m.best.yaml")
    assert run_hint(None, out, "Net", "Data", "/elsewhere/m.py").startswith("PYTHONPATH=/elsewhere python -c ")  # not below here
    # a file Python cannot import by name: the placeholder
    assert run_hint(None, out, "Net", None, str(tmp_path / "my-model.py")).startswith("python YOUR_LIGHTNING_CLI_SCRIPT.py fit")
    assert run_hint(None, out, "Net", None, str(tmp_path / "class.py")).startswith("python YOUR_LIGHTNING_CLI_SCRIPT.py fit")


def test_a_link_target_in_the_space_is_refused_before_any_trial_naming_its_source(tmp_path, cli):
    """A new user's report: ``model.batch_size`` (set by the CLI's link from ``data.batch_size``) was
    accepted, then the baseline failed with LightningCLI's "must be given via" and "fix --config"."""
    linked = _project(tmp_path, "cli_linked")
    (linked / "space.yaml").write_text("model.batch_size: [16, 64]\n")
    r = cli("search", "model.py", "--space", "space.yaml", "--trials", 1, "--samples", 256, cwd=linked)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "model.batch_size is set by your LightningCLI's link_arguments from data.batch_size" in line, line
    assert "search batch_size:" in line and "created study" not in r.stdout
    assert not (linked / "studies").exists()  # refused before a study was created


def test_the_config_lightning_cli_saves_for_a_fit_run_is_accepted_as_is(tmp_path, monkeypatch):
    # LightningCLI's fit subcommand writes Trainer.fit's own arguments into the config it saves
    # (ckpt_path: null, weights_only: null); a user passes that file to --config unchanged
    from lightning.pytorch.cli import LightningCLI

    from autotune.lightning_cli import build
    from autotune.loader import read_user_config

    project = _project(tmp_path, "cli_project")
    printed = subprocess.run([sys.executable, "train.py", "fit", "--config", "config.yaml", "--print_config"],
                             cwd=project, capture_output=True, text=True, timeout=300)
    assert printed.returncode == 0, printed.stderr[-2000:]
    saved = project / "saved.yaml"
    saved.write_text(printed.stdout)
    assert "ckpt_path" in yaml.safe_load(printed.stdout)  # what makes the file a fit config, not a plain one
    user = read_user_config(saved)
    assert "ckpt_path" in user["extra"]  # kept for the export, which `train.py fit` reads
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.delitem(sys.modules, "model", raising=False)  # another test's model.py, imported in this process
    from model import Blobs, Classifier

    built = build(LightningCLI, Classifier, Blobs, user["document"], {"data.batch_size": 16}, 0, tmp_path)
    assert built.datamodule.batch_size == 16 and built.config["model"]["init_args"]["encoder"]["init_args"]["hidden"] == 24


_SPLIT_MODEL = '''import lightning.pytorch as pl
import torch
from torch.nn import functional as F


class Net(pl.LightningModule):
    def __init__(self, num_features: int = 0, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(num_features, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        self.log("ran_num_features", float(self.hparams.num_features))
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
'''

_SPLIT_DATA = '''import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Features(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0, width: int = 8):
        super().__init__()
        self.batch_size, self.num_workers, self.num_features = batch_size, num_workers, width

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(512, self.num_features, generator=g)
        y = (x.sum(1) > 0).long()
        self.train_set, self.val_set = TensorDataset(x[:384], y[:384]), TensorDataset(x[384:], y[384:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=128)


class Other(Features):
    pass
'''

_SPLIT_MAIN = '''from lightning.pytorch.cli import LightningCLI

from data import Features, Other
from model import Net


class SplitCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        parser.link_arguments("data.num_features", "model.num_features", apply_on="instantiate")


if __name__ == "__main__":
    SplitCLI(Net, Features)
'''


def test_a_datamodule_in_another_file_is_taken_from_the_cli_script_that_imports_it(tmp_path, cli):
    # helper-34: model.py holds the module, data.py the DataModule, main.py the CLI with a link; the
    # config's data: section was refused against Lightning's base LightningDataModule
    project = tmp_path / "split"
    project.mkdir()
    (project / "model.py").write_text(_SPLIT_MODEL)
    (project / "data.py").write_text(_SPLIT_DATA)
    (project / "main.py").write_text(_SPLIT_MAIN)
    (project / "config.yaml").write_text("trainer:\n  max_epochs: 2\ndata:\n  width: 6\n")
    probe = (
        "import sys; from autotune.lightning_cli import load_spec; spec = {'model_file': 'model.py', 'config_file': 'config.yaml'}\n"
        "if len(sys.argv) > 1: spec['data_class'] = sys.argv[1]\n"
        "try:\n    m, d, _, cli = load_spec(spec); print(m.__name__, d.__name__, cli['name'])\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    ran = [subprocess.run([sys.executable, "-c", probe, *args], cwd=project, capture_output=True, text=True, timeout=300)
           for args in ([], ["Other"], ["Others"])]
    assert [r.stdout.strip() for r in ran[:2]] == ["Net Features SplitCLI", "Net Other SplitCLI"], [r.stderr[-2000:] for r in ran]
    # the class the CLI call passes is taken among the two the script imports; a --data name it lacks names both files
    assert ran[2].stdout.startswith("ModelFileError") and "main.py (its LightningCLI script, with what it imports): no LightningDataModule " \
        "named 'Others'; found ['Features', 'Other']; did you mean --data Other?" in ran[2].stdout, ran[2].stdout
    r = cli("search", "model.py", "--config", "config.yaml", "--trials", "1", "--samples", "256", "--study-name", "split", cwd=project)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    trial = load(project / "studies" / "split.db", "split").trials[0]
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("fail_reason")
    assert "with SplitCLI from main.py" in r.stdout
