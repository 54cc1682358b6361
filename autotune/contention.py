"""Sentences on contention: a trial that ran on a busy machine, the run's busiest trial, one trial's host load.

The figures are the trial user attributes of :mod:`autotune.host_load` (``host_load``, ``host_cpus``,
``other_cpu_fraction``, ``steal_fraction``, ``gpu_other_processes``). Pure functions on frozen trials
(anything with ``number``, ``state`` and ``user_attrs``), shared by the live output, the end-of-search
summary, the export header and ``autotune show``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BUSY_OTHER_CPU_FRACTION", "busy_run_line", "busy_trial_line", "host_load_line", "is_busy"]

#: A trial ran on a busy machine when other work took at least this share of the CPUs it could use
#: over its measured window (``other_cpu_fraction``, 0..1). A quarter: a CPU-bound trial then had at
#: most three quarters of the CPU time it would have had alone, so its samples/s may be a third or more
#: below the config's (1 / 0.75 = 1.33x), more than the differences between configs a search is
#: judging; below it, the scheduler's and the trial's own jitter are of the same size (a 2-core
#: machine's background daemons take a few percent).
BUSY_OTHER_CPU_FRACTION = 0.25

#: Steal below this share is not mentioned (a hypervisor takes a little from most virtual machines).
_STEAL_MENTIONED = 0.01


def is_busy(attrs: Mapping[str, Any]) -> bool:
    """Whether a trial's user attributes say it ran on a busy machine (:data:`BUSY_OTHER_CPU_FRACTION`).
    A duplicate (not run) never did."""
    fraction = attrs.get("other_cpu_fraction")
    return fraction is not None and fraction >= BUSY_OTHER_CPU_FRACTION and "duplicate_of" not in attrs


def _load(attrs: Mapping[str, Any]) -> str:
    """``"load average 3.1 on 2 cores"`` (parts unknown are left out)."""
    load, cpus = attrs.get("host_load"), attrs.get("host_cpus")
    if load is None:
        return f"{cpus} cores" if cpus else ""
    return f"load average {load:.1f}" + (f" on {cpus} cores" if cpus else "")


def _taken(attrs: Mapping[str, Any]) -> str:
    """``"other processes took 46% of the CPU (load average 3.1 on 2 cores; 5% stolen by the hypervisor)"``."""
    notes = [load] if (load := _load(attrs)) else []
    steal = attrs.get("steal_fraction")
    if steal is not None and steal >= _STEAL_MENTIONED:
        notes.append(f"{steal:.0%} stolen by the hypervisor")
    return f"other processes took {attrs['other_cpu_fraction']:.0%} of the CPU" + (f" ({'; '.join(notes)})" if notes else "")


def busy_trial_line(trial: Any) -> str | None:
    """One line when ``trial`` ran on a busy machine, else ``None``:
    ``trial 7 ran while other processes took 46% of the CPU (load average 3.1 on 2 cores): its samples/s understate this config``.

    Args:
        trial: A frozen trial with autotune's user attributes.
    """
    attrs = trial.user_attrs
    if not is_busy(attrs):
        return None
    if attrs.get("samples_per_sec") is not None:
        consequence = "its samples/s understate this config"
    else:
        consequence = "they may have slowed it"
    return f"trial {trial.number} ran while {_taken(attrs)}: {consequence}"


def busy_run_line(trials: Iterable[Any], whose: str = "") -> str | None:
    """One line for a run whose trials include some that ran on a busy machine, else ``None``: how many,
    and the busiest with its figures.

    Args:
        trials: The run's frozen trials (duplicates and trials without figures are not counted).
        whose: Words before "N trial(s) whose CPU share was measured" that say whose trials they are
            ("this run's"), or "": a trial too short for the figure (helper-29's 0.1 s windows) is not counted.
    """
    measured = [t for t in trials if t.user_attrs.get("other_cpu_fraction") is not None and "duplicate_of" not in t.user_attrs]
    busy = [t for t in measured if is_busy(t.user_attrs)]
    if not busy:
        return None
    worst = max(busy, key=lambda t: t.user_attrs["other_cpu_fraction"])
    return (
        f"busy machine: {len(busy)} of {(whose + ' ') if whose else ''}{len(measured)} trial(s) whose CPU share was measured "
        f"(a very short run has no figure) ran while other processes took >= {BUSY_OTHER_CPU_FRACTION:.0%} "
        f"of the CPU; the busiest, trial {worst.number}, ran while {_taken(worst.user_attrs)}: their samples/s understate their configs "
        "(a core that other work keeps busy can be left out of the trials with $AUTOTUNE_BUSY_CORES, docs/report.md)"
    )


def host_load_line(trial: Any) -> str | None:
    """``autotune show STUDY N``'s line on the host while trial N ran, or ``None`` when it has no figures:
    ``host while it trained: other processes 46% of the CPU, steal 0%, load average 3.1 on 2 cores (its own processes
    included), other GPU processes 0``.

    Args:
        trial: A frozen trial with autotune's user attributes.
    """
    attrs = trial.user_attrs
    if "duplicate_of" in attrs or all(attrs.get(k) is None for k in ("host_load", "other_cpu_fraction")):
        return None
    parts = []
    if attrs.get("other_cpu_fraction") is not None:
        parts.append(f"other processes {attrs['other_cpu_fraction']:.0%} of the CPU")
    if attrs.get("steal_fraction") is not None:
        parts.append(f"steal {attrs['steal_fraction']:.0%}")
    if load := _load(attrs):
        parts.append(f"{load} (its own processes included)")  # a high load beside 0% taken by others is the trial's own
    if attrs.get("gpu_other_processes") is not None:
        parts.append(f"other GPU processes {attrs['gpu_other_processes']}")
    busy = f" (busy: >= {BUSY_OTHER_CPU_FRACTION:.0%}, its samples/s understate this config)" if is_busy(attrs) else ""
    return f"host while trial {trial.number} trained: {', '.join(parts)}{busy}"
