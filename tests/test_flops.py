"""MFU: FLOPs per sample, the device peak (measured on a CPU and cached), and their ratio."""

import math

import pytest
import torch

from autotune.flops import measure_matmul_flops, mfu, peak_flops, precision_dtype


def test_mfu_formula_and_missing_inputs():
    # 1 GFLOP per sample at 1,000 samples/s on 2 devices of 1 TFLOP/s each: 50%
    assert mfu(1e9, 1000.0, 1e12, 2) == pytest.approx(0.5)
    assert math.isnan(mfu(0.0, 1000.0, 1e12, 1)) and math.isnan(mfu(1e9, 1000.0, 0.0, 1))


@pytest.mark.parametrize("precision, dtype", [("32-true", "float32"), ("bf16-mixed", "bfloat16"), ("16-mixed", "float16"),
                                              ("64-true", "float64"), ("bf16-true", "bfloat16")])
def test_precision_dtype(precision, dtype):
    assert precision_dtype(precision) == dtype


def test_precision_dtype_rejects_unknown():
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        precision_dtype("fp8")


def test_cpu_peak_is_measured_once_then_cached(tmp_path, monkeypatch):
    from autotune import flops

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    # matmul speeds fixed, so that this machine's load cannot decide the test: the full measurement
    # 5e10 FLOP/s, the small check at each later use 4e10 (not clearly faster: the cache stands)
    calls = []

    def fake(device, dtype, size=None, repeats=None):
        calls.append(size)
        return 4e10 if size == flops.CHECK_SIZE else 5e10

    monkeypatch.setattr(flops, "measure_matmul_flops", fake)
    first, source = peak_flops(torch.device("cpu"), "32-true")
    assert (first, source) == (5e10, "measured")
    again, source = peak_flops(torch.device("cpu"), "32-true")
    assert (again, source) == (first, "cached") and calls == [None, flops.CHECK_SIZE]
    assert (tmp_path / "peak_flops.json").is_file()


def test_matmul_flops_counts_2n3_per_multiplication():
    small = measure_matmul_flops(torch.device("cpu"), "float32", size=256, repeats=2)
    assert 1e7 < small < 1e13


# --- item 14.7d: MFU never above 100%; a cached peak is never below what a trial achieved


def test_mfu_is_at_most_one():
    assert mfu(1e9, 1000.0, 1e11, 1) == 1.0  # 10x the peak: the peak is wrong, MFU is capped


def test_a_cached_peak_below_what_a_small_matmul_runs_is_measured_again(tmp_path, monkeypatch):
    import json

    from autotune import flops

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    peak_flops(torch.device("cpu"), "32-true")  # a real measurement, cached under this machine's key
    cache = json.loads((tmp_path / "peak_flops.json").read_text())
    (key,) = cache
    assert key.startswith("cpu|") and key.endswith(f"|float32|torch {torch.__version__}") and flops.cpu_model_name() in key
    # the rule, on fixed figures (real timings move with the machine's load): the full measurement
    # runs 1e11 FLOP/s, the small check 8e10
    monkeypatch.setattr(flops, "measure_matmul_flops", lambda device, dtype, size=None, repeats=None: 8e10 if size == flops.CHECK_SIZE else 1e11)
    # a figure measured on a busy machine (FINDINGS: 3.5e8 FLOP/s for a CPU that runs 1e11): re-measured, not trusted
    cache[key] = 3.5e5
    (tmp_path / "peak_flops.json").write_text(json.dumps(cache))
    assert peak_flops(torch.device("cpu"), "32-true") == (1e11, "measured")
    assert json.loads((tmp_path / "peak_flops.json").read_text())[key] == 1e11
    assert peak_flops(torch.device("cpu"), "32-true") == (1e11, "cached")  # the check (8e10) is within CHECK_MARGIN of it
    # a cached figure no small multiplication beats stays cached
    cache[key] = 1e18
    (tmp_path / "peak_flops.json").write_text(json.dumps(cache))
    assert peak_flops(torch.device("cpu"), "32-true") == (1e18, "cached")


def test_the_summary_flags_an_mfu_whose_peak_was_raised():
    import types

    from autotune.summary import flops_line

    attrs = {"model_flops_per_sec": 3.2e9, "flops_per_sample": 1e6, "mfu": 1.0, "peak_flops_source": "achieved"}
    line = flops_line(types.SimpleNamespace(user_attrs=attrs))
    assert "MFU unknown: the measured peak was below this trial's FLOP/s" in line and "100" not in line
    from autotune.report import trial_rows

    raised = types.SimpleNamespace(number=3, state=types.SimpleNamespace(name="COMPLETE"), user_attrs=dict(attrs))
    assert trial_rows(None, trials=[raised])[0]["mfu"] is None  # the table shows no 100% it cannot know
    attrs["peak_flops_source"], attrs["mfu"] = "cached", 0.25
    assert "MFU 25.0% of the device's peak" in flops_line(types.SimpleNamespace(user_attrs=attrs))


@pytest.mark.slow
def test_a_search_never_reports_mfu_from_a_stale_low_peak(tmp_path):
    """FINDINGS: a bf16 "peak" of 3.5e8 FLOP/s, measured on a busy machine, sat in the shared cache."""
    import json

    import optuna
    from conftest import MODELS, run_cli

    from autotune import flops

    stale = {f"cpu|{flops.cpu_model_name()} x{n} threads|float32|torch {torch.__version__}": 1.0 for n in range(1, 65)}
    (tmp_path / "peak_flops.json").write_text(json.dumps(stale))
    run_cli(["search", MODELS / "tiny.py", "--trials", 2, "--samples", 512, "--storage", f"sqlite:///{tmp_path / 'm.db'}",
             "--study-name", "m"], cwd=tmp_path, env={"AUTOTUNE_CACHE_DIR": str(tmp_path)}, check_rc=0)
    study = optuna.load_study(study_name="m", storage=f"sqlite:///{tmp_path / 'm.db'}")
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert complete
    for t in complete:
        attrs = t.user_attrs
        # the stale figure was checked, found stale and measured again (a later trial may find the new figure cached)
        assert attrs["peak_flops_source"] in ("measured", "cached") and attrs["peak_flops"] > 1e7
        assert 0 < attrs["mfu"] <= 1 and attrs["peak_flops"] >= attrs["model_flops_per_sec"]
    cache = json.loads((tmp_path / "peak_flops.json").read_text())
    assert any(value > 1e7 for key, value in cache.items() if key in stale)  # the stale figure was replaced


def test_a_small_mfu_keeps_two_significant_digits_instead_of_reading_zero():
    import types

    from autotune.report import _fmt
    from autotune.summary import flops_line

    attrs = {"model_flops_per_sec": 3.4e7, "flops_per_sample": 1e4, "mfu": 0.00034, "peak_flops_source": "measured"}
    assert "MFU 0.034% of the device's peak" in flops_line(types.SimpleNamespace(user_attrs=attrs))
    assert (_fmt("mfu", 0.00034), _fmt("mfu", 0.0), _fmt("mfu", 0.25)) == ("0.034%", "0.0%", "25.0%")
    assert _fmt("mfu", 4.1e-6) == "<0.01%"  # a table cell stays narrow
