"""``autotune worker``: join an existing study, wait for it if it does not exist yet, and run its
queued trials (:func:`run_worker`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import optuna

from autotune.errors import StudyNotFoundError, UsageError
from autotune.jobs import measure_busy_cores, prestart, usable_cpus
from autotune.nodes import NodeIdentity, follow
from autotune.storage import check_writable, freeze_read_trials, mask_url, open_storage
from autotune.study.plan import same_host_line, stopped_runs
from autotune.study.queue import drain_queue
from autotune.study.records import recommendation
from autotune.study.search import SearchResult, _leader, _make_sampler, busy_cores_line
from autotune.study.settings import load_study
from autotune.ui import UI

#: Seconds a worker waits for its study to be created (``$AUTOTUNE_WORKER_WAIT``): workers may be
#: started together with the ``search`` that creates the study (docs/scaling-out.md).
WORKER_WAIT = 120.0


def _wait_for_study(study_name: str | None, storage_url: str, ui: UI):
    """:func:`load_study`, retried every second for up to ``$AUTOTUNE_WORKER_WAIT`` s (default
    :data:`WORKER_WAIT`) while the study (or its SQLite file, or its settings) does not exist yet;
    one line says the worker waits.

    Raises:
        StudyNotFoundError: Still no such study after the wait.
        StorageError, UsageError: As :func:`load_study` (not waited on), or a bad ``$AUTOTUNE_WORKER_WAIT``.
    """
    raw = os.environ.get("AUTOTUNE_WORKER_WAIT", "")
    try:
        wait = float(raw) if raw else WORKER_WAIT
    except ValueError:
        wait = -1.0
    if not wait >= 0:
        raise UsageError(f"$AUTOTUNE_WORKER_WAIT={raw!r} must be a number of seconds >= 0 (how long a worker waits for its study)")
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            return load_study(study_name, storage_url)
        except StudyNotFoundError as e:
            if time.monotonic() >= deadline:
                if not said:
                    raise
                raise StudyNotFoundError(f"{e} (after waiting {wait:g} s; $AUTOTUNE_WORKER_WAIT sets how long)") from None
            if not said:
                ui.info(f"waiting up to {wait:g} s for the study to be created ({e})")
                said = True
            time.sleep(1.0)


def run_worker(
    storage_url: str,
    study_name: str | None,
    ui: UI,
    *,
    jobs: int = 1,
    cold: bool = False,
    timeout: float | None = None,
    node_rank: int | None = None,
    node_group: str | None = None,
) -> SearchResult:
    """Join an existing study and run its queued trials (``autotune worker``).

    Every setting comes from the study. The worker stops when the study's queue is empty and no live
    ``search`` run can add trials to it any more (its shared budget is spent; see
    :mod:`autotune.study.plan`), after ``timeout`` seconds, or on Ctrl-C or SIGTERM. The model file must be at the same
    path on this machine as where the study was created (a shared file system or the same checkout).

    Raises:
        StorageError: The storage or study cannot be opened, or a SQLite database is not writable.
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C.
    """

    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout}")
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1 (trials at once), got {jobs}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    measure_busy_cores()  # before any child starts: the busy time is other work's
    study, settings = _wait_for_study(study_name, storage_url, ui)
    check_writable(storage_url)
    study = optuna.load_study(study_name=study.study_name, storage=open_storage(storage_url, create=False, heartbeat=True))
    if not Path(settings.model_file).is_file():
        raise UsageError(f"study {study.study_name!r} trains {settings.model_file!r}, which is not on this machine; use the same path here")
    # its imports overlap reading the study; not once a gRPC channel is open: forking beside gRPC's
    # threads broke the warm process's start (it is spawned later, as before)
    if not cold and (settings.num_nodes or 1) == 1 and not storage_url.startswith("grpc:"):
        prestart(settings.model_file, jobs)
    study.sampler = _make_sampler(settings, len(study.get_trials(deepcopy=False)) + os.getpid())
    busy_cores_line(settings, jobs, ui)
    freeze_read_trials()
    n = len(study.get_trials(deepcopy=False))
    ui.info(f"worker on study {study.study_name!r} in {mask_url(storage_url)} ({n} trial{'' if n == 1 else 's'} so far)")
    shared = same_host_line(study, len(usable_cpus())) if settings.hardware.get("accelerator", "cpu") == "cpu" else None
    if shared:
        ui.warn(shared)
    leader = _leader(study, settings, node_rank, node_group, "autotune worker", ui)
    if leader is not None and jobs != 1:  # a multi-node study (either end of it)
        raise UsageError(f"--jobs {jobs}: a multi-node trial takes whole nodes; use --jobs 1")

    if isinstance(leader, NodeIdentity):  # a node other than 0: run its ranks of the leader's trials
        ui.info(f"node {leader.node_rank} of group {leader.group!r}: following node 0's trials")
        ran = follow(study, leader, ui, devices=int(settings.devices), timeout=timeout)
        recommended, baseline = recommendation(study, settings)
        return SearchResult(study.study_name, storage_url, ran, recommended, baseline, None, study)
    ran = drain_queue(
        study, settings, ui, add=0, jobs=jobs, cold=cold, storage_url=storage_url, timeout=timeout, leader=leader, follow_runs=True
    )
    for old in stopped_runs(study):  # what no worker can run: say so, and how to get it
        left = int(old.get("held", 0)) + int(old.get("full", 0))
        if left:
            why = "was interrupted" if old.get("state") == "interrupted" else "stopped sending heartbeats (killed?)"
            ui.info(
                f"search run {old['run']} {why} with {left} trial(s) it had not queued; "
                "run its `autotune search` command again to continue it"
            )
    recommended, baseline = recommendation(study, settings)
    return SearchResult(study.study_name, storage_url, ran, recommended, baseline, None, study)
