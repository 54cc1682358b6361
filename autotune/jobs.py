"""Job slots: where parallel trials run (``--jobs``), and the warm process each slot forks from.

With ``--jobs N`` up to N trials run at once, each in its own *slot*: on a GPU machine a disjoint
group of ``devices`` GPUs (``CUDA_VISIBLE_DEVICES``), on a CPU-only machine a disjoint set of cores
(CPU affinity, inherited by the trial's ranks and loader workers, and torch's thread count), so that
parallel trials do not distort each other's throughput. Memory bandwidth, caches and the disk are
still shared: such trials are flagged ``shared_host`` on the study.

A one-job run on a CPU-only machine leaves out the cores other work keeps busy when the run starts
(:func:`measure_busy_cores`), when enough are left for its devices: torch's threads then run on cores
they have to themselves. One thread per core, an op's threads wait for the slowest: beside a busy loop
on one of 2 cores, digits' baseline measured 643 samples/s on both cores against 10,420 on a quiet
machine (its runs then moved 0.3x to 5x from one to the next).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.hardware import Hardware

__all__ = [
    "ALLOTMENT_ATTR",
    "ENV_BUSY_CORES",
    "ENV_OVERSUBSCRIBE",
    "Slot",
    "SlotPools",
    "ahead",
    "keep_allotment",
    "keep_cores",
    "machine_slots",
    "measure_busy_cores",
    "oversubscribe",
    "plan_slots",
    "prestart",
    "study_allotment",
    "this_run_cores",
    "usable_cpus",
]


@dataclass(frozen=True)
class Slot:
    """One place a trial runs.

    Attributes:
        index: 0-based slot number.
        env: Environment given to the slot's trials (``AUTOTUNE_CPUS`` and/or ``CUDA_VISIBLE_DEVICES``).
        description: One line for the output, e.g. ``"job 0: cores 0-7"``.
    """

    index: int
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""


def _span(values: list[int]) -> str:
    return (
        f"{values[0]}-{values[-1]}" if len(values) > 1 and values == list(range(values[0], values[-1] + 1)) else ",".join(map(str, values))
    )


def _cores(values: list[int]) -> str:
    """``"core 1"``, ``"cores 0-3"``."""
    return f"core{'s' if len(values) > 1 else ''} {_span(values)}"


#: Environment variable that lets a CPU machine run more trial processes than it has cores
#: (``--jobs`` x ``--devices``): ``1`` runs them anyway, sharing cores (their figures then measure the sharing).
ENV_OVERSUBSCRIBE = "AUTOTUNE_OVERSUBSCRIBE"


def oversubscribe() -> bool:
    """Whether ``$AUTOTUNE_OVERSUBSCRIBE`` is set (to anything but ``""`` or ``0``)."""
    return os.environ.get(ENV_OVERSUBSCRIBE, "") not in ("", "0")


def usable_cpus() -> list[int]:
    """The CPU cores this process may run on (``os.sched_getaffinity``; every core where that is missing)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def plan_slots(
    hardware: Hardware,
    devices: int,
    jobs: int,
    cpus: list[int],
    oversubscribe: bool = False,
    busy: Mapping[int, float | str | None] | None = None,
) -> list[Slot]:
    """Split the machine into ``jobs`` disjoint slots (pure).

    One rule for ``--jobs`` and ``--devices``: the ``jobs * devices`` processes that run at once need
    a device each, a GPU on a GPU machine, a core on a CPU-only one (a trial's DataLoader workers are
    not counted: they wait on I/O as often as they compute).

    Args:
        hardware: The machine.
        devices: Devices per trial (>= 1).
        jobs: Trials at once (>= 1).
        cpus: The CPU cores this process may use (:func:`usable_cpus`).
        oversubscribe: On CPU, allow more processes than cores (:data:`ENV_OVERSUBSCRIBE`): the
            slots then share cores, each taking ``max(1, len(cpus) // jobs)`` of them in turn.
        busy: ``{core: busy share or None}`` of the cores other work keeps busy (:func:`measure_busy_cores`),
            or ``{core: why}`` of the cores a resumed study leaves out (:func:`keep_cores`).

    Returns:
        ``jobs`` slots. With one job, the slot has the whole machine and no restriction, except on a
        CPU-only machine with ``busy`` cores: then the other cores, when at least ``devices`` are left.

    Raises:
        UsageError: ``jobs < 1``; more jobs than GPU groups (``device_count // devices``); or, on
            CPU without ``oversubscribe``, ``jobs * devices`` above the number of cores.
    """
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    if hardware.accelerator != "gpu" and jobs * devices > len(cpus) and not oversubscribe:
        fix = "lower --jobs or --devices" if jobs > 1 else f"give --devices {len(cpus)} or fewer"
        raise UsageError(
            f"--jobs {jobs} with --devices {devices} needs {jobs * devices} CPU cores (one per trial process); this process may "
            f"use {len(cpus)}: {fix}, or set {ENV_OVERSUBSCRIBE}=1 to run them on shared cores"
        )
    if jobs == 1:
        free = [c for c in cpus if c not in (busy or {})]
        if hardware.accelerator == "gpu" or not busy or len(free) < devices or len(free) == len(cpus):
            return [Slot(0, {}, "one job: the whole machine")]
        taken = sorted(c for c in cpus if c in busy)
        env = {"AUTOTUNE_CPUS": ",".join(map(str, free))}
        why = next((share for c in taken if isinstance(share := busy[c], str)), None)
        if why is not None:  # left out to keep a study's allotment (keep_cores), not measured busy
            return [Slot(0, env, f"one job: {_cores(free)} ({_cores(taken)} left out: {why})")]
        shares = "given in $" + ENV_BUSY_CORES if any(busy[c] is None for c in taken) else ", ".join(f"{busy[c]:.0%}" for c in taken)
        return [Slot(0, env, f"one job: {_cores(free)} ({_cores(taken)} busy with other work: {shares})")]
    slots = []
    if hardware.accelerator == "gpu":
        groups = hardware.device_count // devices
        if jobs > groups:
            raise UsageError(
                f"--jobs {jobs} with --devices {devices} needs {jobs * devices} GPUs; this machine has {hardware.device_count} (at most --jobs {max(1, groups)})"
            )
        cores_each = max(1, len(cpus) // jobs)
        for j in range(jobs):
            gpus = list(range(j * devices, (j + 1) * devices))
            mine = cpus[j * cores_each : (j + 1) * cores_each] or cpus
            env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "AUTOTUNE_CPUS": ",".join(map(str, mine))}
            slots.append(Slot(j, env, f"job {j}: GPUs {_span(gpus)}, cores {_span(mine)}"))
        return slots
    cores_each = max(1, len(cpus) // jobs)
    for j in range(jobs):
        mine = sorted({cpus[(j * cores_each + i) % len(cpus)] for i in range(cores_each)})
        slots.append(Slot(j, {"AUTOTUNE_CPUS": ",".join(map(str, mine))}, f"job {j}: cores {_span(mine)}"))
    return slots


#: The cores other work kept busy when this run started (:func:`measure_busy_cores`), or the cores
#: it leaves out to run as a study's earlier trials did (:func:`keep_cores`: ``{core: why}``).
_BUSY: dict[int, float | str | None] = {}


#: Environment variable naming the cores a run leaves out (``"3"``, ``"2,3"``) instead of measuring
#: them, or ``none`` to use every core whatever the load.
ENV_BUSY_CORES = "AUTOTUNE_BUSY_CORES"


def measure_busy_cores(window: float = 0.3) -> dict[int, float | str | None]:
    """Find the cores of this process that other work keeps busy now, for this run's :func:`machine_slots`.

    ``$AUTOTUNE_BUSY_CORES`` first (:data:`ENV_BUSY_CORES`: cores given, share ``None``; ``none``: no
    core); else measured (:func:`autotune.host_load.busy_cores`, ``window`` seconds of sleep: call it
    before any child starts).

    Returns:
        ``{core: busy share, or None when given}``.

    Raises:
        UsageError: ``$AUTOTUNE_BUSY_CORES`` is neither ``none`` nor a comma-separated list of this
            process's core numbers.
    """
    from autotune.host_load import busy_cores

    _BUSY.clear()
    given = os.environ.get(ENV_BUSY_CORES, "").strip()
    if given.lower() == "none":
        return {}
    if given:
        try:
            _BUSY.update({int(c): None for c in given.split(",")})
        except ValueError:
            raise UsageError(f"{ENV_BUSY_CORES}={given!r}: give core numbers separated by commas (2,3), or none") from None
        if not set(_BUSY) <= set(usable_cpus()):
            raise UsageError(f"{ENV_BUSY_CORES}={given!r}: this process runs on {_cores(usable_cpus())}; name some of those, or none")
        if set(_BUSY) == set(usable_cpus()):
            raise UsageError(f"{ENV_BUSY_CORES}={given!r} names every core this process runs on; leave at least one free, or give none")
    else:
        _BUSY.update(busy_cores(usable_cpus(), window))
    return dict(_BUSY)


def this_run_cores(hardware: Hardware, devices: int) -> list[int]:
    """The cores a one-job run's trials run on (:func:`machine_slots`): every core of this process, less
    those left out."""
    slot = machine_slots(hardware, devices, 1)[0]
    return sorted(int(c) for c in slot.env["AUTOTUNE_CPUS"].split(",")) if "AUTOTUNE_CPUS" in slot.env else usable_cpus()


def keep_allotment(hardware: Hardware, devices: int, earlier: Sequence[int]) -> tuple[str, str] | None:
    """Run a resumed one-job CPU study's trials on as many cores as its earlier trials ran on.

    Samples/s measured on one core and on two do not compare, and the search compares its trials
    across runs (which is fastest, what stage 2 builds on): helper-31's study ran its first trials on
    core 1 beside a busy core 0, and after a Ctrl-C resumed them on the whole machine, unsaid. Where
    this run would use more cores than ``earlier`` and those cores are still this process's, it leaves
    out the others (:func:`keep_cores`); where it has fewer (other work took a core since), it cannot.
    Call after :func:`measure_busy_cores`, before any trial; ``$AUTOTUNE_BUSY_CORES`` is left to rule.

    Args:
        hardware: The study's machine (on a GPU machine nothing is done).
        devices: Devices per trial.
        earlier: The cores the study's earlier trials ran on (the study's ``cpu_allotment``).

    Returns:
        ``("info", line)`` when the earlier cores were kept, ``("warn", line)`` when this run's trials
        run on fewer, or ``None`` when the count is the same (or nothing applies).
    """
    if hardware.accelerator == "gpu" or os.environ.get(ENV_BUSY_CORES, "").strip() or not earlier:
        return None
    earlier = sorted(int(c) for c in earlier)
    mine = this_run_cores(hardware, devices)
    if len(mine) == len(earlier):
        return None
    if len(earlier) < len(mine) and set(earlier) <= set(usable_cpus()):
        keep_cores(earlier, "as this study's earlier trials ran")
        return (
            "info",
            f"resumed study: trials run on {_cores(earlier)}, with {max(1, len(earlier) // devices)} torch thread(s) a device, as its "
            f"earlier trials did (other work kept a core busy then), so that samples/s compare across its runs; "
            f"{ENV_BUSY_CORES}=none uses every core (a new study then compares its own trials)",
        )
    if len(earlier) < len(mine):  # cores this process may not use (another machine, another affinity)
        return (
            "warn",
            f"resumed study: its earlier trials ran on {_cores(earlier)}, which this process may not use; this run's run on "
            f"{_cores(mine)}: samples/s of the two do not compare; {ENV_BUSY_CORES} names cores to leave out",
        )
    return (
        "warn",
        f"resumed study: its earlier trials ran on {_cores(earlier)}, this run's on {_cores(mine)} (other work keeps a core busy now): "
        f"samples/s of the two do not compare; {ENV_BUSY_CORES}=none runs on every core as they did (beside the busy one), "
        "or resume when the machine is as it was",
    )


#: Study attribute: the CPU cores a one-job search's trials ran on, set by its first run
#: (:func:`study_allotment`).
ALLOTMENT_ATTR = "cpu_allotment"


def study_allotment(study: Any, settings: Any, jobs: int, ui: Any) -> None:
    """Keep a resumed one-job CPU study's trials on as many cores as its earlier ones
    (:func:`keep_allotment`), and say so; a study's first run records its cores
    (:data:`ALLOTMENT_ATTR`; a study with trials from before the record is left as it is). ``study``: an
    Optuna study; ``settings``: its :class:`autotune.study.settings.StudySettings`."""
    hardware = Hardware.from_dict(settings.hardware)
    if jobs != 1 or hardware.accelerator == "gpu":
        return
    earlier = study.user_attrs.get(ALLOTMENT_ATTR)
    if earlier is None:
        if not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
            study.set_user_attr(ALLOTMENT_ATTR, this_run_cores(hardware, int(settings.devices)))
        return
    said = keep_allotment(hardware, int(settings.devices), earlier)
    if said is not None:
        (ui.info if said[0] == "info" else ui.warn)(said[1])


def keep_cores(cores: Sequence[int], why: str) -> None:
    """Leave out of this run's one-job slot every core of this process but ``cores``, saying ``why``."""
    _BUSY.clear()
    _BUSY.update({c: why for c in usable_cpus() if c not in set(cores)})


def machine_slots(hardware: Hardware, devices: int, jobs: int) -> list[Slot]:
    """:func:`plan_slots` for this process's cores, ``$AUTOTUNE_OVERSUBSCRIBE`` and the busy cores
    :func:`measure_busy_cores` found at the run's start.

    Raises:
        UsageError: As :func:`plan_slots`.
    """
    return plan_slots(hardware, devices, jobs, usable_cpus(), oversubscribe(), _BUSY)


#: Warm processes spawned ahead of a run (:func:`prestart`), by resolved model file; adopted by slot 0.
_AHEAD: dict[str, Any] = {}


def prestart(model_file: str | os.PathLike, jobs: int = 1) -> None:
    """Spawn a one-job run's warm process now, without waiting for it.

    The warm process imports torch, Lightning and the model file (seconds); spawned before the study is
    opened and read, that overlaps the two. The run's first :class:`SlotPools` for the same file adopts
    it for slot 0; one never adopted ends with this process (at exit, or with its parent). Nothing is
    spawned for ``jobs`` > 1 (slots are planned later) or twice for one file.
    """
    key = str(Path(model_file).resolve())
    if jobs != 1 or key in _AHEAD:
        return
    import atexit
    import shutil
    import tempfile

    from autotune.runner import child_env
    from autotune.warm import WarmPool

    log_dir = tempfile.mkdtemp(prefix="autotune-warm-")
    pool = WarmPool(key, child_env({}), f"{log_dir}/warm0.log")
    pool.spawn()
    _AHEAD[key] = pool

    def close() -> None:
        left = _AHEAD.pop(key, None)
        if left is not None:
            left.close()
        shutil.rmtree(log_dir, ignore_errors=True)

    atexit.register(close)


def ahead(model_file: str | os.PathLike) -> Any:
    """The warm process :func:`prestart` spawned for ``model_file`` and no run adopted yet (the model's
    inspection runs in it: :func:`autotune.runner.inspect_process`), or ``None``."""
    return _AHEAD.get(str(Path(model_file).resolve()))


def _adopt(model_file: str, slot_index: int) -> Any:
    """The warm process :func:`prestart` spawned for ``model_file``, for slot 0; else ``None``."""
    return _AHEAD.pop(str(Path(model_file).resolve()), None) if slot_index == 0 else None


class SlotPools:
    """A warm process per slot, started on first use and rebuilt when the model file changes.

    Args:
        model_file: The user's model file.
        cold: Use no warm process (``--cold``): :meth:`get` returns ``None``.
        log_dir: Folder for the warm processes' logs.
        ui: For the "rebuilding" message.
    """

    def __init__(self, model_file: str, cold: bool, log_dir: str, ui: Any = None):
        self.model_file = model_file
        self.cold = cold
        self.log_dir = log_dir
        self.ui = ui
        self._pools: dict[int, Any] = {}

    def get(self, slot: Slot):
        """The started warm pool of a slot, or ``None`` when cold."""
        if self.cold:
            return None
        from autotune.runner import child_env
        from autotune.warm import WarmPool

        pool = self._pools.get(slot.index)
        if pool is not None and pool.stale():
            if self.ui is not None:
                self.ui.info(f"{self.model_file} changed (or its warm process ended): rebuilding the warm trial process")
            pool.close()
            pool = None
        if pool is None:
            pool = _adopt(self.model_file, slot.index)
            if pool is not None:
                pool.wait_ready()
            else:
                pool = WarmPool(self.model_file, child_env({}), f"{self.log_dir}/warm{slot.index}.log")
                pool.start()
            self._pools[slot.index] = pool
        return pool

    def start_all(self, slots: list[Slot]) -> None:
        """Start every slot's warm process at once (they import in parallel); no-op when cold."""
        if self.cold:
            return
        from autotune.runner import child_env
        from autotune.warm import WarmPool

        fresh = []
        for slot in slots:
            if slot.index not in self._pools:
                pool = _adopt(self.model_file, slot.index)
                if pool is None:
                    pool = WarmPool(self.model_file, child_env({}), f"{self.log_dir}/warm{slot.index}.log")
                    pool.spawn()
                self._pools[slot.index] = pool
                fresh.append(pool)
        for pool in fresh:
            pool.wait_ready()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
