"""The study's shared budget: WAITING trials that any ``search`` or ``worker`` process claims atomically,
drained with ``--jobs`` trials at once; Ctrl-C stores the running trials as interrupted."""

from __future__ import annotations

import concurrent.futures
import os
import shlex
import shutil
import tempfile
import time
import warnings
from typing import Any, Mapping, Sequence

import optuna

from autotune.config import TrialConfig
from autotune.errors import BaselineFailedError, Interrupted
from autotune.hardware import Hardware
from autotune.jobs import SlotPools, plan_slots
from autotune.pruning import make_pruner
from autotune.space import baseline_params, suggest_config
from autotune.storage import mask_url
from autotune.study.options import BASELINE_WAIT, _env_pruner
from autotune.study.records import _baseline_pending, _first_baseline
from autotune.study.settings import BASELINE_ATTR
from autotune.study.tell import _fail_interrupted
from autotune.study.trial import _run_one, _RunContext


def _plan_slots(settings: Mapping[str, Any], jobs: int):

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return plan_slots(Hardware.from_dict(settings["hardware"]), int(settings["devices"]), jobs, cpus)


def _claim(study, baseline_only: bool):
    """Atomically take a WAITING trial of the study (the shared budget), as Optuna's ``ask`` does.

    Returns:
        An ``optuna.trial.Trial`` now RUNNING, or ``None`` when no (baseline, if ``baseline_only``)
        trial is waiting.
    """

    storage = study._storage
    first = _first_baseline(study) if baseline_only else None
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if baseline_only and frozen.number != first:
            continue
        try:
            if not storage.set_trial_state_values(frozen._trial_id, state=optuna.trial.TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        if hasattr(storage, "get_heartbeat_interval") and storage.get_heartbeat_interval():
            # at once: a trial RUNNING without any heartbeat is never found stale, and would wait forever
            storage.record_heartbeat(frozen._trial_id)
        study.sampler.before_trial(study, storage.get_trial(frozen._trial_id))
        return optuna.trial.Trial(study, frozen._trial_id)
    return None


def _others_running(study, ctx: "_RunContext") -> bool:
    """Whether a trial that this process did not take is still RUNNING (in another worker)."""
    mine = set(ctx.asked)
    return any(t.state.name == "RUNNING" and t.number not in mine for t in study.get_trials(deepcopy=False))


def drain_queue(study, settings: Mapping[str, Any], ui, *, add: int, jobs: int = 1, cold: bool = False,
                storage_url: str = "", timeout: float | None = None, leader: Any = None, seeds: Sequence[tuple[dict, dict]] = (),
                pruner: tuple[str, int] | None = None, stage: str = "search", pools: Any = None, run_id: str | None = None) -> int:
    """Add ``add`` trials to the study's queue (its shared budget), then run queued trials until none is left.

    The budget lives in the storage as WAITING trials, which any ``search`` or ``worker`` process
    takes atomically (Optuna's own queue), so many processes on many machines run each budgeted trial
    once. A new study's first queued trial is the baseline; the rest of this run's trials are queued
    only when it has completed, and no process starts a sampled trial before that. Stale trials (a
    worker that stopped sending heartbeats) are failed and retried once (Optuna's
    ``RetryFailedTrialCallback``).

    Args:
        study, settings: The study and its autotune settings.
        ui: Output.
        add: Trials this run adds to the budget (0 for ``autotune worker``).
        jobs: Trials at once in this process (see :mod:`autotune.jobs`).
        cold: Start trials as fresh processes instead of forking warm ones.
        storage_url: For the resume command.
        timeout: Stop taking new trials after this many seconds.
        leader: For multi-node trials, this node-0 process's :class:`autotune.nodes.LeaderChannel`
            (trials then start cold, and the other nodes' ranks join each one).
        seeds: ``(params, user attributes)`` of trials to queue before sampled ones, counted in
            ``add``: known configs (``--enqueue``), a staged search's trials (partial params: the
            sampler chooses the rest).
        pruner: ``(name, startup trials)`` of :func:`autotune.pruning.make_pruner` for running trials
            (default: ``$AUTOTUNE_PRUNER`` or ``median``, after 5 completed trials).
        stage: Recorded with the run's figures (``search``, ``confirm``).
        pools: A :class:`autotune.jobs.SlotPools` the caller owns (its warm processes outlive this
            call: a staged search drains the queue several times), else one made and closed here.
        run_id: Groups this call's figures with the other calls of one ``search`` run.

    Returns:
        Trials this process ran.

    Raises:
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C; running trials are stored as failed (``interrupted``), queued ones stay.
    """


    resolved = settings["space"]
    baseline_config = TrialConfig.from_dict(settings["baseline_config"])
    _fail_stale(study)
    pending = [0]
    seeds = list(seeds)

    def queue(n: int) -> None:
        """Queue ``n`` trials: the seeded configs first (``--enqueue``), then sampled ones."""
        for i in range(n):
            if seeds:
                params, user_attrs = seeds.pop(0)
                study.enqueue_trial(params, user_attrs=user_attrs)
            else:
                study.enqueue_trial({})

    if add:
        if study.user_attrs.get(BASELINE_ATTR) is None:
            if not _baseline_pending(study):
                study.enqueue_trial(baseline_params(resolved, baseline_config), user_attrs={"baseline": True})
                add -= 1
            pending[0] = add
        else:
            queue(add)
    slots = _plan_slots(settings, jobs)
    if len(slots) > 1:
        ui.info("parallel trials on disjoint resources (throughput measured under shared host resources): " + "; ".join(s.description for s in slots))

    cold = cold or leader is not None  # the other nodes start their ranks cold too
    own_pools = pools is None
    log_dir = tempfile.mkdtemp(prefix="autotune-warm-") if own_pools else pools.log_dir
    ctx = _RunContext(slots, SlotPools(settings["model_file"], cold, log_dir, ui) if own_pools else pools, len(slots))
    ctx.leader = leader
    ctx.log_dir = log_dir

    pruner = pruner or (_env_pruner(), 5)
    ctx.pruner, ctx.pruner_name = make_pruner(*pruner), pruner[0]
    deadline = time.monotonic() + timeout if timeout else None
    failed_baseline: list[Any] = []

    def work() -> None:
        while not ctx.stop.is_set() and not failed_baseline and (deadline is None or time.monotonic() < deadline):
            with ctx.lock:
                _fail_stale(study)
                need_baseline = study.user_attrs.get(BASELINE_ATTR) is None
                if pending[0] and not need_baseline:
                    # the baseline completed (here, or in another process that started this study at the same time)
                    queue(pending[0])
                    pending[0] = 0
                trial = _claim(study, baseline_only=need_baseline)
                if trial is not None:
                    ctx.asked.append(trial.number)
            if trial is None:
                if need_baseline:
                    if study.user_attrs.get(BASELINE_ATTR) is not None:
                        continue  # the baseline completed meanwhile: take a sampled trial
                    baselines = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline")]
                    coming = any(t.state.name in ("WAITING", "RUNNING", "COMPLETE") for t in baselines)
                    if coming or (not baselines and time.monotonic() - run_start < BASELINE_WAIT):
                        time.sleep(1.0)  # another process runs (or is about to queue, or to publish) the baseline
                        continue
                    if not failed_baseline:
                        failed_baseline.append(None)
                    return
                if _others_running(study, ctx):
                    # the queue is empty, but another process's trial may still go stale and be retried
                    time.sleep(1.0)
                    continue
                return
            # the study's baseline is its first queued baseline trial; another one (two `search` processes
            # started the study at once) runs after it as a repeat of the baseline config
            is_baseline = need_baseline or (bool(trial.user_attrs.get("baseline")) and trial.number == _first_baseline(study))
            if trial.user_attrs.get("baseline") and not is_baseline:
                trial.set_user_attr("baseline_repeat", True)
            frozen = _run_one(study, trial, suggest_config(trial, resolved, baseline_config), settings, is_baseline, ui, ctx)
            if not is_baseline:
                continue
            if frozen.state != optuna.trial.TrialState.COMPLETE:
                failed_baseline.append(frozen)
                return
            with ctx.lock:
                queue(pending[0])  # queue first, then publish the baseline: no worker sees an empty queue
                pending[0] = 0
                study.set_user_attr(
                    BASELINE_ATTR,
                    {
                        "trial": frozen.number,
                        "samples_per_sec": frozen.user_attrs["samples_per_sec"],
                        "loss": frozen.user_attrs["loss"],
                        "loss_target": frozen.user_attrs.get("loss_target"),
                    },
                )

    run_start = time.monotonic()
    try:
        ctx.pools.start_all(slots)
        if ctx.jobs == 1:
            work()
        else:

            with concurrent.futures.ThreadPoolExecutor(max_workers=ctx.jobs) as executor:
                futures = [executor.submit(work) for _ in range(ctx.jobs)]
                try:
                    for future in futures:
                        future.result()
                except KeyboardInterrupt:
                    ctx.stop.set()
                    ctx.kill_running()
                    concurrent.futures.wait(futures)
                    raise
    except KeyboardInterrupt:
        ctx.stop.set()
        ctx.kill_running()
        for number in ctx.asked:  # Ctrl-C may land between taking a trial and telling it
            _fail_interrupted(study, number)
        waiting = any(t.state.name == "WAITING" for t in study.get_trials(deepcopy=False))
        resume = ""
        if waiting and not pending[0]:
            resume = shlex.join(["autotune", "worker", "--study-name", settings["study_name"], "--storage", mask_url(storage_url)])
        elif pending[0]:
            resume = _resume_command(settings, storage_url, pending[0] + 1)
        raise Interrupted(resume) from None
    finally:
        if own_pools:
            ctx.pools.close()
        if leader is not None:
            try:
                leader.close()
            except Exception:  # the followers also stop when the study has nothing left to run
                pass

        if own_pools:
            shutil.rmtree(log_dir, ignore_errors=True)
        _record_run(study, run_start, ctx, cold, stage, run_id)
    if failed_baseline:
        frozen = failed_baseline[0]
        if frozen is None:
            failed = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.state.name == "FAIL"]
            if not failed:
                raise BaselineFailedError(f"study {settings['study_name']!r} has no baseline queued; start it with `autotune search` first")
            frozen = failed[-1]
        reason = frozen.user_attrs.get("fail_reason") or "see `autotune show`"
        number = frozen.number
        raise BaselineFailedError(
            f"the baseline trial {number} (the model's own config) failed: {reason}; "
            "fix the model or its --config so the baseline trains (or raise --trial-timeout), then run the same command again; "
            "the study is inspected again while it has no baseline"
        )
    return len(ctx.asked)


def _fail_stale(study) -> None:
    """Fail trials whose worker stopped sending heartbeats (RDB storages with heartbeats only)."""


    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _record_run(study, run_start: float, ctx: _RunContext, cold: bool, stage: str = "search", run_id: str | None = None) -> None:
    """Append this run's overhead figures to the study's ``runs`` attribute (best effort)."""
    try:
        wall = time.monotonic() - run_start
        every = study.get_trials(deepcopy=False)
        trials = [every[n] for n in ctx.asked]
        training = sum(t.user_attrs.get("training_seconds", 0.0) for t in trials)
        runs = list(study.user_attrs.get("runs", []))
        runs.append(
            {
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "trials": len(trials),
                "jobs": ctx.jobs,
                "launch": "cold" if cold else "warm",
                "wall_seconds": wall,
                "training_seconds": training,
                "overhead_fraction": 1.0 - training / (wall * ctx.jobs) if wall > 0 else None,
                "stage": stage,
                "run_id": run_id,
            }
        )
        study.set_user_attr("runs", runs)
    except Exception:  # figures only; never hide the run's own outcome
        pass


def _resume_command(settings: Mapping[str, Any], storage_url: str, remaining: int) -> str:
    relative = os.path.relpath(settings["model_file"])
    model = settings["model_file"] if relative.startswith("..") else relative
    parts = ["autotune", "search", model, "--study-name", settings["study_name"], "--storage", mask_url(storage_url), "--trials", str(max(1, remaining))]
    return shlex.join(parts)

