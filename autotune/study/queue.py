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
from collections.abc import Sequence
from typing import Any

import optuna

from autotune.config import TrialConfig
from autotune.errors import BaselineFailedError, FailKind, Interrupted, MonitorMissingError
from autotune.hardware import Hardware
from autotune.jobs import SlotPools, machine_slots
from autotune.objective import monitor_note
from autotune.optuna_compat import claim_waiting, fail_overdue_trials, fixed_params, heartbeat_interval
from autotune.pruning import make_pruner
from autotune.space import baseline_params, suggest_config
from autotune.storage import heartbeat_seconds, mask_url, retry_stale_trial
from autotune.study.options import BASELINE_WAIT, _env_pruner, option_defaults
from autotune.study.plan import live_runs
from autotune.study.races import PAIR_ATTRS, PAIR_RUN_ATTR
from autotune.study.records import _baseline_pending, _first_baseline
from autotune.study.settings import BASELINE_ATTR, StudySettings
from autotune.study.tell import _fail_interrupted, after_interrupt
from autotune.study.trial import TIMEOUT_ATTR, _run_one, _RunContext
from autotune.ui import UI


def _plan_slots(settings: StudySettings, jobs: int):
    """The study's slots on this machine (:func:`autotune.jobs.machine_slots`)."""
    return machine_slots(Hardware.from_dict(settings.hardware), int(settings.devices), jobs)


def _claim(study, baseline_only: bool, pairs: bool = False):
    """Atomically take a WAITING trial of the study (the shared budget), as Optuna's ``ask`` does.

    A paired confirmation run (``pair_of``) is taken only by the confirmation that queued it
    (``pairs``): a worker that took one half of a pair ran it at the same time as the search ran the
    other, and the race read the two as back-to-back runs (helper-29's 1.60x [0.04x, 60.40x]).

    Returns:
        An ``optuna.trial.Trial`` now RUNNING, or ``None`` when no (baseline, if ``baseline_only``)
        trial is waiting.
    """
    first = _first_baseline(study) if baseline_only else None
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if (baseline_only and frozen.number != first) or ("pair_of" in frozen.user_attrs and not pairs):
            continue
        trial = claim_waiting(study, frozen)
        if trial is not None:
            return trial
    return None


def _others_running(study, ctx: _RunContext) -> bool:
    """Whether a trial that this process did not take is still RUNNING (in another worker)."""
    mine = set(ctx.asked)
    return any(t.state.name == "RUNNING" and t.number not in mine for t in study.get_trials(deepcopy=False))


def drain_queue(
    study,
    settings: StudySettings,
    ui: UI,
    *,
    add: int,
    jobs: int = 1,
    cold: bool = False,
    storage_url: str = "",
    timeout: float | None = None,
    leader: Any = None,
    seeds: Sequence[tuple[dict, dict]] = (),
    pruner: tuple[str, int] | None = None,
    stage: str = "search",
    pools: Any = None,
    run_id: str | None = None,
    plan: Any = None,
    follow_runs: bool = False,
) -> int:
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
        plan: The search run's :class:`autotune.study.plan._Plan`: it records the trials held back,
            and on Ctrl-C the run's rest (continued by the next ``autotune search``).
        follow_runs: Wait (polling every second) while the queue is empty but a live search run can
            still add trials (:func:`autotune.study.plan.live_runs`): ``autotune worker``.

    Returns:
        Trials this process ran.

    Raises:
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C or SIGTERM; running trials are stored as failed (``interrupted``) and
            queued again, queued ones stay.
    """
    _fail_stale(study, settings)
    budget = _Budget(study, settings, seeds, plan)
    budget.add(add)
    cold = cold or leader is not None  # the other nodes start their ranks cold too
    own_pools = pools is None
    ctx = _context(settings, ui, jobs, cold, leader, pruner, pools)
    log_dir = ctx.log_dir
    worker = _Worker(study, settings, ctx, budget, time.monotonic() + timeout if timeout else None, follow_runs, stage == "confirm")
    worker.run_id = run_id
    try:
        ctx.pools.start_all(ctx.slots)
        _run_workers(ctx, worker.work)
    except KeyboardInterrupt:
        raise _interrupted(study, settings, ctx, budget, storage_url, plan) from None
    finally:
        if own_pools:
            ctx.pools.close()
            shutil.rmtree(log_dir, ignore_errors=True)
        if leader is not None:
            try:
                leader.close()
            except Exception:  # the followers also stop when the study has nothing left to run
                pass
        if ctx.stop.is_set():  # interrupted: bounded, as the interruption's own bookkeeping
            after_interrupt(lambda: _record_run(study, worker.run_start, ctx, cold, stage, run_id))
        else:
            _record_run(study, worker.run_start, ctx, cold, stage, run_id)
    if worker.failed_baseline:
        raise _baseline_failed(study, settings, worker.failed_baseline[0])
    return len(ctx.asked)


def _context(
    settings: StudySettings, ui: UI, jobs: int, cold: bool, leader: Any, pruner: tuple[str, int] | None, pools: Any
) -> _RunContext:
    """What this call's trials share: their slots (:func:`autotune.jobs.plan_slots`), warm pools (the
    caller's, or new ones in a new log folder), the multi-node leader and the pruner."""
    slots = _plan_slots(settings, jobs)
    if len(slots) > 1:
        ui.info(
            "parallel trials on disjoint resources (throughput measured under shared host resources): "
            + "; ".join(s.description for s in slots)
        )
    log_dir = tempfile.mkdtemp(prefix="autotune-warm-") if pools is None else pools.log_dir
    ctx = _RunContext(slots, SlotPools(settings.model_file, cold, log_dir, ui) if pools is None else pools, len(slots), ui)
    ctx.leader, ctx.log_dir = leader, log_dir
    pruner = pruner or (_env_pruner(), option_defaults()["pruner_startup"])
    ctx.pruner, ctx.pruner_name = make_pruner(*pruner), pruner[0]
    return ctx


class _Budget:
    """This run's share of the study's queue: trials are queued at once, or (a new study) held back
    until the baseline has completed, so that no process starts a sampled trial before it."""

    def __init__(self, study, settings: StudySettings, seeds: Sequence[tuple[dict, dict]], plan: Any = None):
        self.study, self.settings, self.plan = study, settings, plan
        self.seeds = list(seeds)
        self.pending = 0

    def _held(self) -> None:
        """Record what is still held back in the search run's plan (queued trials are in the storage)."""
        if self.plan is not None:
            self.plan.hold(self.seeds[: self.pending], self.pending)

    def add(self, n: int) -> None:
        """Add ``n`` trials: the baseline first when the study has none (the rest wait for it)."""
        if not n:
            return
        if self.study.user_attrs.get(BASELINE_ATTR) is not None:
            self.queue(n)
            self._held()
            return
        if not _baseline_pending(self.study):
            baseline = TrialConfig.from_dict(self.settings.baseline_config)
            self.study.enqueue_trial(baseline_params(self.settings.space, baseline), user_attrs={"baseline": True})
            n -= 1
        self.pending = n
        self._held()

    def queue(self, n: int) -> None:
        """Queue ``n`` trials: the seeded configs first (``--enqueue``, a staged search's), then sampled ones."""
        for _ in range(n):
            if self.seeds:
                params, user_attrs = self.seeds.pop(0)
                self.study.enqueue_trial(params, user_attrs=user_attrs)
            else:
                self.study.enqueue_trial({})

    def release(self) -> None:
        """Queue the trials held back for the baseline."""
        self.queue(self.pending)
        self.pending = 0
        self._held()


class _Worker:
    """One thread's loop over the queue: claim a trial, run it, repeat until the queue is empty."""

    def __init__(
        self,
        study,
        settings: StudySettings,
        ctx: _RunContext,
        budget: _Budget,
        deadline: float | None,
        follow_runs: bool = False,
        pairs: bool = False,
    ):
        self.study, self.settings, self.ctx, self.budget, self.deadline = study, settings, ctx, budget, deadline
        self.follow_runs = follow_runs
        self.pairs = pairs  # whether this process takes paired confirmation runs (its own confirmation's)
        self.resolved = settings.space
        self.baseline_config = TrialConfig.from_dict(settings.baseline_config)
        self.failed_baseline: list[Any] = []  # the failed baseline trial (None: none was ever queued)
        self.run_start = time.monotonic()
        self.waited_for: set[int] = set()  # other processes' trials this process said it waits for
        self.run_id: str | None = None  # the search run's id, stored on each paired run it runs (PAIR_RUN_ATTR)

    def work(self) -> None:
        ctx, study = self.ctx, self.study
        while not ctx.stop.is_set() and not self.failed_baseline and (self.deadline is None or time.monotonic() < self.deadline):
            with ctx.lock:
                _fail_stale(study, self.settings)
                need_baseline = study.user_attrs.get(BASELINE_ATTR) is None
                if self.budget.pending and not need_baseline:
                    # the baseline completed (here, or in another process that started this study at the same time)
                    self.budget.release()
                trial = _claim(study, baseline_only=need_baseline, pairs=self.pairs)
                if trial is not None:
                    ctx.asked.append(trial.number)
            if trial is None:
                if self._wait(need_baseline):
                    continue
                return
            # the study's baseline is its first queued baseline trial; another one (two `search` processes
            # started the study at once) runs after it as a repeat of the baseline config
            is_baseline = need_baseline or (bool(trial.user_attrs.get("baseline")) and trial.number == _first_baseline(study))
            if trial.user_attrs.get("baseline") and not is_baseline:
                trial.set_user_attr("baseline_repeat", True)
            if self.pairs and self.run_id and "pair_of" in trial.user_attrs:  # a pair's halves count only from one run
                trial.set_user_attr(PAIR_RUN_ATTR, self.run_id)
            frozen = _run_one(
                study, trial, suggest_config(trial, self.resolved, self.baseline_config), self.settings, is_baseline, ctx.ui, ctx
            )
            if is_baseline and not self._baseline_done(frozen):
                return

    def _wait(self, need_baseline: bool) -> bool:
        """Whether to look at the queue again (after a pause) although nothing could be claimed."""
        study = self.study
        if need_baseline:
            if study.user_attrs.get(BASELINE_ATTR) is not None:
                return True  # the baseline completed meanwhile: take a sampled trial
            baselines = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline")]
            coming = any(t.state.name in ("WAITING", "RUNNING", "COMPLETE") for t in baselines)
            if coming or (not baselines and time.monotonic() - self.run_start < BASELINE_WAIT):
                time.sleep(1.0)  # another process runs (or is about to queue, or to publish) the baseline
                return True
            if not self.failed_baseline:
                self.failed_baseline.append(None)
            return False
        if _others_running(study, self.ctx) or (self.follow_runs and live_runs(study)):
            # the queue is empty, but another process's trial may still go stale and be retried, or a
            # live search run still adds trials (the baseline's wait, a staged search's next round, confirmation)
            self._say_overdue_wait()
            time.sleep(1.0)
            return True
        return False

    def _say_overdue_wait(self) -> None:
        """On a storage without heartbeats (a journal file, a gRPC proxy), say once per trial that this
        process waits for another process's RUNNING trial, and until when at most: a trial whose worker
        is gone is only known as such once past its ``--trial-timeout`` plus the grace."""
        if heartbeat_interval(self.study) is not None:
            return
        import datetime

        mine, grace = set(self.ctx.asked), heartbeat_seconds()[1]
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.number in mine or t.number in self.waited_for or t.datetime_start is None:
                continue
            self.waited_for.add(t.number)
            limit = float(t.system_attrs.get(TIMEOUT_ATTR, self.settings.trial_timeout)) + grace
            until = t.datetime_start + datetime.timedelta(seconds=limit)
            self.ctx.ui.info(
                f"waiting for trial {t.number}, RUNNING in another process since {t.datetime_start:%H:%M:%S}; this storage has "
                f"no heartbeats, so if that process is gone the trial is retried at {until:%H:%M:%S} "
                "(--trial-timeout + $AUTOTUNE_HEARTBEAT_GRACE)"
            )

    def _baseline_done(self, frozen) -> bool:
        """Publish a completed baseline (after queueing the held-back trials), and say once when its judged
        metric was never logged (:func:`autotune.objective.monitor_note`); ``False`` when it failed."""
        if frozen.state != optuna.trial.TrialState.COMPLETE:
            self.failed_baseline.append(frozen)
            return False
        with self.ctx.lock:
            self.budget.release()  # queue first, then publish the baseline: no worker sees an empty queue
            self.study.set_user_attr(
                BASELINE_ATTR,
                {
                    "trial": frozen.number,
                    "samples_per_sec": frozen.user_attrs["samples_per_sec"],
                    "loss": frozen.user_attrs["loss"],
                    "loss_target": frozen.user_attrs.get("loss_target"),
                },
            )
        note = monitor_note(
            self.settings.monitor, frozen.user_attrs.get("loss_source", self.settings.monitor), frozen.user_attrs.get("metrics") or {}
        )
        if note:
            self.ctx.ui.warn(note)
        return True


def _run_workers(ctx: _RunContext, work) -> None:
    """Run ``work`` in this thread (one job) or in ``ctx.jobs`` threads; Ctrl-C stops them all."""
    if ctx.jobs == 1:
        work()
        return
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


def _interrupted(study, settings: StudySettings, ctx: _RunContext, budget: _Budget, storage_url: str, plan: Any = None) -> Interrupted:
    """Stop the running trials after Ctrl-C (or SIGTERM), store them as interrupted and queue them again,
    store the search run's rest in its plan, and say how to resume: the ``search`` command while the run
    had trials (or its confirmation) still to add, else a ``worker`` command while trials are queued."""
    ctx.stop.set()
    ctx.kill_running()

    def store() -> str:
        for number in ctx.asked:  # Ctrl-C may land between taking a trial and telling it
            _fail_interrupted(study, number)
        _requeue_interrupted(study, ctx.asked)
        if plan is not None:
            plan.end("interrupted")
        return _resume(study, settings, storage_url, plan)

    # a database locked by another process must not hold the exit for minutes (the resume command is the search's own)
    fallback = _resume_command(settings, storage_url, plan.trials, plan.flags) if plan is not None else ""
    return Interrupted(after_interrupt(store, fallback))


def _resume(study, settings: StudySettings, storage_url: str, plan: Any) -> str:
    """The command that finishes a stopped run (see :func:`_interrupted`), or ``""``: the search's while
    it had trials to add or was racing (the next search queues an interrupted pair's runs again itself)."""
    waiting = [t for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"]
    # a paired confirmation run left queued: only the search that races continues its race
    if plan is not None and (plan.racing or plan.left() or plan.confirm_left or any("pair_of" in t.user_attrs for t in waiting)):
        return _resume_command(settings, storage_url, plan.trials, plan.flags)
    if waiting:
        return shlex.join(["autotune", "worker", "--study-name", settings.study_name, "--storage", mask_url(storage_url)])
    return ""


#: User attributes a queued trial was given that its retry keeps (what it is: baseline, stage, seed, confirmation).
_QUEUED_ATTRS = ("baseline", "stage", "screen", "seeded_from", "confirm_of", "confirm_samples", "stop_at_target", *PAIR_ATTRS)


def _requeue_interrupted(study, numbers: Sequence[int]) -> None:
    """Queue again, once, each of trials ``numbers`` that Ctrl-C or SIGTERM failed (``fail_kind``
    ``interrupted``), with the params it had (fixed or sampled) and what it was queued as; the retry
    records ``retry_of``. An interrupted trial measured nothing, so the budget gets it back."""
    every = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in every}
    for number in numbers:
        frozen = every[number] if number < len(every) else None
        if frozen is None or frozen.state.name != "FAIL" or frozen.user_attrs.get("fail_kind") != FailKind.INTERRUPTED or number in retried:
            continue
        if "pair_of" in frozen.user_attrs:  # the resumed race queues its pair again itself, both runs back to back
            continue
        attrs = {key: frozen.user_attrs[key] for key in _QUEUED_ATTRS if key in frozen.user_attrs}
        study.enqueue_trial({**fixed_params(frozen), **frozen.params}, user_attrs={**attrs, "retry_of": number})


def _baseline_failed(study, settings: StudySettings, frozen) -> BaselineFailedError:  # MonitorMissingError is one
    """The error for a failed baseline (``frozen``; ``None`` when no process ever queued one)."""
    if frozen is None:
        failed = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.state.name == "FAIL"]
        if not failed:
            return BaselineFailedError(f"study {settings.study_name!r} has no baseline queued; start it with `autotune search` first")
        frozen = failed[-1]
    reason = frozen.user_attrs.get("fail_reason") or "see `autotune show`"
    if frozen.user_attrs.get("fail_kind") == FailKind.MONITOR_MISSING:
        return MonitorMissingError(  # a mistyped --monitor is bad input: exit code 2
            f"the baseline trial {frozen.number} (the model's own config) failed: {reason}; run the same command with "
            "--monitor NAME, NAME one of the metrics it logged (the study takes the corrected --monitor while no trial has completed)"
        )
    kind = frozen.user_attrs.get("fail_kind")
    fix = {  # what this failure asks of the user (the --trial-timeout hint only for a timeout: helper-32)
        FailKind.TIMEOUT: "raise --trial-timeout (or lower --samples)",
        FailKind.OOM: "lower the batch size in the model or its --config",
        # the figures the objective needs were not measured: the run was too short, not the model wrong (helper-37)
        FailKind.NO_NOISE_SCALE: "raise --samples",
        FailKind.NO_MEASUREMENT: "raise --samples",
    }.get(kind, "fix the model or its --config so the baseline trains")
    return BaselineFailedError(
        f"the baseline trial {frozen.number} (the model's own config) failed: {reason}; {fix}, then run the same command again; "
        "the study is inspected again while it has no baseline"
    )


def _fail_stale(study, settings: StudySettings) -> None:
    """Fail trials whose worker is gone, and retry each once: on an RDB storage, those that stopped
    sending heartbeats (Optuna's ``fail_stale_trials``); on a storage without heartbeats (a journal
    file, a gRPC proxy), those still RUNNING longer than their ``--trial-timeout`` plus the heartbeat
    grace period after they started (:func:`autotune.optuna_compat.fail_overdue_trials`).

    On an RDB storage, a trial still RUNNING twice that long is failed and retried too: one that never
    sent a heartbeat, which Optuna never finds stale. That happens when a claim's commit reached the
    server but its answer was lost in an outage: the claiming process saw the trial taken and went on,
    and every process would otherwise wait for it for ever. (A trial is killed at its timeout, so one
    running past twice its timeout plus the grace has no live worker.)"""
    grace = heartbeat_seconds()[1]

    def overdue(trial) -> float:
        return float(trial.system_attrs.get(TIMEOUT_ATTR, settings.trial_timeout)) + grace

    def retry(study, trial) -> None:
        retry_stale_trial(
            study,
            trial,
            f"still running {overdue(trial):g} s after it started, past its --trial-timeout "
            "(its worker was killed, or its machine lost; this storage has no heartbeats)",
        )

    if heartbeat_interval(study) is None:
        fail_overdue_trials(study, overdue, retry)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)

    def orphan(study, trial) -> None:
        retry_stale_trial(
            study,
            trial,
            f"still running {2 * overdue(trial):g} s after it started without a worker "
            "(twice its --trial-timeout plus the grace; its claim was lost in a database outage)",
        )

    fail_overdue_trials(study, lambda trial: 2 * overdue(trial), orphan)


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
                "numbers": sorted(int(n) for n in ctx.asked),
            }
        )
        study.set_user_attr("runs", runs)
    except Exception:  # figures only; never hide the run's own outcome
        pass


def _resume_command(settings: StudySettings, storage_url: str, trials: int, flags: Sequence[str] = ()) -> str:
    """The ``autotune search`` command of the study (model file relative to here when below it) with
    ``--trials`` and the run's own ``flags`` (:func:`autotune.study.options.run_flags`: ``--confirm 0``,
    ``--jobs``, ...; the study stores the rest)."""
    relative = os.path.relpath(settings.model_file)
    model = settings.model_file if relative.startswith("..") else relative
    parts = [
        "autotune",
        "search",
        model,
        "--study-name",
        settings.study_name,
        "--storage",
        mask_url(storage_url),
        "--trials",
        str(max(1, trials)),
        *flags,
    ]
    return shlex.join(parts)
