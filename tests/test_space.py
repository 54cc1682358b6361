import re

import pytest

from autotune.config import TrialConfig
from autotune.errors import SpaceError
from autotune.hardware import Hardware
from autotune.space import (
    distributions,
    find_space,
    load_space,
    parse_space,
    resolve_space,
    suggest_config,
)

CPU = Hardware("cpu", 0, "cpu", 2, True, 16.0)
GPU_NO_BF16 = Hardware("gpu", 4, "Tesla V100", 32, False, 32.0)
ALL = {k: True for k in ("batch_size", "precision", "accumulate_grad_batches", "num_workers", "lr")}


def test_default_space_is_valid_and_has_the_five_knobs():
    space = load_space(find_space("default"))
    assert set(space) == set(ALL)
    assert space["lr"].relative and space["lr"].log
    assert space["num_workers"].high == "auto"


@pytest.mark.parametrize(
    "data, match",
    [
        ({"batchsize": {"choices": [1]}}, r"unknown knob 'batchsize' \(did you mean 'batch_size'\?\); known knobs: \['accumulate_grad"),
        ({"zzz": {"choices": [1]}}, r"unknown knob 'zzz'; known knobs: "),
        ({"batch_size": {"choices": []}}, r"batch_size.choices must be a non-empty list"),
        ({"batch_size": {"choices": [0, 8]}}, r"batch_size.choices: 0 is below the minimum 1"),
        ({"batch_size": {"choices": ["big"]}}, r"batch_size.choices must be an integer, got 'big'"),
        ({"batch_size": {"low": 64, "high": 8}}, r"low 64 is greater than high 8; swap them \(low: 8, high: 64\)"),
        ({"batch_size": {"low": 8}}, r"needs 'choices', or both 'low' and 'high'"),
        ({"batch_size": {"choices": [8], "low": 1}}, r"has 'choices' and also"),
        ({"batch_size": {"choices": [8], "typo": 1}}, r"unknown key\(s\) \['typo'\]; allowed"),
        ({"batch_size": {"choises": [8, 16]}}, r"unknown key\(s\) \['choises'\] \(did you mean 'choices'\?\); allowed"),
        ({"precision": {"choices": ["16"]}}, r"unknown precision '16' \(Lightning's short name for '16-mixed': write '16-mixed'\); allowed: \['64-true'"),
        ({"precision": {"choices": [32]}}, r"unknown precision 32 \(Lightning's short name for '32-true': write '32-true'\)"),
        ({"precision": {"choices": ["fp8"]}}, r"unknown precision 'fp8'; allowed: \['64-true'"),
        ({"precision": {"low": 1, "high": 2}}, r"precision takes 'choices'"),
        ({"lr": {"low": 0, "high": 1, "log": True}}, r"lr.low: lr must be > 0|log: true needs low > 0"),
        ({"lr": {"low": 0.1, "high": 10, "relative": "yes"}}, r"lr.relative must be true or false"),
        ({"num_workers": {"low": 0, "high": "many"}}, r"num_workers.high must be an integer, got 'many'"),
        ({"batch_size": {"low": 1, "high": "auto"}}, r"'auto' is only allowed for num_workers"),
        ({"accumulate_grad_batches": {"low": 1, "high": 8, "relative": True}}, r"relative is only allowed for lr"),
        (["batch_size"], r"a space must be a mapping"),
    ],
)
def test_bad_spaces_are_rejected_with_the_key_and_value(data, match):
    with pytest.raises(SpaceError, match=match) as info:
        parse_space(data, "my_space.yaml")
    assert str(info.value).startswith("my_space.yaml: ")


def test_load_space_reports_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpaceError, match="does not exist"):
        load_space(tmp_path / "nope.yaml")
    with pytest.raises(SpaceError, match=r"^space file 'extnded' does not exist; did you mean 'extended'\?; give a path or one"):
        find_space("extnded")  # a bundled name, mistyped
    (tmp_path / "narrow.yaml").write_text("batch_size: [16, 32]\n")
    with pytest.raises(SpaceError, match=rf"^space file '{tmp_path}/narow.yaml' does not exist; did you mean '{tmp_path}/narrow.yaml'\?;"):
        find_space(tmp_path / "narow.yaml")  # the user's own file, mistyped
    with pytest.raises(SpaceError, match=r"^space file 'zzzz' does not exist; give a path"):  # nothing alike: no guess
        find_space("zzzz")
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_size: [1, 2\n")
    with pytest.raises(SpaceError, match=r"bad.yaml:\d+: not valid YAML"):
        load_space(bad)


def _resolve(data, baseline=None, hardware=CPU, applicable=ALL, explicit=False):
    baseline = baseline or TrialConfig(batch_size=24, lr=1e-3, num_workers=0)
    return resolve_space(parse_space(data), baseline=baseline, hardware=hardware, applicable=applicable, explicit=explicit)


def test_cpu_drops_16_mixed_and_adds_the_baseline_values():
    resolved, notes = _resolve({"precision": {"choices": ["32-true", "16-mixed", "bf16-mixed"]}, "batch_size": {"choices": [16, 64]}})
    assert resolved["precision"]["choices"] == ["32-true", "bf16-mixed"]
    assert any("16-mixed" in n and "bf16-mixed" in n for n in notes)
    assert resolved["batch_size"]["choices"] == [16, 24, 64]  # the baseline's 24 is a point of the space


def test_gpu_without_bf16_drops_bf16():
    resolved, _ = _resolve({"precision": {"choices": ["16-mixed", "bf16-mixed"]}}, hardware=GPU_NO_BF16)
    assert resolved["precision"]["choices"] == ["16-mixed", "32-true"]


def test_relative_lr_and_auto_workers_become_absolute():
    resolved, _ = _resolve({"lr": {"low": 0.1, "high": 10.0, "log": True, "relative": True}, "num_workers": {"low": 0, "high": "auto"}})
    assert resolved["lr"] == {"low": pytest.approx(1e-4), "high": pytest.approx(1e-2), "log": True}
    assert resolved["num_workers"] == {"low": 0, "high": 2, "log": False}


def test_num_workers_is_capped_by_cores_per_device():
    baseline = TrialConfig(batch_size=8, lr=0.1, devices=2, strategy="ddp")
    resolved, notes = _resolve({"num_workers": {"low": 0, "high": 16}}, baseline=baseline)
    assert resolved["num_workers"]["high"] == 1
    assert any("capped at 1" in n for n in notes)


def test_inapplicable_knob_is_dropped_by_default_and_an_error_when_explicit():
    applicable = {**ALL, "lr": False}
    resolved, notes = _resolve({"lr": {"low": 0.1, "high": 10, "relative": True}}, applicable=applicable)
    assert "lr" not in resolved and any("dropped 'lr'" in n for n in notes)
    with pytest.raises(SpaceError, match="'lr' cannot be applied"):
        _resolve({"lr": {"low": 0.1, "high": 10, "relative": True}}, applicable=applicable, explicit=True)


def test_a_knob_no_dataloader_takes_is_dropped_with_the_reason_even_when_explicit():
    applicable = {**ALL, "batch_size": False}
    why = "the training DataLoader takes its batches from its own batch_sampler (SequenceSampler), which fixes the batch size"
    space = parse_space({"batch_size": {"choices": [16, 32]}, "num_workers": {"low": 0, "high": 1}})
    for explicit in (False, True):
        resolved, notes = resolve_space(
            space,
            baseline=TrialConfig(batch_size=20),
            hardware=CPU,
            applicable=applicable,
            explicit=explicit,
            model_info={"unreachable": {"batch_size": why}},
        )
        assert "batch_size" not in resolved and "num_workers" in resolved
        assert notes == [f"dropped 'batch_size': the model exposes no batch_size argument or attribute, and {why}"]


def test_suggest_config_follows_the_distributions():
    import optuna

    resolved, _ = _resolve({"batch_size": {"choices": [16, 64]}, "accumulate_grad_batches": {"low": 1, "high": 4}, "lr": {"low": 0.5, "high": 2, "log": True, "relative": True}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    baseline = TrialConfig(batch_size=24, lr=1e-3)
    dists = distributions(resolved)
    for _ in range(5):
        trial = study.ask()
        config = suggest_config(trial, resolved, baseline)
        assert config.batch_size in (16, 24, 64)
        assert 1 <= config.accumulate_grad_batches <= 4
        assert 5e-4 <= config.lr <= 2e-3
        assert set(trial.distributions) == set(dists)
        study.tell(trial, 1.0)


@pytest.mark.parametrize("scaling, expected", [("none", 0.002), ("linear", 0.002 * 8), ("sqrt", 0.002 * 8**0.5)])
def test_scaled_lr_follows_the_effective_batch(scaling, expected):
    from autotune.space import scaled_lr

    assert scaled_lr(0.001, 2.0, 256, 32, scaling) == pytest.approx(expected)
    assert scaled_lr(0.001, 1.0, 32, 32, scaling) == pytest.approx(0.001)  # the baseline keeps its lr
    with pytest.raises(ValueError, match="unknown lr_scaling 'cubic'"):
        scaled_lr(0.001, 1.0, 32, 32, "cubic")


def _baseline():
    return TrialConfig(batch_size=32, lr=1e-3, num_workers=0)


def test_lr_scaling_samples_a_multiplier_and_the_config_holds_the_final_lr():
    import optuna

    from autotune.space import baseline_params

    space = parse_space({"batch_size": {"choices": [32, 128]}, "accumulate_grad_batches": {"choices": [1, 2]},
                         "lr": {"low": 0.5, "high": 2.0, "log": True, "relative": True}, "lr_scaling": "linear"})
    assert space.lr_scaling == "linear"
    base = _baseline()
    resolved, notes = resolve_space(space, baseline=base, hardware=CPU, applicable=ALL, explicit=True)
    assert resolved["lr"] == {"low": 0.5, "high": 2.0, "log": True, "scaling": "linear"}
    assert not [n for n in notes if n.startswith("lr:")]
    # a range or choices without 1 are widened to hold it, and the run says so (a new user's 2.5..3.0 ran at x1 without a word)
    for lr, widened in (({"low": 2.5, "high": 3.0, "relative": True}, "range 2.5..3"), ({"low": 0.2, "high": 0.5, "relative": True}, "range 0.2..0.5")):
        narrow = parse_space({"batch_size": {"choices": [32, 128]}, "lr": lr, "lr_scaling": "sqrt"})
        got, notes = resolve_space(narrow, baseline=base, hardware=CPU, applicable=ALL, explicit=True)
        assert 1.0 in (got["lr"]["low"], got["lr"]["high"])
        assert f"lr: multipliers {widened} widened to hold 1, the lr_scaling rule's own lr" in " ".join(notes)
    assert baseline_params(resolved, base)["lr_multiplier"] == 1.0
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(6):
        trial = study.ask()
        config = suggest_config(trial, resolved, base)
        ratio = config.effective_batch_size / base.effective_batch_size
        assert config.lr == pytest.approx(base.lr * trial.params["lr_multiplier"] * ratio)
        assert "lr" not in trial.params
    # no lr in the file: the lr still follows the batch (multiplier 1)
    only_batch = parse_space({"batch_size": {"choices": [32, 128]}, "lr_scaling": "sqrt"})
    resolved, _ = resolve_space(only_batch, baseline=base, hardware=CPU, applicable=ALL, explicit=True)
    study = optuna.create_study()
    study.enqueue_trial({"batch_size": 128})
    trial = study.ask()
    assert suggest_config(trial, resolved, base).lr == pytest.approx(base.lr * (128 / base.batch_size) ** 0.5)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"lr": {"low": 0.1, "high": 1.0}, "lr_scaling": "cubic"}, "lr_scaling must be one of ['none', 'linear', 'sqrt'], got 'cubic'"),
        ({"lr": {"low": 0.0001, "high": 0.01}, "lr_scaling": "linear"}, "give lr as a range with relative: true"),
    ],
)
def test_bad_lr_scaling(data, message):
    with pytest.raises(SpaceError, match=re.escape(message)):
        parse_space(data, "s.yaml")


def test_manual_optimization_drops_accumulation_with_a_note_even_from_an_explicit_space():
    data = {"batch_size": {"choices": [16, 32]}, "accumulate_grad_batches": {"low": 1, "high": 8}}
    baseline = TrialConfig(batch_size=16, lr=1e-3)
    for explicit in (False, True):
        resolved, notes = resolve_space(
            parse_space(data), baseline=baseline, hardware=CPU, applicable=ALL, explicit=explicit,
            model_info={"automatic_optimization": False},
        )
        assert "accumulate_grad_batches" not in resolved and "batch_size" in resolved
        assert [n for n in notes if "accumulate_grad_batches" in n] == [
            "dropped 'accumulate_grad_batches': the module uses manual optimization (automatic_optimization = False), "
            "and Lightning accumulates gradients only under automatic optimization"
        ]
    # automatic optimization, or a study inspected before this was reported: searched as before
    for info in ({"automatic_optimization": True}, {}):
        resolved, notes = resolve_space(parse_space(data), baseline=baseline, hardware=CPU, applicable=ALL, explicit=False, model_info=info)
        assert resolved["accumulate_grad_batches"] == {"low": 1, "high": 8, "log": False}
        assert not any("accumulate" in n for n in notes)


# --- item 14.7c: a precision this CPU does not run natively is removed like 16-mixed


def test_cpu_bf16_is_native_only_with_bf16_instructions(tmp_path):
    from autotune.hardware import cpu_bf16_native, cpu_flags

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f\n")
    assert cpu_flags(str(info)) == {"fpu", "sse2", "avx2", "avx512f"}
    assert not cpu_bf16_native(cpu_flags(str(info)))
    assert cpu_bf16_native({"avx2", "avx512_bf16"}) and cpu_bf16_native({"amx_bf16"}) and cpu_bf16_native({"fp", "asimd", "bf16"})
    assert cpu_flags(str(tmp_path / "missing")) is None  # not Linux: PyTorch's own test, else kept
    assert cpu_bf16_native(None, torch_check=False) is False and cpu_bf16_native(None) is True


def test_cpu_without_bf16_instructions_drops_bf16_with_a_note():
    no_bf16 = Hardware("cpu", 0, "cpu", 2, False, 16.0)
    resolved, notes = _resolve({"precision": {"choices": ["32-true", "16-mixed", "bf16-mixed", "bf16-true"]}}, hardware=no_bf16)
    assert resolved["precision"]["choices"] == ["32-true"]
    assert "removed precision '16-mixed': Lightning runs '16-mixed' as 'bf16-mixed' on CPU" in notes
    assert any(n.startswith("removed precision 'bf16-mixed': this CPU has no bfloat16 instructions") for n in notes)
    assert any(n.startswith("removed precision 'bf16-true': this CPU has no bfloat16 instructions") for n in notes)
    # a CPU with them keeps bf16 (only 16-mixed goes: Lightning runs it as bf16-mixed)
    resolved, _ = _resolve({"precision": {"choices": ["32-true", "16-mixed", "bf16-mixed"]}})
    assert resolved["precision"]["choices"] == ["32-true", "bf16-mixed"]


def test_a_bf16_baseline_on_a_cpu_without_bf16_stays_with_a_warning():
    from autotune.study.settings import _baseline_config

    class Notes:
        def __init__(self):
            self.lines = []

        def warn(self, message):
            self.lines.append(message)

    no_bf16 = Hardware("cpu", 0, "cpu", 2, False, 16.0)
    ui = Notes()
    for given in ("bf16-mixed", "16-mixed"):
        config = _baseline_config({"precision": given, "batch_size": 16, "accumulate_grad_batches": 1, "lr": 0.1}, no_bf16, 1, ui)
        assert config.precision == "bf16-mixed"  # it runs (emulated): the baseline is the user's own config
    assert any("keeps its precision 'bf16-mixed', though this CPU has no bfloat16 instructions" in line for line in ui.lines)
    # the space keeps the baseline's precision as its one extra point
    resolved, _ = _resolve({"precision": {"choices": ["32-true", "bf16-mixed"]}}, hardware=no_bf16,
                           baseline=TrialConfig(batch_size=24, lr=1e-3, precision="bf16-mixed"))
    assert resolved["precision"]["choices"] == ["32-true", "bf16-mixed"]


# --- item 14.7b: the baseline's num_workers above the core cap is one extra point, not a wider range


def test_baseline_num_workers_above_the_cap_is_one_extra_point():
    baseline = TrialConfig(batch_size=24, lr=1e-3, num_workers=8)
    resolved, notes = _resolve({"num_workers": {"low": 0, "high": "auto"}}, baseline=baseline)  # 2 cores
    assert resolved["num_workers"] == {"choices": [0, 1, 2, 8]}  # not 0..8: 3..7 would oversubscribe the cores
    assert "num_workers: the baseline's 8 is above 2, so it is one extra point of the space: [0, 1, 2, 8]" in notes
    resolved, notes = _resolve({"num_workers": {"low": 0, "high": 16, "step": 2}}, baseline=baseline)
    assert resolved["num_workers"] == {"choices": [0, 2, 8]} and any("capped at 2" in n for n in notes)
    resolved, _ = _resolve({"num_workers": {"choices": [0, 1, 4]}}, baseline=baseline)
    assert resolved["num_workers"] == {"choices": [0, 1, 8]}  # choices: 4 capped away, the baseline's 8 kept
    # a baseline inside the cap keeps the range
    resolved, _ = _resolve({"num_workers": {"low": 0, "high": "auto"}}, baseline=TrialConfig(batch_size=24, lr=1e-3, num_workers=1))
    assert resolved["num_workers"] == {"low": 0, "high": 2, "log": False}
    # the baseline is a point of the space the sampler accepts
    import optuna

    from autotune.space import baseline_params

    resolved, _ = _resolve({"num_workers": {"low": 0, "high": "auto"}}, baseline=baseline)
    study = optuna.create_study()
    study.enqueue_trial(baseline_params(resolved, baseline))
    assert suggest_config(study.ask(), resolved, baseline).num_workers == 8
