"""Run one claimed trial: its child process (:mod:`autotune.runner`), heartbeat and pruning watcher, then
tell the study (:mod:`autotune.study.tell`)."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator, Mapping
from typing import Any, cast

import optuna

from autotune.config import TrialConfig
from autotune.errors import AutotuneError, FailKind, stopped_by
from autotune.objective import SMOOTHING_FRACTION
from autotune.optuna_compat import heartbeat_interval, record_heartbeat, set_trial_system_attr
from autotune.progress import PROGRESS_FILE_ENV, read_progress
from autotune.pruning import ShadowStudy, intermediate_metric, milestone_steps
from autotune.runner import TrialOutcome, kill_group, run_trial_process, trial_spec
from autotune.study.bounds import above_epoch, learn_epoch, prune_above_epoch
from autotune.study.math_class import math_kind
from autotune.study.memory import _predicted_oom
from autotune.study.records import _budget, _measured_before
from autotune.study.settings import StudySettings
from autotune.study.staged import class_failed, system_budget
from autotune.study.tell import (
    _fail_interrupted,
    _prune_predicted_oom,
    _tell,
    _tell_duplicate,
    after_interrupt,
)
from autotune.ui import UI


class _RunContext:
    """What the trials of one ``search`` run share: slots, warm pools, running trials, Ctrl-C."""

    def __init__(self, slots, pools, jobs: int, ui: UI):
        self.ui = ui
        self.pools = pools
        self.slots = list(slots)
        self.jobs = jobs
        self.leader = None
        self.log_dir = "."
        self.stop = threading.Event()
        self.running: dict[int, int] = {}
        self.asked: list[int] = []
        self.pruner = None
        self.pruner_name = "none"
        self.pruned: dict[int, str] = {}
        self.shadows: dict[tuple[str, int], ShadowStudy] = {}  # the pruner's view of the completed trials
        self.lock = threading.Lock()
        self._free: queue.Queue = queue.Queue()
        for slot in slots:
            self._free.put(slot)

    def take_slot(self):
        return self._free.get()

    def give_slot(self, slot) -> None:
        self._free.put(slot)

    def kill_running(self) -> None:
        for pgid in list(self.running.values()):
            kill_group(pgid)


#: The trial system attribute that holds the wall-clock cap, s, a trial runs under, on a storage without
#: heartbeats: another worker fails the trial as stale once it has run that long plus the grace period.
TIMEOUT_ATTR = "trial_timeout"


def _run_one(study, trial, config: TrialConfig, settings: StudySettings, is_baseline: bool, ui: UI, ctx: _RunContext) -> Any:
    """Run one asked trial in a free slot to its end and tell the study. Returns the frozen trial.

    A config a completed trial measured at the same budget is not trained again (a duplicate), and
    one the OOM frontier rules out is pruned unrun; both are told at once. A config whose batch is
    larger than an epoch (:mod:`autotune.study.bounds`) is pruned unrun without a line printed.
    """
    trial.set_user_attr("config", config.to_dict())
    trial.set_user_attr("effective_batch_size", config.effective_batch_size)
    trial.set_user_attr("baseline", is_baseline)
    if not is_baseline and (reason := above_epoch(study, config)) is not None:
        return prune_above_epoch(study, trial, reason)
    ui.trial_started(trial.number, config, is_baseline)
    if trial.user_attrs.get("stage") == "system" and system_budget(config, int(settings.samples)) < int(settings.samples):
        trial.set_user_attr("trial_samples", system_budget(config, int(settings.samples)))  # a short run
    if "stage" in trial.user_attrs:  # a staged search's trial: does it compute the baseline's math?
        trial.set_user_attr("math", math_kind(config, TrialConfig.from_dict(settings.baseline_config)))
    if not is_baseline and "confirm_of" not in trial.user_attrs:
        # (an --enqueue'd config runs even when measured before: the user asked for it)
        original = (
            None
            if "seeded_from" in trial.user_attrs
            else _measured_before(study, trial.number, config, _budget(trial.user_attrs, settings))
        )
        if original is not None:
            return _tell_duplicate(study, trial, original, ui)
        reason = _predicted_oom(study, config)
        if reason is not None:
            return _prune_predicted_oom(study, trial, reason, ui)
        if trial.user_attrs.get("stage") == "full" and "seeded_from" not in trial.user_attrs:
            reason = class_failed(study, config, settings)  # fewer optimizer steps than a config that failed the loss
            if reason is not None:
                return _prune_predicted_oom(study, trial, reason, ui, FailKind.FAILED_CLASS)
    spec = trial_spec(settings.to_dict(), config.to_dict(), _budget(trial.user_attrs, settings), settings.seed)
    if trial.user_attrs.get("stop_at_target") is not None:  # a timed paired run (autotune.study.racing.stop_target)
        # averaged over the window the target was set with (a tenth of --samples), whatever the run's own length
        spec["stop_at_loss"] = [float(trial.user_attrs["stop_at_target"]), SMOOTHING_FRACTION * max(1, settings.samples)]
    if heartbeat_interval(study) is None:  # no heartbeats (a journal file, a gRPC proxy): other workers judge it by its cap
        set_trial_system_attr(study, trial, TIMEOUT_ATTR, float(settings.trial_timeout))
    # the heartbeat runs until the trial is told: storing its figures can take long on a busy database,
    # and a trial whose heartbeat stopped would be failed as stale by another worker meanwhile
    with heartbeat(study, trial) as beating:
        slot = ctx.take_slot()
        try:
            outcome = _train(study, trial, config, spec, settings, is_baseline, ctx, slot, beating)
        finally:
            ctx.running.pop(trial.number, None)
            ctx.give_slot(slot)
        _finish(study, trial, outcome, settings, is_baseline, ui, ctx, slot)
        learn_epoch(study, trial.number, outcome.ranks, config, settings, ui)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


def _train(
    study,
    trial,
    config: TrialConfig,
    spec: Mapping[str, Any],
    settings: StudySettings,
    is_baseline: bool,
    ctx: _RunContext,
    slot,
    beating: threading.Event,
) -> TrialOutcome:
    """Run the trial's process (and, on a multi-node study, gather the other nodes' ranks) in ``slot``.

    Raises:
        KeyboardInterrupt: Ctrl-C; the trial is stored as interrupted first.
    """
    try:
        launch, node_env = None, {}
        progress_file = os.path.join(ctx.log_dir, f"progress-{trial.number}.json")
        node_env[PROGRESS_FILE_ENV] = progress_file
        ctx.ui.trial_progress(trial.number, progress_file)
        if (
            ctx.pruner is not None
            and ctx.leader is None
            and not is_baseline
            and "confirm_of" not in trial.user_attrs
            and "trial_samples" not in trial.user_attrs
            and intermediate_metric(settings.objective) is not None
        ):
            _start_watch(study, trial, settings, ctx, progress_file, int(spec["samples"]), beating)
        if ctx.leader is not None:
            launch, rendezvous = ctx.leader.publish(trial.number, spec, float(settings.trial_timeout))
            node_env.update(rendezvous)
        outcome = run_trial_process(
            spec,
            timeout=float(settings.trial_timeout),
            trial_number=trial.number,
            expected_ranks=config.devices if launch else config.world_size,
            devices=config.devices,
            pool=None if config.strategy == "fsdp" else ctx.pools.get(slot),  # FSDP launches its ranks as scripts
            slot_env={**slot.env, **node_env},
            on_start=lambda pgid: _trial_started(ctx, trial, pgid),
        )
        return ctx.leader.gather(launch, outcome) if launch else outcome
    except KeyboardInterrupt:
        after_interrupt(lambda: _fail_interrupted(study, trial.number))
        raise
    except AutotuneError as e:  # the warm process failed to start or answer: the trial fails, not the study
        return TrialOutcome(ok=False, fail_kind=FailKind.CRASHED, fail_reason=f"crashed: {str(e).splitlines()[0]}")


def _finish(study, trial, outcome: TrialOutcome, settings: StudySettings, is_baseline: bool, ui: UI, ctx: _RunContext, slot) -> None:
    """Tell the study how the trial ended: pruned by the watcher, interrupted by Ctrl-C, or its figures."""
    if ctx.stop.is_set() and not outcome.ok:
        outcome.fail_kind, outcome.fail_reason = FailKind.INTERRUPTED, f"interrupted: {stopped_by()} in the autotune process"
    pruned = ctx.pruned.pop(trial.number, None)
    try:
        if pruned is not None and not outcome.ok:
            trial.set_user_attr("fail_kind", FailKind.PRUNED)
            trial.set_user_attr("fail_reason", pruned)
            trial.set_user_attr("log", outcome.log)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            _tell(study, trial, outcome, settings, is_baseline, ctx, slot)
    except optuna.exceptions.UpdateFinishedTrialError as e:
        # another worker failed this trial as stale meanwhile (and retried it): log, never crash
        ui.warn(f"trial {trial.number} finished after another worker marked it failed (stale); its result is not stored ({e})")


def _start_watch(study, trial, settings: StudySettings, ctx: _RunContext, progress_file: str, budget: int, done) -> None:
    """Watch a running trial's progress preview; at each milestone record its intermediate value and
    stop it (its process group) when the pruner says so (see :mod:`autotune.pruning`). Ends with ``done``."""

    metric = intermediate_metric(settings.objective)
    assert metric is not None, settings.objective  # the caller starts a watch only for a pruned objective
    key, direction = metric
    steps = milestone_steps(budget)
    single = len(study.directions) == 1
    recorded: dict[int, float] = {}

    with ctx.lock:  # one shadow study per metric and budget, shared by the run's watchers
        shadow = ctx.shadows.get((key, budget))
        if shadow is None:
            shadow = ctx.shadows[(key, budget)] = ShadowStudy(ctx.pruner, direction)

    def add_completed() -> None:  # the completed trials not offered to the shadow yet: O(new)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if shadow.seen(t.number):
                continue
            if "confirm_of" in t.user_attrs or "duplicate_of" in t.user_attrs or not t.user_attrs.get("feasible"):
                shadow.add(t.number, None)
                continue
            final = t.user_attrs.get(key)
            values = {int(k): float(v) for k, v in (t.user_attrs.get("intermediate") or {}).items()}
            if final is not None:
                for step in steps:  # a trial too short for the watcher to see a milestone: its final figure
                    values.setdefault(step, float(final))
            shadow.add(t.number, values)

    def watch() -> None:
        while not done.wait(0.25):
            preview = read_progress(progress_file)
            if preview is None:
                continue
            reached = [step for step in steps if preview.get("samples", 0) >= step]
            value = cast("float | None", preview.get(key))  # a number or None, read from the JSON preview
            # only the latest milestone the preview has passed: an older one would get a later figure
            for step in reached[-1:]:
                if step in recorded or value is None:
                    continue
                recorded[step] = float(value)
                try:
                    trial.set_user_attr("intermediate", {str(k): v for k, v in recorded.items()})
                    if single:
                        trial.report(float(value), step)
                    add_completed()
                    prune = shadow.decide(recorded)
                except Exception:  # a database hiccup or a finished trial: never stop a trial for it
                    continue
                if prune:
                    ctx.pruned[trial.number] = (
                        f"pruned at {step} of {budget} samples: {key.replace('_', ' ')} {value:.4g} is worse than "
                        f"the completed trials' at that point (--pruner {ctx.pruner_name})"
                    )
                    pgid = ctx.running.get(trial.number)
                    if pgid is not None:
                        kill_group(pgid)
                    return

    threading.Thread(target=watch, name=f"watch-{trial.number}", daemon=True).start()


def _trial_started(ctx: _RunContext, trial, pgid: int) -> None:
    """Note a running trial's process group: for Ctrl-C, and on the trial (stored at once, so even
    an interrupted trial names the group that was killed)."""
    ctx.running[trial.number] = pgid
    trial.set_user_attr("process_group", pgid)


@contextlib.contextmanager
def heartbeat(study, trial) -> Iterator[threading.Event]:
    """Record the trial's heartbeat every interval while the block runs (storages with heartbeats),
    as Optuna's ``optimize`` does; yields the event that is set when the block ends."""
    stop = threading.Event()
    interval = heartbeat_interval(study)

    def beat() -> None:
        while True:
            try:
                record_heartbeat(study, trial)
            except Exception:  # a database hiccup: the next beat retries
                pass
            if stop.wait(interval):
                return

    if interval:
        threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True).start()
    try:
        yield stop
    finally:
        stop.set()
