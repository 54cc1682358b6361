"""How busy the host was while a trial trained: load average, CPU taken by other work, steal, other GPU processes.

A trial's samples/s is only the config's speed when the trial had the machine to itself. On a shared
machine the same config measured 10x apart from one run to the next, and nothing in a trial said so.
:class:`HostLoadProbe` runs in each rank of a trial (:mod:`autotune.callback`) and samples the host at
the start of training and at the end of the measured window (or when the rank fails):

- ``/proc/stat``: the jiffies (``USER_HZ`` ticks) the trial's usable CPUs (its ``sched_getaffinity``
  set) spent busy (``user + nice + system + irq + softirq + steal``; ``guest`` time is already in
  ``user``) and in all states;
- ``/proc/<pid>/stat`` of every process of the trial's session (``utime + stime + cutime + cstime``):
  the trial's own process tree, its DDP ranks and DataLoader workers included (each trial runs in a
  session of its own, see :mod:`autotune.runner`; a finished child's time moves into its parent's
  ``cutime``, so it stays counted);
- ``os.getloadavg()`` at the end, and on CUDA the processes NVML lists on the rank's GPU.

:func:`host_load_figures` turns two samples into the figures (pure, tested on fixed ``/proc/stat``
text), and :func:`merge_host_load` keeps the busiest rank's for the trial. psutil is not a dependency,
so Linux's files are read directly; NVML is read through ``pynvml`` (``pip install -e ".[nvml]"``,
the ``nvidia-ml-py`` package) only where it is importable. Elsewhere (macOS, Windows, no NVML) a
figure that cannot be measured is ``None``, never an error.

Importing this module loads neither torch nor Lightning.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

__all__ = [
    "BUSY_CORE_FRACTION",
    "HOST_LOAD_KEYS",
    "CpuTimes",
    "HostLoad",
    "HostLoadProbe",
    "HostSample",
    "busy_cores",
    "core_busy_fractions",
    "gpu_other_processes",
    "host_load_figures",
    "merge_host_load",
    "other_gpu_process_count",
    "parse_proc_stat",
    "session_jiffies",
]

#: The trial user attributes that hold the host's load (see :class:`HostLoad`).
HOST_LOAD_KEYS = ("host_load", "host_cpus", "other_cpu_fraction", "steal_fraction", "gpu_other_processes")

#: Fewest jiffies the usable CPUs must count over the window for the CPU fractions to be given: at
#: ``USER_HZ`` = 100, half a CPU-second (0.25 s on 2 CPUs). Each counter is sampled to one tick, so
#: over a shorter window a fraction would be mostly rounding; it is ``None`` instead.
MIN_WINDOW_JIFFIES = 50

#: ``/proc/stat`` columns after the CPU's name, in the kernel's order (older kernels stop earlier).
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
#: Columns counted as busy: iowait is idle time, and guest time is already in user (guest_nice in nice).
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


class HostLoad(TypedDict):
    """The host's load while a trial trained (a rank report's ``host``, and the trial's user attributes).

    Attributes:
        host_load: The 1-minute load average at the end of the window (runnable and uninterruptible
            tasks, all of the host's CPUs; >= 0; compare with ``host_cpus``), or ``None``.
        host_cpus: CPUs of the host (``os.cpu_count()``), >= 1, or ``None``.
        other_cpu_fraction: CPU time that other work (processes outside the trial's session, the
            kernel's interrupts, the hypervisor's steal) took on the CPUs the trial could use, over
            wall time x those CPUs, during the window: 0 (the trial had them to itself) .. 1 (others
            took all of it); ``None`` off Linux or for a window under :data:`MIN_WINDOW_JIFFIES`.
        steal_fraction: The part of that which the hypervisor gave other virtual machines (``steal``
            jiffies over all jiffies of those CPUs), 0..1, or ``None``.
        gpu_other_processes: Processes outside the trial's session on the rank's GPU at the end of the
            window (NVML), >= 0; ``None`` on a CPU or without NVML.
    """

    host_load: float | None
    host_cpus: int | None
    other_cpu_fraction: float | None
    steal_fraction: float | None
    gpu_other_processes: int | None


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies (``USER_HZ`` ticks, usually 1/100 s) of a set of CPUs since boot, from ``/proc/stat``.

    Attributes:
        busy: ``user + nice + system + irq + softirq + steal``.
        steal: Time the hypervisor ran something else while these virtual CPUs wanted to run.
        total: Every state (``guest`` and ``guest_nice`` not counted again).
    """

    busy: int
    steal: int
    total: int


@dataclass(frozen=True)
class HostSample:
    """The counters of one instant (see :func:`host_load_figures`).

    Attributes:
        cpu: The usable CPUs' jiffies.
        own: Jiffies the trial's session used since its processes started (``utime + stime + cutime + cstime``).
    """

    cpu: CpuTimes
    own: int


def parse_proc_stat(text: str, cpus: Collection[int] | None = None) -> CpuTimes:
    """The jiffies of some CPUs from the text of ``/proc/stat`` (pure).

    Args:
        text: The file's contents.
        cpus: CPU numbers to add up (their ``cpuN`` lines; numbers without a line, offline CPUs, are
            skipped), or ``None`` for the aggregate ``cpu`` line (all CPUs).

    Returns:
        Their :class:`CpuTimes`.

    Raises:
        ValueError: The text has no line for any of ``cpus`` (or no ``cpu`` line).
    """
    wanted = None if cpus is None else {f"cpu{n}" for n in cpus}
    busy = steal = total = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or (name != "cpu" if wanted is None else name not in wanted):
            continue
        values = dict(zip(_STAT_FIELDS, (int(v) for v in rest.split())))
        busy += sum(values.get(k, 0) for k in _BUSY_FIELDS)
        steal += values.get("steal", 0)
        total += sum(v for k, v in values.items() if k not in ("guest", "guest_nice"))
        found = True
    if not found:
        raise ValueError(f"/proc/stat has no line for CPUs {sorted(cpus) if cpus is not None else 'all'!r}")
    return CpuTimes(busy=busy, steal=steal, total=total)


#: A core counts as busy with other work when it was busy this share of a quiet moment's window
#: (:func:`busy_cores`): a process pinned to it or hogging it (a loop at 100% measures 97-100% here).
BUSY_CORE_FRACTION = 0.75


def core_busy_fractions(before: str, after: str, cpus: Collection[int]) -> dict[int, float]:
    """Each core's busy share between two readings of ``/proc/stat`` (pure).

    Args:
        before, after: The file's text at the start and the end of the window.
        cpus: The cores to measure; one without a line in both texts (offline) is left out.

    Returns:
        ``{core: busy jiffies / all jiffies}`` in ``[0, 1]`` (a core that counted no jiffy is left out).
    """
    shares = {}
    for cpu in cpus:
        try:
            start, end = parse_proc_stat(before, [cpu]), parse_proc_stat(after, [cpu])
        except ValueError:
            continue
        total = end.total - start.total
        if total > 0:
            shares[cpu] = min(1.0, max(0.0, (end.busy - start.busy) / total))
    return shares


def busy_cores(cpus: Collection[int], window: float = 0.3, threshold: float = BUSY_CORE_FRACTION) -> dict[int, float]:
    """The cores other work keeps busy now: ``{core: busy share}`` of those at or above ``threshold``.

    Measured over ``window`` seconds in which the calling process sleeps (call it before starting any
    child, so that the busy time is other work's). Empty where ``/proc/stat`` cannot be read (not Linux).

    Args:
        cpus: The cores to look at (the process's usable ones).
        window: Seconds to measure (> 0; 0.3 s is 30 jiffies a core at ``USER_HZ`` = 100).
        threshold: Busy share from which a core counts, in ``(0, 1]``.
    """
    import time

    try:
        with open("/proc/stat") as f:
            before = f.read()
        time.sleep(window)
        with open("/proc/stat") as f:
            after = f.read()
    except OSError:
        return {}
    return {c: share for c, share in core_busy_fractions(before, after, cpus).items() if share >= threshold}


def _stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` text from the third (the state) on: the command name, in
    parentheses, may hold spaces and parentheses itself, so the text is cut at its last ``)``."""
    return text.rsplit(")", 1)[1].split()


def session_jiffies(session: int, proc: str = "/proc") -> int:
    """CPU jiffies of every process of a session: ``utime + stime + cutime + cstime`` summed.

    ``cutime``/``cstime`` hold the time of children the process has waited for (with their own
    waited-for children), so a DataLoader worker or DDP rank that ended during the window still counts.
    (A child that left the session, with ``setsid``, and was waited for by one of its processes counts
    too, from then on.)

    Args:
        session: The session id (``os.getsid(0)`` in a trial, which leads its own session).
        proc: Where procfs is mounted.

    Returns:
        Jiffies (``USER_HZ`` ticks), >= 0.

    Raises:
        OSError: ``proc`` cannot be listed (not Linux).
    """
    total = 0
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/stat") as f:
                fields = _stat_fields(f.read())
        except (OSError, IndexError):  # the process ended meanwhile
            continue
        # fields[k - 3] is field k of proc(5): session is 6; utime, stime, cutime, cstime are 14..17
        if len(fields) > 14 and int(fields[3]) == session:
            total += sum(int(v) for v in fields[11:15])
    return total


def _session_pids(session: int, proc: str = "/proc") -> set[int]:
    pids = set()
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/stat") as f:
                if int(_stat_fields(f.read())[3]) == session:
                    pids.add(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def host_load_figures(start: HostSample, end: HostSample) -> dict[str, float | None]:
    """``other_cpu_fraction`` and ``steal_fraction`` of the window between two samples (pure).

    Other work's CPU time is what the usable CPUs spent busy minus what the trial's session used:
    ``(busy_end - busy_start) - (own_end - own_start)``, over the CPUs' jiffies in every state, which
    is wall time x usable CPUs (in ``USER_HZ`` ticks; the unit cancels). Counters read a moment apart
    can make it a tick below 0 or above 1: it is clipped to 0..1.

    Args:
        start: The sample at the start of the window.
        end: The sample at its end.

    Returns:
        ``other_cpu_fraction`` and ``steal_fraction`` (0..1), both ``None`` when the CPUs counted fewer
        than :data:`MIN_WINDOW_JIFFIES` jiffies between the samples.
    """
    total = end.cpu.total - start.cpu.total
    if total < MIN_WINDOW_JIFFIES:
        return {"other_cpu_fraction": None, "steal_fraction": None}
    other = (end.cpu.busy - start.cpu.busy) - (end.own - start.own)
    steal = end.cpu.steal - start.cpu.steal
    return {
        "other_cpu_fraction": min(1.0, max(0.0, other / total)),
        "steal_fraction": min(1.0, max(0.0, steal / total)),
    }


def other_gpu_process_count(gpu_pids: Iterable[int], own_pids: Collection[int]) -> int:
    """Processes on a GPU that are not the trial's (pure).

    NVML lists process ids as the host sees them: inside a container with its own PID namespace none of
    them is one of the trial's, although the rank itself has a context on the GPU; then one of the
    listed processes is taken for the rank's own.

    Args:
        gpu_pids: The process ids NVML lists on the GPU (compute and graphics).
        own_pids: The process ids of the trial's session.

    Returns:
        The count, >= 0.
    """
    listed = set(gpu_pids)
    if listed & set(own_pids):
        return len(listed - set(own_pids))
    return max(0, len(listed) - 1)


def gpu_other_processes(device_index: int, session: int) -> int | None:
    """Processes outside the trial's session on CUDA device ``device_index`` (NVML), or ``None`` where
    that cannot be read (``pynvml`` not installed, no driver, a device NVML does not list)."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]  # nvidia-ml-py: optional (autotune[nvml])
    except ImportError:
        return None
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device_index).uuid)  # the same GPU whatever CUDA_VISIBLE_DEVICES says
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
            processes = [*pynvml.nvmlDeviceGetComputeRunningProcesses(handle), *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError, a torch without uuid, ...: a figure not measured is None
        return None
    return other_gpu_process_count((p.pid for p in processes), _session_pids(session))


def _usable_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


class HostLoadProbe:
    """Samples the host at the start and the end of a rank's measured window (see the module docstring).

    Args:
        proc: Where procfs is mounted (a test's fake tree; ``/proc``).
    """

    def __init__(self, proc: str = "/proc"):
        self.proc = proc
        self.session = 0
        self.cpus: set[int] | None = None
        self.started = False
        self._start: HostSample | None = None
        self._report: HostLoad | None = None

    def _sample(self) -> HostSample | None:
        try:
            with open(f"{self.proc}/stat") as f:
                cpu = parse_proc_stat(f.read(), self.cpus)
            return HostSample(cpu=cpu, own=session_jiffies(self.session, self.proc))
        except (OSError, ValueError):  # no procfs: not Linux
            return None

    def start(self) -> None:
        """Sample at the start of the window (the session and the usable CPUs are this process's now)."""
        self.started, self._report = True, None
        self.session = os.getsid(0) if hasattr(os, "getsid") else 0
        self.cpus = _usable_cpus()
        self._start = self._sample()

    def stop(self, cuda_device: int | None = None) -> None:
        """Sample at the end of the window; nothing before :meth:`start`, and a second call keeps the first end.

        Args:
            cuda_device: The rank's CUDA device index (its other processes are counted), or ``None`` on a CPU.
        """
        if not self.started or self._report is not None:
            return
        end = self._sample() if self._start is not None else None
        fractions = host_load_figures(self._start, end) if self._start is not None and end is not None else {}
        try:
            load: float | None = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows
            load = None
        self._report = {
            "host_load": load,
            "host_cpus": os.cpu_count(),
            "other_cpu_fraction": fractions.get("other_cpu_fraction"),
            "steal_fraction": fractions.get("steal_fraction"),
            "gpu_other_processes": gpu_other_processes(cuda_device, self.session) if cuda_device is not None else None,
        }

    def report(self) -> HostLoad | None:
        """The figures once :meth:`stop` ran, else ``None`` (never started, or not stopped)."""
        return self._report


def merge_host_load(ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The trial's host load from its ranks' reports (pure).

    Every rank samples its own host; a trial is as disturbed as its most disturbed rank, so the
    figures are those of the rank with the highest ``other_cpu_fraction`` (the first that measured
    one, else the first with figures), and ``gpu_other_processes`` is the most any rank's GPU had.

    Args:
        ranks: Rank reports (:class:`autotune.rank_report.RankReport`), ``ok`` or failed; their ``host``.

    Returns:
        The :data:`HOST_LOAD_KEYS` (``None`` where not measured), or ``{}`` when no rank measured (it
        failed before training, or was killed).
    """
    measured = [r["host"] for r in ranks if r.get("host")]
    if not measured:
        return {}
    busiest = max(measured, key=lambda h: -1.0 if h.get("other_cpu_fraction") is None else h["other_cpu_fraction"])
    gpus = [h["gpu_other_processes"] for h in measured if h.get("gpu_other_processes") is not None]
    merged = {key: busiest.get(key) for key in HOST_LOAD_KEYS}
    merged["gpu_other_processes"] = max(gpus) if gpus else None
    return merged
