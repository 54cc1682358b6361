"""End-to-end: classes that ship inside the `lightning` package, unchanged, searched through model files
that only import them (tests/models/peers/): Lightning's BoringModel and BoringDataModule (batch size 1
hard-coded in their DataLoaders), its MNISTDataModule (constructor arguments; mocked data), its demo
transformer (a hard-coded DataLoader over a local corpus) and its demo LSTM (a batch sampler of its own).
No network: the data is written into the test's folder first."""

import random

import optuna
import pytest
from conftest import MODELS, load

pytestmark = pytest.mark.slow

PEERS = MODELS / "peers"
COMPLETE = optuna.trial.TrialState.COMPLETE


def _search(cli, tmp_path, model, *args, env=None):
    name = model.removesuffix(".py")
    db = tmp_path / f"{name}.db"
    r = cli("search", PEERS / model, "--trials", 2, "--confirm", 0, "--storage", f"sqlite:///{db}", *args, env=env, check_rc=0)
    study = load(db, name)
    trials = study.trials
    assert len(trials) == 2 and trials[0].state == COMPLETE, trials[0].user_attrs.get("fail_reason")
    for t in trials:
        if t.state == COMPLETE and "duplicate_of" not in t.user_attrs:  # the loader yielded the trial's batch size
            assert t.user_attrs["ranks"][0]["first_batch_size"] == t.user_attrs["config"]["batch_size"]
    return r, study


def _targets(study):
    return {knob: (t["owner"], t["how"]) for knob, t in study.user_attrs["autotune"]["targets"].items()}


def _corpus(tmp_path, lines=120):
    """``./data/wikitext-2.txt``, where the demos' WikiText2 reads it: 20 words a line from 200."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(200)]
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "wikitext-2.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(20)) for _ in range(lines)))
    config = tmp_path / "small.yaml"  # a vocabulary the size of the corpus's (the demos default to WikiText2's 33,278 words)
    config.write_text("model:\n  vocab_size: 256\n")
    return config


@pytest.mark.parametrize("data", [(), ("--data", "BoringDataModule")], ids=["module", "datamodule"])
def test_boring_classes_get_their_dataloader_rebuilt_and_drop_the_hard_coded_lr(tmp_path, cli, data):
    r, study = _search(cli, tmp_path, "demo_boring.py", "--samples", 128, *data)
    owner = "data" if data else "model"
    assert _targets(study) == {"batch_size": (owner, "loader"), "num_workers": (owner, "loader")}
    assert "warning: dropped 'lr': the model exposes no lr argument or attribute\n" in r.stdout
    settings = study.user_attrs["autotune"]
    assert settings["baseline_config"]["batch_size"] == 1 and {"batch_size", "num_workers"} <= set(settings["space"])
    assert "lr" not in settings["space"]
    assert all(t.state == COMPLETE for t in study.trials), [t.user_attrs.get("fail_reason") for t in study.trials]


def test_mnist_datamodule_with_mocked_data_takes_every_knob_through_its_arguments(tmp_path, cli):
    import torch

    folder = tmp_path / "data" / "MNIST" / "complete"
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for file, n in (("training.pt", 320), ("test.pt", 32)):  # (images [N, 28, 28], labels [N]), as the data module reads them
        torch.save((torch.rand(n, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)), folder / file)
    config = tmp_path / "mnist.yaml"
    config.write_text("data:\n  val_split: 64\n")  # of the 320 samples (its default keeps 5,000 for validation)
    _, study = _search(cli, tmp_path, "demo_mnist.py", "--samples", 256, "--config", config, env={"PL_USE_MOCKED_MNIST": "1"})
    assert _targets(study) == {"batch_size": ("data", "init"), "num_workers": ("data", "init"), "lr": ("model", "init")}
    settings = study.user_attrs["autotune"]
    assert settings["baseline_config"]["num_workers"] == 16 and settings["baseline_config"]["batch_size"] == 32  # its defaults
    assert {"batch_size", "num_workers", "lr"} <= set(settings["space"])
    assert all(t.state == COMPLETE for t in study.trials), [t.user_attrs.get("fail_reason") for t in study.trials]


def test_demo_transformer_with_a_local_corpus_trains_at_the_trial_s_batch_size(tmp_path, cli):
    config = _corpus(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("batch_size:\n  choices: [2, 4]\nnum_workers:\n  choices: [1]\n")  # small: a slow model on a CPU
    _, study = _search(cli, tmp_path, "demo_transformer.py", "--samples", 8, "--config", config, "--space", space)
    assert _targets(study) == {"batch_size": ("model", "loader"), "num_workers": ("model", "loader")}
    settings = study.user_attrs["autotune"]
    assert settings["baseline_config"]["batch_size"] == 1 and settings["space"]["batch_size"] == {"choices": [1, 2, 4]}
    sampled = study.trials[1]
    assert sampled.state == COMPLETE, sampled.user_attrs.get("fail_reason")
    assert sampled.user_attrs["config"]["batch_size"] in (2, 4)  # the rebuilt DataLoader's (checked above: its first batch)


def test_demo_lstm_keeps_its_batch_sampler_and_drops_batch_size_with_the_reason(tmp_path, cli):
    config = _corpus(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("batch_size:\n  choices: [32, 64]\nnum_workers:\n  choices: [1]\n")
    r, study = _search(cli, tmp_path, "demo_lstm.py", "--samples", 40, "--config", config, "--space", space)
    assert (
        "warning: dropped 'batch_size': the model exposes no batch_size argument or attribute, and the training DataLoader "
        "takes its batches from its own batch_sampler (SequenceSampler), which fixes the batch size\n"
    ) in r.stdout
    assert _targets(study) == {"num_workers": ("model", "loader")}
    settings = study.user_attrs["autotune"]
    assert "batch_size" not in settings["space"] and settings["baseline_config"]["batch_size"] == 20  # SequenceSampler(batch_size=20)
    for t in study.trials:
        assert t.state == COMPLETE, t.user_attrs.get("fail_reason")
        assert t.user_attrs["ranks"][0]["first_batch_size"] == 20
    assert study.trials[1].user_attrs["config"]["num_workers"] == 1  # through the rebuilt DataLoader, its batch sampler kept
