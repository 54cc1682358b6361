"""The extended space: devices/strategy, DataLoader options, torch.compile, channels_last, float32
matmul precision, and the user's own constructor arguments (model.<arg>, data.<arg>)."""

import optuna
import pytest
import torch
import yaml
from conftest import MODELS
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset

from autotune.config import TrialConfig
from autotune.dataloaders import with_loader_options
from autotune.errors import SpaceError, UsageError
from autotune.export import config_from_lightning_cli, lightning_cli_config, render_yaml
from autotune.hardware import Hardware
from autotune.space import (
    find_space,
    load_space,
    params_of,
    parse_space,
    resolve_space,
    suggest_config,
)

CPU = Hardware("cpu", 0, "cpu", 2, True, 16.0)
GPU = Hardware("gpu", 4, "NVIDIA H100", 32, True, 80.0)
APPLICABLE = {k: True for k in ("batch_size", "precision", "accumulate_grad_batches", "num_workers", "lr")}
INFO = {
    "signature": {"model": {"lr": {"type": "float", "default": 0.05}, "hidden": {"type": "int", "default": 0},
                            "dropout": {"type": "float", "default": 0.1}, "act": {"type": None, "default": None}},
                  "data": {"batch_size": {"type": "int", "default": 16}, "shuffle": {"type": "bool", "default": True}}},
    "accepts_any": {"model": False, "data": False},
    "class_names": {"model": "TinyModel", "data": "TinyData"},
    "has_conv": False,
    "loader": {"pin_memory": False, "prefetch_factor": None},
    "float32_matmul_precision": "highest",
}
BASE = TrialConfig(batch_size=16, lr=0.05)


def resolve(data, hardware=CPU, info=INFO, explicit=True):
    return resolve_space(parse_space(data, "s.yaml"), baseline=BASE, hardware=hardware, applicable=APPLICABLE, explicit=explicit,
                         source="s.yaml", model_info=info)


def test_the_extended_space_file_is_valid_and_names_every_knob():
    space = load_space(find_space("extended"))
    assert {"devices", "strategy", "pin_memory", "prefetch_factor", "compile", "channels_last", "float32_matmul_precision"} <= set(space)
    assert space["compile"].choices == (False, "default", "max-autotune")


@pytest.mark.parametrize("data, match", [
    ({"compile": ["fast"]}, r"compile.choices: unknown value 'fast'; allowed: \[False, True, 'default'"),
    ({"strategy": ["deepspeed"]}, r"strategy.choices: unknown value 'deepspeed'; allowed: \['ddp', 'fsdp'\]"),
    ({"pin_memory": ["yes"]}, r"pin_memory.choices: pin_memory takes true or false, got 'yes'"),
    ({"float32_matmul_precision": {"low": 1, "high": 2}}, r"float32_matmul_precision takes 'choices'"),
    ({"prefetch_factor": [0, 2]}, r"prefetch_factor.choices: 0 is below the minimum 1"),
    ({"optimizer.lr": [1]}, r"unknown knob 'optimizer.lr'.*model.<argument> / data.<argument>"),
    ({"model.hidden": [{"a": 1}]}, r"model.hidden.choices: a constructor argument's choices must be numbers, strings"),
])
def test_bad_extended_values_name_the_key_and_the_fix(data, match):
    with pytest.raises(SpaceError, match=match):
        parse_space(data, "s.yaml")


def test_what_a_cpu_cannot_use_is_removed_with_a_note():
    resolved, notes = resolve({"devices": [1, 2, 4], "strategy": ["ddp", "fsdp"], "pin_memory": [False, True],
                               "channels_last": [False, True], "compile": [False, True, "max-autotune"], "prefetch_factor": [4, 8]})
    assert resolved["devices"] == {"choices": [1, 2]} and resolved["strategy"] == {"choices": ["ddp"]}
    assert resolved["pin_memory"] == {"choices": [False]} and resolved["channels_last"] == {"choices": [False]}
    assert resolved["compile"] == {"choices": [False, "default", "max-autotune"]}
    assert resolved["prefetch_factor"] == {"choices": [2, 4, 8]}  # PyTorch's default (the baseline's) added
    assert any("removed strategy 'fsdp': Lightning runs FSDP on GPUs only" in n for n in notes)
    assert any("pin_memory true" in n for n in notes) and any("no 2-D or 3-D convolution" in n for n in notes)
    assert any("removed devices [4]: this machine has 2 CPU cores" in n for n in notes)
    on_gpu, _ = resolve({"strategy": ["ddp", "fsdp"], "pin_memory": [True], "channels_last": [True]}, hardware=GPU,
                        info={**INFO, "has_conv": True})
    assert on_gpu["strategy"] == {"choices": ["ddp", "fsdp"]} and on_gpu["pin_memory"] == {"choices": [True, False]}
    assert on_gpu["channels_last"] == {"choices": [True, False]}


def test_constructor_arguments_are_typed_by_the_signature():
    resolved, _ = resolve({"model.hidden": [8, 32], "model.dropout": {"low": 0, "high": 0.5}, "data.shuffle": [False], "model.act": ["relu", "gelu"]})
    assert resolved["model.hidden"] == {"choices": [8, 32, 0], "type": "int"}  # the default (the baseline) added
    assert resolved["model.dropout"] == {"low": 0.0, "high": 0.5, "log": False, "type": "float"}
    assert resolved["data.shuffle"] == {"choices": [False, True], "type": "bool"}
    assert resolved["model.act"] == {"choices": ["relu", "gelu"], "type": "str"}  # untyped: the choices' own type
    with pytest.raises(SpaceError, match=r"s.yaml: model.hidden: 'wide' is not an int \(TinyModel.__init__ declares hidden: int\)"):
        resolve({"model.hidden": [8, "wide"]})
    with pytest.raises(SpaceError, match=r"model.hidden_dim: LightningModule TinyModel.__init__ takes no argument 'hidden_dim'; its arguments: \['act', 'dropout', 'hidden', 'lr'\]"):
        resolve({"model.hidden_dim": [128]})
    with pytest.raises(SpaceError, match=r"data.shuffle: 0 is not a bool \(TinyData.__init__ declares shuffle: bool\); give bool values"):
        resolve({"data.shuffle": {"low": 0, "high": 1}})
    with pytest.raises(SpaceError, match=r"model.lr is the argument autotune sets for its own knob 'lr' \(it would be overwritten\); search it as lr:"):
        resolve({"model.lr": [0.1]}, info={**INFO, "knob_args": {"model": {"lr": "lr"}, "data": {"batch_size": "batch_size"}}})
    with pytest.raises(SpaceError, match=r"data.shuffle: the model file has no LightningDataModule"):
        resolve({"data.shuffle": [True]}, info={**INFO, "signature": {**INFO["signature"], "data": None}})
    # a link target whose source is a constructor argument: search the source instead
    with pytest.raises(SpaceError, match=r"model.hidden is set by your LightningCLI's link_arguments from data.shuffle .*search data.shuffle in"):
        resolve({"model.hidden": [8]}, info={**INFO, "links": {"model.hidden": "data.shuffle"}})
    # its source an attribute set at instantiation (apply_on="instantiate"): nothing to search instead (a new
    # user was told "search data.num_features in the space instead", which was then refused)
    with pytest.raises(SpaceError, match=r"from data.num_features, which is not a constructor argument .* remove model.hidden from the space$"):
        resolve({"model.hidden": [8]}, info={**INFO, "links": {"model.hidden": "data.num_features"}})


def test_sampled_configs_carry_the_knobs_and_enqueue_files_map_back():
    resolved, _ = resolve({"devices": [1, 2], "strategy": ["ddp"], "compile": [False, "default"], "model.hidden": [8, 32],
                           "float32_matmul_precision": ["highest", "high"]})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(20):
        config = suggest_config(study.ask(), resolved, BASE)
        assert config.strategy == ("ddp" if config.devices == 2 else "auto")
        assert config.model_args["hidden"] in (0, 8, 32) and config.compile in (False, "default")
        seen.add((config.devices, config.compile, config.model_args["hidden"]))
    assert len(seen) > 4
    config = BASE.replace(devices=2, strategy="ddp", compile="default", model_args={"hidden": 32}, float32_matmul_precision="high")
    doc, notes = lightning_cli_config(config, {"lr": {"owner": "model", "how": "init", "name": "lr"}}, model_info=INFO)
    assert doc["trainer"]["devices"] == 2 and doc["trainer"]["strategy"] == "ddp" and doc["model"] == {"lr": 0.05, "hidden": 32}
    assert any(n.startswith("compile: default  # model = torch.compile(model) before trainer.fit") for n in notes)
    assert any("torch.set_float32_matmul_precision('high')" in n for n in notes)
    text = render_yaml(doc, ["x"], notes)
    assert "# autotune: values LightningCLI cannot set" in text and yaml.safe_load(text) == doc
    back = config_from_lightning_cli(doc, {}, BASE.replace(model_args={"hidden": 0}), searched=resolved)
    assert back.devices == 2 and back.strategy == "ddp" and back.model_args == {"hidden": 32}
    params = params_of(back.replace(compile="default", float32_matmul_precision="high"), resolved, BASE.replace(model_args={"hidden": 0}, compile=False,
                                                                                                          float32_matmul_precision="highest"))
    assert params["model.hidden"] == 32 and params["devices"] == 2 and params["compile"] == "default"
    with pytest.raises(UsageError, match=r"e.yaml: strategy must be 'auto' or one of \['ddp', 'fsdp'\], got 'horovod'"):
        config_from_lightning_cli({"trainer": {"strategy": "horovod"}}, {}, BASE, source="e.yaml")


def test_values_the_users_code_has_already_get_no_note():
    base = BASE.replace(pin_memory=False, prefetch_factor=2, float32_matmul_precision="highest", num_workers=2)
    _, notes = lightning_cli_config(base.replace(pin_memory=False), {}, model_info=INFO, baseline=base)
    assert notes == []
    _, notes = lightning_cli_config(base.replace(prefetch_factor=4, float32_matmul_precision="high"), {}, model_info=INFO, baseline=base)
    assert [n.split(":")[0] for n in notes] == ["prefetch_factor", "float32_matmul_precision"]
    _, notes = lightning_cli_config(base.replace(prefetch_factor=4, num_workers=0), {}, model_info=INFO, baseline=base)
    assert notes == []  # PyTorch refuses prefetch_factor without worker processes


def test_pin_memory_and_loader_options_as_notes_or_data_arguments():
    config = BASE.replace(pin_memory=True, prefetch_factor=4, channels_last=True)
    _, notes = lightning_cli_config(config, {}, model_info=INFO)
    assert any(n.startswith("pin_memory: True  # pass pin_memory=True to the DataLoader") for n in notes)
    assert any(n.startswith("channels_last: true  # model.to(memory_format=torch.channels_last)") for n in notes)
    takes = {**INFO, "signature": {**INFO["signature"], "data": {"pin_memory": {"type": "bool", "default": False}}}}
    doc, notes = lightning_cli_config(config, {}, model_info=takes)
    assert doc["data"] == {"pin_memory": True} and not any(n.startswith("pin_memory") for n in notes)


def test_a_rebuilt_loader_keeps_everything_but_the_options_it_sets():
    data = TensorDataset(torch.arange(40.0).unsqueeze(1))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=1, drop_last=True, persistent_workers=True)
    rebuilt = with_loader_options(loader, pin_memory=False, prefetch_factor=6)
    assert rebuilt.prefetch_factor == 6 and rebuilt.batch_size == 8 and rebuilt.drop_last and rebuilt.persistent_workers
    assert isinstance(rebuilt.sampler, RandomSampler) and rebuilt.dataset is data and len(rebuilt) == 5
    plain = with_loader_options(DataLoader(data, batch_size=16), pin_memory=False, prefetch_factor=4)
    assert plain.prefetch_factor is None and isinstance(plain.sampler, SequentialSampler)  # no workers: nothing to prefetch
    assert with_loader_options([1, 2], True, 2) == [1, 2]


def test_extended_knobs_and_constructor_arguments_reach_every_rank(tmp_path, cli):
    db = tmp_path / "x.db"
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: [16, 32]\nnum_workers: [1]\nprefetch_factor: [2, 4]\nfloat32_matmul_precision: [highest, medium]\n"
                     "model.hidden: [0, 16]\ndata.shuffle: [true, false]\ndevices: [1, 2]\n")
    known = tmp_path / "known.yaml"
    known.write_text("trainer:\n  devices: 2\n  strategy: ddp\nmodel:\n  hidden: 16\ndata:\n  shuffle: false\n  batch_size: 32\n  num_workers: 1\n")
    r = cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 512, "--space", space, "--enqueue", known,
            "--storage", f"sqlite:///{db}", check_rc=0)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{db}")
    base, seeded = study.trials
    assert seeded.state.name == "COMPLETE", seeded.user_attrs.get("fail_reason")
    assert seeded.user_attrs["config"]["model_args"] == {"hidden": 16} and seeded.user_attrs["config"]["data_args"] == {"shuffle": False}
    ranks = seeded.user_attrs["ranks"]
    assert len(ranks) == 2 and ranks[0]["applied"] == ranks[1]["applied"]  # the same on every rank
    assert ranks[0]["applied"]["parameters"] == 8 * 16 + 16 + 16 + 1  # the MLP of hidden=16, not the 9-parameter linear model
    assert ranks[0]["applied"]["prefetch_factor"] == 2 and ranks[0]["applied"]["float32_matmul_precision"] == "highest"
    assert base.user_attrs["applied"]["parameters"] == 9 and base.user_attrs["applied"]["prefetch_factor"] is None  # no workers
    assert base.user_attrs["config"]["float32_matmul_precision"] == "highest"
    exported = (tmp_path / "tiny.best.yaml").read_text()
    # the recommendation's prefetch_factor and matmul precision are the user's own: nothing to apply by hand
    assert "prefetch_factor" not in exported.split("# autotune:")[-1] and "set_float32_matmul_precision('highest')" not in exported
    assert "model.hidden" in r.stdout or "hidden" in cli("show", db, "--format", "json", check_rc=0).stdout


def test_channels_last_converts_the_module_and_its_4d_inputs():
    from autotune.callback import applied_knobs
    from autotune.trial_trainer import apply_channels_last

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch

    net = apply_channels_last(Net())
    x, y = net.on_after_batch_transfer((torch.randn(2, 3, 5, 5), torch.ones(2)), 0)
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() and y.dim() == 1
    assert applied_knobs(None, net)["channels_last"] and not applied_knobs(None, Net())["channels_last"]
    loader = torch.utils.data.DataLoader(range(8), batch_size=2, num_workers=1, persistent_workers=True, prefetch_factor=3)
    assert {k: applied_knobs(loader, net)[k] for k in ("pin_memory", "prefetch_factor", "persistent_workers")} == {
        "pin_memory": False, "prefetch_factor": 3, "persistent_workers": True}


def test_a_compiled_trial_trains_and_says_so(tmp_path, cli):
    db = tmp_path / "c.db"
    space = tmp_path / "space.yaml"
    space.write_text("compile: [default]\n")  # with the baseline's false: a grid of two points
    cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 256, "--space", space, "--sampler", "grid",
        "--storage", f"sqlite:///{db}", check_rc=0)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{db}")
    compiled = [t for t in study.trials if t.user_attrs["config"].get("compile") == "default"]
    assert len(compiled) == 1 and compiled[0].state.name == "COMPLETE", compiled[0].user_attrs.get("fail_reason")
    assert compiled[0].user_attrs["applied"]["compiled"] and not study.trials[0].user_attrs["applied"]["compiled"]
    # the FLOP counter stays off a compiled trial: its dispatch mode changed what Dynamo traced, so a compiled trial had
    # trained where the user's own compiled run raised (helper-37)
    assert compiled[0].user_attrs["model_flops_per_sec"] is None and study.trials[0].user_attrs["model_flops_per_sec"] is not None
    from autotune.study import load_study, recommendation

    recommended, _ = recommendation(*load_study("tiny", f"sqlite:///{db}"))
    text = (tmp_path / "tiny.best.yaml").read_text()
    assert ("compile: default  # model = torch.compile(model)" in text) == (recommended.user_attrs["config"]["compile"] == "default")
