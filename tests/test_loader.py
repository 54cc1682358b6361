from pathlib import Path

import pytest
from conftest import EXAMPLES, MODELS

from autotune.config import TrialConfig
from autotune.dataloaders import dataloader_batch_size, dataloader_reach, loader_targets, rebuild_dataloader
from autotune.errors import ModelFileError, UsageError
from autotune.knob_targets import KnobTarget, build_objects, locate_knobs
from autotune.loader import check_model_file, find_classes, load_user_module, read_user_config


def test_check_model_file_errors(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        check_model_file(tmp_path / "missing.py")
    (tmp_path / "model.py").write_text("x = 1")
    with pytest.raises(ModelFileError, match=rf"model file '{tmp_path}/modle.py' does not exist; did you mean '{tmp_path}/model.py'\?$"):
        check_model_file(tmp_path / "modle.py")
    with pytest.raises(ModelFileError, match=r"'.*/train.py' does not exist$"):  # nothing alike: no guess
        check_model_file(tmp_path / "train.py")
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


# --- the training DataLoader rebuilt when the batch size is hard-coded (issue 14, item 3) ---


def _pairs(n=40):
    import torch
    from torch.utils.data import TensorDataset

    return TensorDataset(torch.arange(float(n)).unsqueeze(1), torch.arange(n))


def _collate(samples):  # a user's collate function: must survive the rebuild
    import torch

    return {"x": torch.stack([x for x, _ in samples]), "y": torch.stack([y for _, y in samples])}


def test_a_rebuilt_loader_keeps_dataset_shuffling_collate_and_drop_last():
    import torch
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, SubsetRandomSampler

    data, g = _pairs(), torch.Generator().manual_seed(3)
    loader = DataLoader(data, batch_size=4, shuffle=True, drop_last=True, collate_fn=_collate, generator=g)
    rebuilt = rebuild_dataloader(loader, batch_size=16, num_workers=1)
    assert rebuilt.dataset is data and rebuilt.collate_fn is _collate and rebuilt.generator is g
    assert (rebuilt.batch_size, rebuilt.num_workers, rebuilt.drop_last, len(rebuilt)) == (16, 1, True, 2)  # 40 // 16
    assert isinstance(rebuilt.sampler, RandomSampler) and _is_dataloader_shuffled(rebuilt)
    assert rebuilt.prefetch_factor == 2  # PyTorch's default once there are workers
    first = next(iter(rebuilt))
    assert first["x"].shape == (16, 1) and first["y"].tolist() != list(range(16))  # shuffled, collated

    in_order = rebuild_dataloader(DataLoader(data, batch_size=4), batch_size=8)
    assert isinstance(in_order.sampler, SequentialSampler) and not _is_dataloader_shuffled(in_order)
    assert next(iter(in_order))[1].tolist() == list(range(8)) and len(in_order) == 5

    sampler = SubsetRandomSampler(range(0, 40, 2))
    subset = rebuild_dataloader(DataLoader(data, batch_size=4, sampler=sampler), batch_size=5)
    assert subset.sampler is sampler and len(subset) == 4  # the user's sampler itself: 20 samples
    assert all(i % 2 == 0 for i in next(iter(subset))[1].tolist())

    back = rebuild_dataloader(rebuilt, num_workers=0)  # no workers: no prefetch_factor, no persistent workers
    assert back.num_workers == 0 and back.prefetch_factor is None and not back.persistent_workers and back.batch_size == 16


def test_a_batch_sampler_is_rebuilt_when_plain_and_kept_otherwise():
    from lightning.pytorch.demos.lstm import SequenceSampler
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    data = _pairs()
    inner = RandomSampler(data)
    plain = DataLoader(data, batch_sampler=BatchSampler(inner, 4, drop_last=True))
    assert dataloader_reach(plain) == {"batch_size": None, "num_workers": None}
    rebuilt = rebuild_dataloader(plain, batch_size=8)
    assert type(rebuilt.batch_sampler) is BatchSampler and rebuilt.batch_sampler.sampler is inner
    assert rebuilt.batch_sampler.batch_size == 8 and rebuilt.batch_sampler.drop_last and len(rebuilt) == 5

    # Lightning's demo LSTM: a batch sampler of its own fixes the batch size
    own = DataLoader(data, batch_sampler=SequenceSampler(data, batch_size=10))
    reach = dataloader_reach(own)
    assert reach["num_workers"] is None
    assert reach["batch_size"] == (
        "the training DataLoader takes its batches from its own batch_sampler (SequenceSampler), which fixes the batch size"
    )
    assert dataloader_batch_size(own) == 10
    workers = rebuild_dataloader(own, num_workers=1)
    assert workers.batch_sampler is own.batch_sampler and workers.num_workers == 1
    with pytest.raises(ValueError, match=r"cannot rebuild the training DataLoader with batch_size=8: .* own batch_sampler"):
        rebuild_dataloader(own, batch_size=8)


def test_loaders_that_cannot_take_the_batch_size():
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Batches(IterableDataset):  # yields whole batches of 5
        def __iter__(self):
            return iter(torch.zeros(5, 3) for _ in range(4))

    batches = DataLoader(Batches(), batch_size=None)
    reach = dataloader_reach(batches)
    assert "batch_size=None: its dataset (Batches) yields whole batches itself" in reach["batch_size"]
    assert "IterableDataset read in one process" in reach["num_workers"]
    assert dataloader_batch_size(batches) == 5  # measured on the first batch

    unbatched = rebuild_dataloader(DataLoader(_pairs(6), batch_size=None), pin_memory=False)  # map-style, no batching
    assert unbatched.batch_size is None and next(iter(unbatched))[1].tolist() == 0

    class Mine(DataLoader):
        pass

    assert "Mine (a DataLoader subclass)" in dataloader_reach(Mine(_pairs()))["batch_size"]
    assert dataloader_reach([[1, 2]]) == dict.fromkeys(("batch_size", "num_workers"), "train_dataloader() returns a list, not a torch DataLoader")
    assert rebuild_dataloader([[1, 2]], batch_size=4) == [[1, 2]]  # not a DataLoader: as is

    targets, unreachable = loader_targets(["batch_size", "num_workers"], "data", DataLoader(_pairs(), batch_size=4))
    assert targets == {k: KnobTarget(k, "data", "loader", k) for k in ("batch_size", "num_workers")} and unreachable == {}
    targets, unreachable = loader_targets(["batch_size"], "model", None, "no training DataLoader found: X defines no train_dataloader()")
    assert targets == {} and unreachable == {"batch_size": "no training DataLoader found: X defines no train_dataloader()"}


def test_the_wrapped_hook_rebuilds_only_the_training_loader():
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader

    from autotune.dataloaders import apply_loader_options
    from autotune.measure import TrialFault

    class HardCoded(pl.LightningDataModule):  # the batch size written into the hooks
        def train_dataloader(self):
            return DataLoader(_pairs(), batch_size=4, shuffle=True, drop_last=True)

        def val_dataloader(self):
            return DataLoader(_pairs(), batch_size=4)

    data = HardCoded()
    apply_loader_options(data, TrialConfig(batch_size=8, num_workers=1), {"batch_size": 8, "num_workers": 1})
    train = data.train_dataloader()
    assert (train.batch_size, train.num_workers, train.drop_last, len(train)) == (8, 1, True, 5)
    assert data.val_dataloader().batch_size == 4 and data.val_dataloader().num_workers == 0

    class OwnSampler(pl.LightningModule):
        def train_dataloader(self):
            from lightning.pytorch.demos.lstm import SequenceSampler

            return DataLoader(_pairs(), batch_sampler=SequenceSampler(_pairs(), batch_size=10))

    module = OwnSampler()
    apply_loader_options(module, TrialConfig(batch_size=8), {"batch_size": 8})
    with pytest.raises(TrialFault, match=r"batch_size not applied: autotune could not set batch_size=8: .* own batch_sampler") as e:
        module.train_dataloader()
    assert e.value.kind == "batch_size_not_applied"
    assert torch.is_tensor(next(iter(OwnSampler().train_dataloader()))[0])


_NO_LOADER = """
import lightning.pytorch as pl
import torch


class NoLoader(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""

_SELF_BATCHING = (
    _NO_LOADER.replace("NoLoader", "SelfBatching")
    + """
    def train_dataloader(self):
        class Batches(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(torch.zeros(6, 4) for _ in range(8))

        return torch.utils.data.DataLoader(Batches(), batch_size=None)
"""
)

_SAMPLED = (
    _NO_LOADER.replace("NoLoader", "Sampled")
    + """
    def train_dataloader(self):
        data = torch.utils.data.TensorDataset(torch.zeros(40, 4))
        return torch.utils.data.DataLoader(data, batch_sampler=torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 5, False))
"""
)


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # pytest's own argv, in this process
def test_inspection_reads_the_loader_s_own_batch_size_or_says_what_it_found(tmp_path):
    from autotune.inspection import inspect_model

    (tmp_path / "self_batching.py").write_text(_SELF_BATCHING)
    report = inspect_model({"model_file": str(tmp_path / "self_batching.py")})
    assert report["targets"] == {} and report["baseline"]["batch_size"] == 6  # measured on the first batch
    unreachable = report["model_info"]["unreachable"]
    assert unreachable["batch_size"] == "the training DataLoader has batch_size=None: its dataset (Batches) yields whole batches itself"
    assert "IterableDataset read in one process" in unreachable["num_workers"]

    (tmp_path / "sampled.py").write_text(_SAMPLED)
    report = inspect_model({"model_file": str(tmp_path / "sampled.py")})  # a plain BatchSampler: rebuilt with the batch size
    assert {k: t["how"] for k, t in report["targets"].items()} == {"batch_size": "loader", "num_workers": "loader"}
    assert report["baseline"]["batch_size"] == 5 and report["model_info"]["unreachable"] == {}
    # its dataset is a TensorDataset, but the batch sampler hands it lists of indices: no per-sample indexing to cure
    assert report["model_info"]["loader"]["tensor_dataset_per_sample"] is False

    (tmp_path / "no_loader.py").write_text(_NO_LOADER)
    with pytest.raises(UsageError, match=r"cannot set or read the batch size: no training DataLoader found: NoLoader defines no train_dataloader\(\)"):
        inspect_model({"model_file": str(tmp_path / "no_loader.py")})


_RAISES_IN_INIT = """
import os

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8, fail: str = ""):
        super().__init__()
        self.batch_size = batch_size
        if fail == "data":
            raise ValueError("data folder 'missing/' not found")

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=self.batch_size)


class Net(pl.LightningModule):
    def __init__(self, lr: float = 0.1, fail: str = "model"):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        if fail == "model":
            raise RuntimeError("no weights file found")
        if os.environ.get("RAISES_IN_TRIAL") == "oom":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if os.environ.get("RAISES_IN_TRIAL") == "error":
            raise KeyError("vocab")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # pytest's own argv, in this process
def test_a_constructor_that_raises_is_named_by_its_file_and_line(tmp_path):
    from autotune.inspection import inspect_model

    lines = _RAISES_IN_INIT.splitlines()
    (tmp_path / "raises_model.py").write_text(_RAISES_IN_INIT)
    with pytest.raises(ModelFileError) as error:
        inspect_model({"model_file": str(tmp_path / "raises_model.py")})
    line = lines.index('            raise RuntimeError("no weights file found")') + 1
    assert str(error.value) == f"{tmp_path / 'raises_model.py'}:{line}: Net.__init__ raised RuntimeError: no weights file found"

    # a ValueError of the user's constructor is not LightningCLI refusing the config
    (tmp_path / "raises_data.py").write_text(_RAISES_IN_INIT)
    (tmp_path / "data.yaml").write_text("model:\n  fail: ''\ndata:\n  fail: data\n")
    with pytest.raises(ModelFileError) as error:
        inspect_model({"model_file": str(tmp_path / "raises_data.py"), "config_file": str(tmp_path / "data.yaml")})
    line = lines.index("            raise ValueError(\"data folder 'missing/' not found\")") + 1
    assert str(error.value) == f"{tmp_path / 'raises_data.py'}:{line}: Data.__init__ raised ValueError: data folder 'missing/' not found"


def test_the_cli_names_a_raising_constructor_in_one_line_and_shows_its_traceback_with_debug(tmp_path, cli):
    (tmp_path / "raises.py").write_text(_RAISES_IN_INIT)
    line = _RAISES_IN_INIT.splitlines().index('            raise RuntimeError("no weights file found")') + 1
    r = cli("search", "raises.py", "--trials", 1)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"autotune: error: {tmp_path / 'raises.py'}:{line}: Net.__init__ raised RuntimeError: no weights file found"
    assert "Traceback" not in r.stderr and not list(tmp_path.glob("studies/*.db"))

    r = cli("search", "raises.py", "--trials", 1, "--debug")
    assert r.returncode == 2, r.stderr  # the tracebacks, and the same exit code as without --debug
    assert r.stderr.strip().splitlines()[-1].startswith("autotune: error: ")
    assert f'File "{tmp_path / "raises.py"}", line {line}, in __init__' in r.stderr  # the user's frame, from the inspection process
    assert "RuntimeError: no weights file found" in r.stderr


def test_a_constructor_that_raises_in_a_trial_fails_the_trial_classified_as_what_it_raised(tmp_path, monkeypatch):
    from autotune.runner import inspect_process, run_trial_process

    (tmp_path / "raises.py").write_text(_RAISES_IN_INIT)
    (tmp_path / "ok.yaml").write_text("model:\n  fail: ''\n")
    spec = {"model_file": str(tmp_path / "raises.py"), "config_file": str(tmp_path / "ok.yaml")}
    report = inspect_process(spec)
    spec = {**spec, "targets": report["targets"], "user_config": report["user_config"], "cli": report["cli"], "samples": 64, "seed": 0,
            "config": {"batch_size": 8, "lr": 0.05}}
    monkeypatch.setenv("RAISES_IN_TRIAL", "oom")
    outcome = run_trial_process(spec, timeout=120, trial_number=1, expected_ranks=1, devices=1)
    assert (outcome.fail_kind, outcome.fail_reason) == ("oom", "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setenv("RAISES_IN_TRIAL", "error")
    outcome = run_trial_process(spec, timeout=120, trial_number=2, expected_ranks=1, devices=1)
    line = _RAISES_IN_INIT.splitlines().index('            raise KeyError("vocab")') + 1
    assert (outcome.fail_kind, outcome.fail_reason) == ("exception", f"exception in user code: KeyError: 'vocab' at raises.py:{line}")


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_inspection_records_the_optimizer_configure_optimizers_returns_when_it_runs_before_training():
    """The lr rule of --search staged follows the optimizer's family: SGD's class is read from the
    model's own configure_optimizers; one that reads the Trainer (a OneCycle schedule's total steps: a
    new user's SGD model got the Adam-family rule) runs with a stand-in Trainer attached, detached
    after; one that needs more than the stand-in has leaves it unknown instead of failing the inspection."""
    import lightning.pytorch as pl
    import torch

    from autotune.inspection import _optimizer_class, inspect_model

    models = Path(__file__).parent / "models"
    assert inspect_model({"model_file": str(models / "tiny.py")})["model_info"]["optimizer"] == "torch.optim.sgd.SGD"
    assert inspect_model({"model_file": str(models / "schedulers.py")})["model_info"]["optimizer"] == "torch.optim.sgd.SGD"

    class ReadsItsData(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def configure_optimizers(self):
            return torch.optim.RMSprop(self.parameters(), lr=1e-3 * self.trainer.datamodule.scale)

    model = ReadsItsData()
    assert _optimizer_class(model) is None and model._trainer is None  # no stand-in left attached


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("trainer:\n  max_epochs: 20\nmodel:\n  lr:0.002\n  hidden: 64\n", "; line 4 reads lr:0.002 with no space after the colon: write lr: 0.002"),
        ("model:\n  lr: [0.1, 0.2\n", ""),  # another mistake: no hint
        ("model:\n  url: http://host/x\n  lr: [1\n", ""),  # a URL's colon is not the mistake
    ],
)
def test_invalid_yaml_names_its_line_and_a_missing_space_after_a_colon(tmp_path, text, hint):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(UsageError) as e:
        read_user_config(cfg)
    message = str(e.value)
    assert message.startswith(f"{cfg}:") and "not valid YAML" in message and message.endswith(hint or ")")
    assert len(message.splitlines()) == 1


def test_a_missing_config_file_is_named_with_the_nearest_file_beside_it(tmp_path):
    (tmp_path / "config.yaml").write_text("trainer:\n  max_epochs: 2\n")
    with pytest.raises(UsageError, match=rf"^config file '{tmp_path}/confg.yaml' does not exist; did you mean '{tmp_path}/config.yaml'\?$"):
        read_user_config(tmp_path / "confg.yaml")
    with pytest.raises(UsageError, match=r"^config file '.*/other.yaml' does not exist$"):  # nothing alike: no guess
        read_user_config(tmp_path / "other.yaml")


def test_a_loader_indexing_a_tensor_dataset_one_sample_at_a_time_is_told_apart():
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Subset, TensorDataset, random_split

    from autotune.inspection import _indexes_tensors_one_by_one

    data = TensorDataset(torch.zeros(40, 4), torch.zeros(40))
    train, _ = random_split(data, [30, 10])
    assert _indexes_tensors_one_by_one(DataLoader(data, batch_size=8, shuffle=True))
    assert _indexes_tensors_one_by_one(DataLoader(Subset(train, range(20)), batch_size=8))  # Subset of a Subset of one
    # whole batches in one indexing: the sampler yields index lists and automatic batching is off
    assert not _indexes_tensors_one_by_one(DataLoader(data, sampler=BatchSampler(RandomSampler(data), 8, False), batch_size=None))

    class Batched(TensorDataset):
        def __getitems__(self, indices):
            return [tuple(t[i] for t in self.tensors) for i in indices]

    assert not _indexes_tensors_one_by_one(DataLoader(Batched(torch.zeros(40, 4)), batch_size=8))
    assert not _indexes_tensors_one_by_one(DataLoader(list(range(40)), batch_size=8))  # not in-memory tensors


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # pytest's own argv, in this process
def test_inspection_reads_a_tensor_dataset_indexed_per_sample_in_the_zoo_s_tabular_model():
    from autotune.inspection import inspect_model

    model = Path(__file__).resolve().parent.parent / "benchmarks" / "zoo" / "tabular_mlp.py"
    report = inspect_model({"model_file": str(model)})
    assert report["model_info"]["loader"]["tensor_dataset_per_sample"] is True
