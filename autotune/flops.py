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
  ``~/.cache/autotune/peak_flops.json`` (``AUTOTUNE_CACHE_DIR`` overrides the folder), keyed by the
  device (on a CPU: its model name and threads), the dtype and the torch version. A cached figure
  is checked by one small multiplication at each use and measured again when that runs clearly
  faster (a figure measured on a busy machine, or by another torch build); deleting the file
  re-measures every figure.
- A peak is never below what a trial achieved: :func:`autotune.measure.merge_ranks` raises it to the
  trial's model FLOP/s per device (``peak_flops_source`` ``"achieved"``), and :func:`mfu` is at most 1.
- ``mfu = flops_per_sample x samples_per_sec / (peak_per_device x devices)``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["cpu_model_name", "measure_matmul_flops", "mfu", "peak_flops", "precision_dtype"]

#: Seconds one multiplication of the peak measurement should take at least (see :func:`measure_matmul_flops`).
MATMUL_SECONDS = 0.05

#: Side of the matrices that check a cached peak (see :func:`peak_flops`): one multiplication takes
#: about 1 ms in float32 on a CPU core, 0.1 s where the dtype runs emulated.
CHECK_SIZE = 256

#: A cached peak is measured again when the check runs this many times faster (a small multiplication
#: runs below the peak; timing noise on a shared machine reaches 15%, a stale figure is off 100x).
CHECK_MARGIN = 1.5

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

    A ratio above 1 means the peak is wrong (below what the trial achieved): it is capped at 1 (the
    trial's figures raise such a peak, see :func:`autotune.measure.merge_ranks`).

    Args:
        flops_per_sample: Training FLOPs (forward + backward) per sample.
        samples_per_sec: Global training samples/s.
        peak_per_device: Peak FLOP/s of one device in the trial's dtype.
        devices: Devices of the trial (all nodes).
    """
    if not (flops_per_sample > 0 and samples_per_sec > 0 and peak_per_device > 0 and devices > 0):
        return float("nan")
    return min(1.0, flops_per_sample * samples_per_sec / (peak_per_device * devices))


def _cache_path() -> Path:
    folder = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "autotune")
    return Path(folder) / "peak_flops.json"


def cpu_model_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``), else the platform's processor or machine."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _device_key(device: Any, dtype: str) -> str:
    """The cache key of a peak: device type, its name (a CPU's model and threads), dtype and torch version
    (another CPU, thread count or torch build has another peak)."""
    import torch

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{cpu_model_name()} x{torch.get_num_threads()} threads"
    return f"{device.type}|{name}|{dtype}|torch {torch.__version__}"


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

    A cached figure is checked first by one small multiplication (:data:`CHECK_SIZE`): when that runs
    clearly faster than the cached peak (:data:`CHECK_MARGIN`), the peak is measured again (the cache
    held a figure measured on a busy machine, or by another torch build).

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
    check = 0.0
    if key in cache:
        try:
            check = measure_matmul_flops(device, dtype, size=CHECK_SIZE, repeats=2)
        except Exception:  # the check cannot run: the cached figure stands
            return float(cache[key]), "cached"
        if check <= CHECK_MARGIN * float(cache[key]):
            return float(cache[key]), "cached"
    try:  # not cached, or a small multiplication now beats the cached peak: measure it again
        value = max(measure_matmul_flops(device, dtype), check)
    except Exception:  # the dtype cannot multiply on this device
        if key not in cache:
            return None, "none"
        value = max(float(cache[key]), check)
    cache[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
    except OSError:
        pass
    return value, "measured"
