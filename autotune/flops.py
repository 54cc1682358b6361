"""Model FLOPs utilisation (MFU): FLOPs per training sample, the device's peak, and their ratio.

- FLOPs per sample are counted by PyTorch's ``FlopCounterMode`` (what Lightning's
  ``lightning.fabric.utilities.throughput.measure_flops`` wraps) over the trial's *first* training
  batch, forward and backward, on the real model and batch. That batch is always warm-up, outside
  the measured window (:func:`autotune.measure.steady_state_start` discards at least the first
  optimizer step), so counting costs the measurement nothing. Only operations PyTorch's counter
  knows (matrix multiplications, convolutions, attention) are counted, as in MFU's usual definition
  (Chowdhery et al. 2022, PaLM, appendix B).
- The peak per device is Lightning's ``get_available_flops`` (datasheet figures of known GPUs and
  TPUs, by dtype). On a CPU, or a device Lightning does not know, it is measured once by a large
  matrix multiplication in the trial's dtype (the best of a few runs) and cached in
  ``~/.cache/autotune/peak_flops.json`` (``AUTOTUNE_CACHE_DIR`` overrides the folder).
- ``mfu = flops_per_sample x samples_per_sec / (peak_per_device x devices)``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["measure_matmul_flops", "mfu", "peak_flops", "precision_dtype"]

#: Seconds one multiplication of the peak measurement should take at least (see :func:`measure_matmul_flops`).
MATMUL_SECONDS = 0.05

_DTYPES = {"64": "float64", "32": "float32", "bf16": "bfloat16", "16": "float16"}


def precision_dtype(precision: str) -> str:
    """The dtype matrix multiplications run in under a Lightning precision (``"bf16-mixed"`` -> ``"bfloat16"``).

    Raises:
        ValueError: Not a Lightning precision string.
    """
    head = str(precision).split("-")[0]
    if head not in _DTYPES:
        raise ValueError(f"unknown precision {precision!r}")
    return _DTYPES[head]


def mfu(flops_per_sample: float, samples_per_sec: float, peak_per_device: float, devices: int) -> float:
    """Model FLOPs utilisation, ``0..1`` (NaN when an input is missing or not positive).

    Args:
        flops_per_sample: Training FLOPs (forward + backward) per sample.
        samples_per_sec: Global training samples/s.
        peak_per_device: Peak FLOP/s of one device in the trial's dtype.
        devices: Devices of the trial (all nodes).
    """
    if not (flops_per_sample > 0 and samples_per_sec > 0 and peak_per_device > 0 and devices > 0):
        return float("nan")
    return flops_per_sample * samples_per_sec / (peak_per_device * devices)


def _cache_path() -> Path:
    folder = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "autotune")
    return Path(folder) / "peak_flops.json"


def _device_key(device: Any, dtype: str) -> str:
    import torch

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        import platform

        name = f"{platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"
    return f"{device.type}|{name}|{dtype}"


def measure_matmul_flops(device: Any, dtype: str, size: int | None = None, repeats: int = 3) -> float:
    """Peak FLOP/s of ``device`` in ``dtype``, measured by a square matrix multiplication.

    ``2 * n**3`` FLOPs per multiplication, timed after one warm-up run, best of ``repeats`` (the
    device synchronised around each). ``n = size``; by default it doubles from 256 while one
    multiplication takes under :data:`MATMUL_SECONDS`, up to 2048 on a CPU and 8192 on a GPU (a
    dtype without fast kernels, bf16 on most CPUs, would otherwise take minutes).
    """
    import torch

    torch_dtype = getattr(torch, dtype)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def operands(n: int):
        return torch.randn(n, n, device=device).to(torch_dtype), torch.randn(n, n, device=device).to(torch_dtype)

    n = size or (8192 if device.type == "cuda" else 2048)
    if size is None:
        # a dtype the device has no fast kernel for (bf16 on most CPUs) multiplies 100x slower: grow the
        # size from 256 while one multiplication takes under 50 ms, so the measurement stays short
        n = 256
        while n < (8192 if device.type == "cuda" else 2048):
            a, b = operands(n)
            torch.matmul(a, b)
            sync()
            start = time.perf_counter()
            torch.matmul(a, b)
            sync()
            if time.perf_counter() - start > MATMUL_SECONDS:
                break
            n *= 2
    a, b = operands(n)
    torch.matmul(a, b)
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def peak_flops(device: Any, precision: str) -> tuple[float | None, str]:
    """Peak FLOP/s of one device for a trial's precision, and where the figure came from.

    Returns:
        ``(flops, source)``: ``source`` is ``"lightning"`` (``get_available_flops``), ``"measured"``
        (a matmul, now), ``"cached"`` (a matmul measured earlier on this machine), or ``"none"``
        with ``flops`` None when neither works.
    """
    import warnings

    import torch
    from lightning.fabric.utilities.throughput import get_available_flops

    dtype = precision_dtype(precision)  # for float32 on CUDA, get_available_flops reads the matmul precision (tf32)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            known = get_available_flops(device, getattr(torch, dtype))
        except Exception:  # an unknown device or dtype
            known = None
    if known:
        return float(known), "lightning"
    key = _device_key(device, dtype)
    path = _cache_path()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return float(cache[key]), "cached"
    try:
        value = measure_matmul_flops(device, dtype)
    except Exception:  # the dtype cannot multiply on this device
        return None, "none"
    cache[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
    except OSError:
        pass
    return value, "measured"
