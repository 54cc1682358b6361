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
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    first, source = peak_flops(torch.device("cpu"), "32-true")
    assert source == "measured" and first > 1e8  # any CPU of this decade does > 0.1 GFLOP/s in a matmul
    again, source = peak_flops(torch.device("cpu"), "32-true")
    assert (again, source) == (first, "cached")
    assert (tmp_path / "peak_flops.json").is_file()


def test_matmul_flops_counts_2n3_per_multiplication():
    small = measure_matmul_flops(torch.device("cpu"), "float32", size=256, repeats=2)
    assert 1e7 < small < 1e13
