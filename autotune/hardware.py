"""What this machine can run: devices, cores and native precisions.

The probe imports torch, so it runs in a child process (``python -m autotune.target inspect``): the
parent of the trials never initialises CUDA. :class:`Hardware` is plain data and the filtering rules
here are pure functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Hardware", "cores_per_device", "cpu_bf16_native", "cpu_flags", "probe_hardware", "unsupported_precisions"]

#: ``/proc/cpuinfo`` flags of the instructions that multiply bfloat16 natively: x86's AVX512-BF16 (Cooper
#: Lake, Zen 4 and later) and AMX-BF16 (Sapphire Rapids and later); Arm's BF16 extension (Armv8.6).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


@dataclass(frozen=True)
class Hardware:
    """A machine as seen by one trial.

    Attributes:
        accelerator: ``"gpu"`` when CUDA devices are visible, else ``"cpu"``.
        device_count: CUDA devices visible (0 on a CPU-only machine).
        device_name: Name of device 0 (``torch.cuda.get_device_name``), or ``"cpu"``.
        cpu_count: CPU cores this process may run on (``os.sched_getaffinity``).
        bf16_supported: Whether bfloat16 runs natively on the accelerator (on a CPU: whether it has
            bfloat16 instructions, :func:`cpu_bf16_native`).
        device_memory_gib: Memory of device 0 in GiB (RAM on a CPU-only machine).
        torch_version: ``torch.__version__``.
        lightning_version: ``lightning.__version__``.
    """

    accelerator: str
    device_count: int
    device_name: str
    cpu_count: int
    bf16_supported: bool
    device_memory_gib: float
    torch_version: str = ""
    lightning_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Hardware:
        return cls(**values)

    def describe(self) -> str:
        """One line such as ``"cpu x1 (2 cores)"`` or ``"2x NVIDIA H200 (139.8 GiB)"``."""
        if self.accelerator == "cpu":
            return f"cpu ({self.cpu_count} cores, {self.device_memory_gib:.0f} GiB RAM)"
        return f"{self.device_count}x {self.device_name} ({self.device_memory_gib:.1f} GiB)"


def available_cpu_count() -> int:
    """CPU cores this process may run on (affinity-aware), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def cores_per_device(hardware: Hardware, devices: int) -> int:
    """CPU cores available to each device's process, at least 1: ``cpu_count // devices``."""
    return max(1, hardware.cpu_count // max(1, devices))


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from ``cpuinfo``, or ``None`` when
    the file cannot be read (not Linux) or lists none."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return None


def cpu_bf16_native(flags: set[str] | None, torch_check: bool | None = None) -> bool:
    """Whether a CPU multiplies bfloat16 natively (pure).

    Without such instructions PyTorch still runs bfloat16 on the CPU, emulated by converting to
    float32 and back, which is slower than float32 itself: a search would only spend trials on it.

    Args:
        flags: The CPU's feature flags (:func:`cpu_flags`), or ``None`` when unknown.
        torch_check: PyTorch's own answer (``torch.cpu._is_avx512_bf16_supported()``), or ``None``
            when this torch has none; used only when ``flags`` is unknown.

    Returns:
        True when a flag of :data:`BF16_CPU_FLAGS` is set; with unknown flags, PyTorch's answer, and
        True when neither is known (a trial then measures it).
    """
    if flags is not None:
        return any(flag in flags for flag in BF16_CPU_FLAGS)
    return True if torch_check is None else torch_check


def unsupported_precisions(hardware: Hardware) -> dict[str, str]:
    """Precisions this machine does not run natively, each with the reason.

    On CPU, Lightning silently replaces ``"16-mixed"`` by ``"bf16-mixed"`` (its accelerator
    connector logs a line and goes on), so keeping both would run the same thing twice and record
    the wrong name. On a CPU without bfloat16 instructions, and on a GPU without bfloat16 (before
    Ampere), the ``bf16`` precisions are removed.

    Returns:
        Mapping from Lightning precision string to a one-line reason.
    """
    removed: dict[str, str] = {}
    if hardware.accelerator == "cpu":
        removed["16-mixed"] = "Lightning runs '16-mixed' as 'bf16-mixed' on CPU"
        if not hardware.bf16_supported:
            for name in ("bf16-mixed", "bf16-true"):
                removed[name] = "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): bfloat16 runs emulated, slower than float32"
    elif not hardware.bf16_supported:
        for name in ("bf16-mixed", "bf16-true"):
            removed[name] = f"{hardware.device_name} has no native bfloat16"
    return removed


def probe_hardware() -> Hardware:
    """Probe this machine with torch (call only in a child process: it may initialise CUDA)."""
    import lightning
    import torch

    cpu_count = available_cpu_count()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Hardware(
            accelerator="gpu",
            device_count=torch.cuda.device_count(),
            device_name=torch.cuda.get_device_name(0),
            cpu_count=cpu_count,
            bf16_supported=bool(torch.cuda.is_bf16_supported()),
            device_memory_gib=props.total_memory / 2**30,
            torch_version=torch.__version__,
            lightning_version=lightning.__version__,
        )
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        ram = 0.0
    return Hardware(
        accelerator="cpu",
        device_count=0,
        device_name="cpu",
        cpu_count=cpu_count,
        bf16_supported=cpu_bf16_native(cpu_flags(), _torch_cpu_bf16(torch)),
        device_memory_gib=ram,
        torch_version=torch.__version__,
        lightning_version=lightning.__version__,
    )


def _torch_cpu_bf16(torch: Any) -> bool | None:
    """PyTorch's own test for AVX512-BF16 (a private function, absent from some builds), or ``None``."""
    check = getattr(getattr(torch, "cpu", None), "_is_avx512_bf16_supported", None)
    try:
        return bool(check()) if check is not None else None
    except Exception:  # a build without the CPU capability probe
        return None
