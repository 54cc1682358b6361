"""A search run's outstanding budget, recorded in the study so that every process sees it.

A ``search`` run adds ``--trials`` trials, but not all at once: a new study's trials wait for the
baseline, and a staged search queues stage 2 round by round from stage 1's results. What the run has
still to add lives in its *plan*, a study system attribute ``autotune:plan:<run id>`` that the run
rewrites as it queues trials and refreshes every heartbeat interval (``$AUTOTUNE_HEARTBEAT_INTERVAL``,
10 s) while its process lives. So:

- an ``autotune worker`` waits (polling, not spinning) while the queue is empty but a live run can
  still add trials, and stops when none can (a run that ended, was stopped, or whose heartbeat is
  older than ``$AUTOTUNE_HEARTBEAT_GRACE``, 60 s: a killed process);
- Ctrl-C or SIGTERM stores the run's rest as ``interrupted`` (its interrupted trials are queued again),
  and the next ``autotune search`` on the study continues it in its own search mode, as it does the
  rest of a run whose process was killed.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from autotune.optuna_compat import set_study_system_attr, study_system_attrs
from autotune.storage import heartbeat_seconds

#: Prefix of the study system attribute that holds one search run's plan (the run id follows).
PLAN_ATTR = "autotune:plan:"


class _Plan:
    """The outstanding budget of one ``search`` run (see the module docstring).

    Attributes:
        search: ``staged`` or ``flat``.
        seeds: ``(params, user attributes)`` of held-back trials to queue first (a staged run's stage-1 configs).
        held: Trials held back until the baseline has completed (>= len(seeds)).
        full: Stage-2 trials (``staged``) not queued yet (>= 0).
        trials: The run's ``--trials`` (for the messages and the resume command).
        confirm_left: Confirmation runs (``--confirm``) the run has still to queue after its search (>= 0).
        racing: The run is racing (its confirmation started and has not ended).
    """

    def __init__(self, study, run_id: str, search: str, trials: int):
        self.study, self.run_id, self.search, self.trials = study, run_id, search, trials
        self.seeds: list[tuple[dict, dict]] = []
        self.held = 0
        self.full = 0
        self.confirm_left = 0
        self.racing = False  # in its confirmation's races: a stop there is resumed by the search (queue._resume)
        self.flags: list[str] = []  # the run's own flags, for its resume command (options.run_flags)
        self.state = "running"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def left(self) -> int:
        """Trials the run has still to add to the queue."""
        return self.held + self.full

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "search": self.search,
            "state": self.state,
            "seeds": [[params, attrs] for params, attrs in self.seeds],
            "held": self.held,
            "full": self.full,
            "trials": self.trials,
            "beat": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def save(self) -> None:
        """Write the plan to the study (with a fresh heartbeat)."""
        with self._lock:
            set_study_system_attr(self.study, PLAN_ATTR + self.run_id, self.to_dict())

    def hold(self, seeds: Sequence[tuple[dict, dict]], held: int) -> None:
        """Record the trials now held back (``seeds`` first, ``held`` in all) and save."""
        self.seeds, self.held = list(seeds), held
        self.save()

    def start(self) -> None:
        """Save the plan and refresh its heartbeat in a daemon thread until :meth:`end`."""
        self.save()
        interval = heartbeat_seconds()[0]

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    self.save()
                except Exception:  # a database outage: the next beat tries again
                    pass

        self._thread = threading.Thread(target=beat, name="autotune-plan-heartbeat", daemon=True)
        self._thread.start()

    def end(self, state: str) -> None:
        """Stop the heartbeat and store the plan as ``state`` (``done``, ``interrupted``, ``failed``);
        a plan that has ended already stays as it is."""
        if self.state != "running":
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.state = state
        self.save()


def _plans(study) -> list[dict[str, Any]]:
    """Every search run's stored plan, oldest first."""
    attrs = study_system_attrs(study)
    return sorted((value for key, value in attrs.items() if key.startswith(PLAN_ATTR)), key=lambda p: p.get("beat", 0.0))


def _alive(plan: dict[str, Any], now: float | None = None) -> bool:
    """Whether a ``running`` plan's process sent a heartbeat within the grace period."""
    return plan.get("state") == "running" and (now or time.time()) - float(plan.get("beat", 0.0)) < heartbeat_seconds()[1]


def live_runs(study, exclude: str | None = None) -> list[dict[str, Any]]:
    """The plans of search runs that are alive (they may still add trials), but ``exclude`` (a run id)."""
    return [p for p in _plans(study) if p.get("run") != exclude and _alive(p)]


def same_host_line(study, cores: int) -> str | None:
    """One line when a live search run of ``study`` runs trials on this machine (its plan's ``host``):
    a worker beside it shares the machine's ``cores``, and each one's samples/s then measures the
    other's load (a new user's two workers beside their search on 2 cores measured the baseline's
    config at 195 samples/s against 2,874 alone). ``None`` otherwise."""
    here = socket.gethostname()
    mine = [p for p in live_runs(study) if p.get("host") == here and p.get("pid") != os.getpid()]
    if not mine:
        return None
    runs = ", ".join(f"run {p['run']} (pid {p.get('pid')})" for p in mine)
    return (
        f"a search run of this study runs trials on this machine too ({runs}): with this worker they share its {cores} core(s), "
        "so each trial's samples/s measures the other's load as much as its config; on one machine run one process "
        "(`autotune search --jobs N` runs N trials at once on separate cores) and workers on other machines"
    )


def stopped_runs(study) -> list[dict[str, Any]]:
    """The plans a new search continues: runs stopped by Ctrl-C or SIGTERM (``interrupted``), and
    ``running`` runs whose heartbeat went stale (their process was killed or lost its machine)."""
    return [p for p in _plans(study) if p.get("state") == "interrupted" or (p.get("state") == "running" and not _alive(p))]


def _take_over(study, plan: dict[str, Any], by: str) -> None:
    """Mark a stopped run's plan as continued by run ``by`` (no other search continues it again)."""
    set_study_system_attr(study, PLAN_ATTR + plan["run"], {**plan, "state": "continued", "by": by})


def continue_line(plans: Sequence[dict[str, Any]], queued: int) -> str:
    """The one line that says a search continues stopped runs instead of adding ``--trials`` more."""
    parts = []
    for p in plans:
        why = (
            "interrupted"
            if p.get("state") == "interrupted"
            else f"its process stopped sending heartbeats at {time.strftime('%H:%M:%S', time.localtime(p.get('beat', 0)))}"
        )
        stage2 = f", {p['full']} stage-2 run(s) to add" if p.get("full") else ""
        parts.append(
            f"the {p.get('search')} search run {p['run']} of --trials {p.get('trials')} ({why}; {p.get('held', 0)} trial(s) held back{stage2})"
        )
    return (
        f"continuing {'; '.join(parts)}, with the {queued} trial(s) it left queued, instead of adding --trials more "
        "(run the same command again afterwards to add them)"
    )
