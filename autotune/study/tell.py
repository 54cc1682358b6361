"""What a trial stores when it ends: a finished trial's figures and values, a duplicate's copied figures, a
predicted OOM, an interrupted trial."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.config import TrialConfig
from autotune.errors import FailKind, UsageError, stopped_by
from autotune.study.math_class import PRESERVING, loss_sanity, sanity_tolerance
from autotune.study.records import _budget
from autotune.study.settings import BASELINE_ATTR, StudySettings
from autotune.study.staged import SHORT_RUN_CONSTRAINT

if TYPE_CHECKING:
    from autotune.study.trial import _RunContext
    from autotune.ui import UI

import statistics

import optuna

from autotune.flops import mfu
from autotune.host_load import HOST_LOAD_KEYS, merge_host_load
from autotune.measure import merge_ranks
from autotune.noise import noise_scale, statistical_efficiency
from autotune.objective import (
    TimeToTarget,
    constraint_value,
    final_loss,
    loss_target,
    objective_values,
    time_to_target,
)
from autotune.optuna_compat import set_constraint, trial_of


def _measure_attrs(outcome) -> dict[str, Any]:
    """The trial's figures: :func:`autotune.measure.merge_ranks` of the ranks, plus what ran."""

    ranks = [r for r in outcome.ranks if r.get("ok")]
    attrs = merge_ranks(ranks, ranks[0].get("peak_memory_kind", "cpu_rss"))
    attrs["precision_ran"] = ranks[0].get("precision_ran")
    attrs["lr_ran"] = ranks[0].get("lr_ran")
    attrs["optimizer_ran"] = ranks[0].get("optimizer_ran")
    if ranks[0].get("stopped_at_target"):
        attrs["stopped_at_target"] = True
    if ranks[0].get("stopped_early"):
        attrs["stopped_early"] = [int(attrs["batches"]), int(ranks[0].get("planned_batches") or 0)]
    attrs["applied"] = ranks[0].get("applied")
    return attrs


def stopped_early_reason(measured: dict[str, Any]) -> str:
    """The reason stored on a trial whose training ended before its budget (``stopped_early``:
    ``[batches run, batches planned]``): its loss covers fewer samples than the others', so it is not
    compared with the baseline's (helper-28's config had an ``EarlyStopping``, which trials now leave
    out, and a 16,384-sample budget stopped at 7,296)."""
    ran, planned = measured["stopped_early"]
    return (
        f"training stopped after {ran:,} of its {planned:,} batches ({int(measured.get('samples_seen') or 0):,} samples): "
        "a callback or your LightningModule set trainer.should_stop, or the training data ran out first; "
        "a trial's loss must cover its whole budget to be compared with the baseline's: skip that stop in trials "
        "(AUTOTUNE_TRIAL_NUMBER is set in every trial process)"
    )


def _rank_attrs(outcome) -> list[dict[str, Any]]:
    return [
        {
            "rank": r.get("rank"),
            "config": r.get("config"),
            "first_batch_size": r.get("first_batch_size"),
            "ok": r.get("ok", False),
            "applied": r.get("applied"),
        }
        for r in sorted(outcome.ranks, key=lambda r: r.get("rank", 0))
    ]


def _overhead(outcome) -> dict[str, float]:
    """Start-up (launch to first training batch), training, and after-training seconds of a trial."""
    firsts = [r["first_batch_time"] for r in outcome.ranks if r.get("first_batch_time")]
    ends = [r["train_end_time"] for r in outcome.ranks if r.get("train_end_time")]
    launch, exit_time = outcome.timing.get("launch_time"), outcome.timing.get("exit_time")
    if not (firsts and ends and launch and exit_time):
        return {}
    first, end = min(firsts), max(ends)
    return {"startup_seconds": first - launch, "training_seconds": end - first, "teardown_seconds": exit_time - end}


def _tell(study, trial, outcome, settings: StudySettings, is_baseline: bool, ctx: _RunContext, slot) -> None:
    """Store a finished trial's figures and outcome (user attributes, constraint, values or FAIL).

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: Another process finished the trial meanwhile.
    """

    if study.get_trials(deepcopy=False)[trial.number].state != optuna.trial.TrialState.RUNNING:
        raise optuna.exceptions.UpdateFinishedTrialError(f"trial {trial.number} is no longer running")
    attrs: dict[str, Any] = {"launch": "cold" if ctx.pools.cold else "warm", "slot": slot.description, "shared_host": ctx.jobs > 1}
    attrs.update(outcome.timing)
    attrs.update(_overhead(outcome))
    attrs["wall_seconds"] = outcome.wall_seconds
    attrs.update(merge_host_load(outcome.ranks))  # how busy the host was (a failed trial's too, where measured)
    attrs["ranks"] = _rank_attrs(outcome)
    attrs["log"] = outcome.log  # the end of its output (autotune show STUDY N --log)
    kind, reason = outcome.fail_kind, outcome.fail_reason
    values = constraint = None
    if kind is None:
        kind, reason, values, constraint = _judge(study, trial, attrs, _measure_attrs(outcome), settings, is_baseline)
    if kind is not None:
        attrs["fail_kind"], attrs["fail_reason"] = kind, reason
        if outcome.log_tail:
            attrs["log_tail"] = outcome.log_tail[-4000:]
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    if constraint is not None:
        set_constraint(study, trial, constraint if math.isfinite(constraint) else 1e300)  # the loss tolerance
    try:
        if kind is not None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, values)
    except (ValueError, RuntimeError) as e:  # Optuna raises these for a trial told elsewhere
        raise optuna.exceptions.UpdateFinishedTrialError(str(e)) from None


def _judge(
    study, trial, attrs: dict[str, Any], measured: dict[str, Any], settings: StudySettings, is_baseline: bool
) -> tuple[FailKind | None, str | None, Any, float | None]:
    """Judge a trial that trained: its loss against the baseline's, its time to the target, MFU and
    goodput, all stored on ``attrs``. Returns ``(fail kind, reason, values told to Optuna, loss constraint)``."""
    kind: FailKind | None = None
    reason: str | None = None
    values: Any = None
    constraint: float | None = None
    attrs.update(measured)
    if measured.get("stopped_early"):
        return FailKind.STOPPED_EARLY, stopped_early_reason(measured), None, None
    try:
        # an empty loss curve: training_step returned no loss (its NaN mean is no loss to judge)
        returned = measured["train_loss_final"] if measured["loss_curve"] else None
        loss, source = final_loss(measured["metrics"], returned, settings.monitor, settings.monitor_explicit)
    except UsageError as e:
        kind, reason = FailKind.MONITOR_MISSING, str(e)
    else:
        attrs["loss"], attrs["loss_source"] = loss, source
        sps = measured["samples_per_sec"]
        if not math.isfinite(loss):
            kind, reason = FailKind.NONFINITE_LOSS, f"non-finite final {source} ({loss})"
        elif not (math.isfinite(sps) and sps > 0):
            kind, reason = FailKind.NO_MEASUREMENT, "no steady-state steps were measured; raise --samples"
        else:
            baseline = study.user_attrs.get(BASELINE_ATTR)
            baseline_loss = loss if is_baseline else baseline["loss"]
            if "pair_of" in trial.user_attrs and (
                _budget(trial.user_attrs, settings) != int(settings.samples) or attrs.get("stopped_at_target")
            ):
                # a paired run at another budget, or stopped at the loss target: its loss is judged in the race;
                # the sampler is told what the config's own full-budget trial was told
                original = study.get_trials(deepcopy=False)[int(trial.user_attrs["confirm_of"])]
                told = original.user_attrs.get("constraint")
                constraint = float(told) if told is not None else SHORT_RUN_CONSTRAINT
                attrs["constraint"], attrs["feasible"] = None, None
            elif "trial_samples" in trial.user_attrs:
                # a short run's loss is not comparable with the baseline's full budget: its
                # convergence is not judged (stage 2 judges it at full budget), and the sampler is
                # told it is not known to be feasible (SHORT_RUN_CONSTRAINT)
                constraint = SHORT_RUN_CONSTRAINT
                attrs["constraint"], attrs["feasible"] = None, None
            else:
                # a math-preserving config computes the baseline's math up to rounding and data order: its
                # loss is held to the sanity check's wider tolerance (rounding and order, not convergence)
                tolerance = settings.loss_tolerance
                if trial.user_attrs.get("math") == PRESERVING and not is_baseline:
                    tolerance = sanity_tolerance(tolerance)
                constraint = constraint_value(loss, baseline_loss, tolerance, settings.mode)
                attrs["constraint"] = constraint if math.isfinite(constraint) else None
                attrs["feasible"] = constraint <= 0
            if trial.user_attrs.get("math") == PRESERVING and not is_baseline and baseline.get("trial") is not None:
                # the baseline's math up to rounding: its training loss should track the baseline's
                base_curve = study.get_trials(deepcopy=False)[baseline["trial"]].user_attrs.get("loss_curve") or []
                attrs["loss_sanity"] = loss_sanity(measured["loss_curve"], base_curve, settings.loss_tolerance)
            target = (
                _loss_target(study, measured["loss_curve"], settings)
                if is_baseline or baseline.get("loss_target") is None
                else baseline["loss_target"]
            )
            # smoothed over the window the target was set with (a tenth of --samples), not a tenth of this run's
            # own samples: a 512-sample paired run's 51-sample window "reached" a 2,048-sample target on noise
            reach = time_to_target(measured["loss_curve"], target, sps, max(1, settings.samples))
            seen = measured.get("samples_seen")
            if attrs.get("stopped_at_target") and seen and not (reach.reached and reach.samples <= seen):
                # it stopped because its loss over the window reached the target on the whole curve (the stored
                # curve is thinned to block means: at the stop its window mean can sit a rounding above it)
                reach = TimeToTarget(float(seen), float(seen) / sps, True)
            attrs["loss_target"] = target if math.isfinite(target) else None
            # JSON has no inf: a target never reached is stored as None (samples/seconds) with target_reached False
            attrs["time_to_target"] = reach.seconds if math.isfinite(reach.seconds) else None
            attrs["samples_to_target"] = reach.samples if math.isfinite(reach.samples) else None
            attrs["target_reached"] = reach.reached
            if settings.objective == "time-to-quality" and math.isnan(reach.seconds):
                kind, reason = (
                    FailKind.NO_LOSS_CURVE,
                    "time-to-quality needs the training loss against samples; training_step returned no loss tensor",
                )
            _mfu_attrs(attrs, measured, sps, trial.user_attrs["config"])
            goodput = _goodput_attrs(study, attrs, measured, sps, trial.user_attrs["effective_batch_size"], settings)
            if settings.objective == "goodput" and math.isnan(goodput) and kind is None:
                kind, reason = (
                    FailKind.NO_NOISE_SCALE,
                    "goodput needs the gradient noise scale, and no step measured it; raise --samples (at least 4 optimizer steps)",
                )
            values = objective_values(settings.objective, sps, loss, reach.seconds, goodput)
    return kind, reason, values, constraint


def _mfu_attrs(attrs: dict[str, Any], measured: Mapping[str, Any], sps: float, config: Mapping[str, Any]) -> None:
    """Store model FLOP/s and MFU on ``attrs`` (see :mod:`autotune.flops`); None where unknown."""

    per_sample, peak = measured.get("flops_per_sample"), measured.get("peak_flops")
    devices = int(config.get("devices", 1)) * int(config.get("num_nodes", 1))
    attrs["model_flops_per_sec"] = per_sample * sps if per_sample else None
    value = mfu(per_sample or 0.0, sps, peak or 0.0, devices)
    attrs["mfu"] = value if math.isfinite(value) else None


def _goodput_attrs(study, attrs: dict[str, Any], measured: Mapping[str, Any], sps: float, batch: int, settings: StudySettings) -> float:
    """Store the gradient noise scale, the statistical efficiency and the goodput on ``attrs``;
    return the goodput (NaN when the noise scale was not measured here nor in any other trial)."""

    noise = measured.get("noise")
    if noise:
        scale, method = noise_scale(noise["grad_sq"], noise["trace"]), noise["method"]
    else:
        # too few optimizer steps to measure (a batch as large as the budget): the noise scale is a
        # property of the model and data, so the median of the study's measured trials stands in
        measured_scales = [
            t.user_attrs["gradient_noise_scale"]
            for t in study.get_trials(deepcopy=False)
            if t.state.name == "COMPLETE"
            and t.user_attrs.get("noise_method") not in (None, "study_median")
            and t.user_attrs.get("gradient_noise_scale") is not None
        ]
        if not measured_scales:
            return math.nan
        scale, method = statistics.median(measured_scales), "study_median"
    base = TrialConfig.from_dict(settings.baseline_config).effective_batch_size
    efficiency = statistical_efficiency(scale, batch, base)
    attrs["gradient_noise_scale"] = scale if math.isfinite(scale) else None  # None: inf (all noise)
    attrs["noise_method"] = method
    attrs["statistical_efficiency"] = efficiency
    attrs["goodput"] = sps * efficiency
    return sps * efficiency


def _loss_target(study, curve, settings: StudySettings) -> float:
    """The time-to-quality target: the baseline's smoothed final training loss relaxed by the study's
    loss tolerance (:func:`autotune.objective.loss_target`; this trial is the baseline, or the study's
    baseline predates the target and its stored curve is used)."""

    info = study.user_attrs.get(BASELINE_ATTR)
    if info is not None and info.get("trial") is not None:
        curve = study.get_trials(deepcopy=False)[info["trial"]].user_attrs.get("loss_curve") or curve
    return loss_target(curve, settings.samples, settings.loss_tolerance)


#: Figures a duplicate trial takes from the trial that measured its config (see :func:`_tell_duplicate`).
_NOT_COPIED = {
    "config",
    "effective_batch_size",
    "baseline",
    "seeded_from",
    "stage",
    "trial_samples",
    "confirm_of",
    "confirm_samples",
    "confirm_budget",
    "pair_of",
    "pair_index",
    "incumbent",
    "pair_cap",
    "baseline_repeat",
    "duplicate_of",
    "intermediate",
    "screen",
    "ranks",
    "log_tail",
    "log",
    "launch",
    "slot",
    "shared_host",
    "launch_time",
    "exit_time",
    "wall_seconds",
    "startup_seconds",
    "training_seconds",
    "teardown_seconds",
    *HOST_LOAD_KEYS,  # the host's load is of a run; a duplicate did not run
}


def _tell_duplicate(study, trial, original, ui: UI):
    """A sampled config that a completed trial already measured at the same budget is not trained
    again: the trial takes that trial's figures and values (``duplicate_of``; never recommended in
    its place), which tells the sampler the same thing at no cost. It counts against the run's
    ``--trials`` like any other trial (no replacement is queued: a run never adds more trials than asked)."""
    for key, value in original.user_attrs.items():
        if key not in _NOT_COPIED:
            trial.set_user_attr(key, value)
    trial.set_user_attr("duplicate_of", original.number)
    constraint = original.user_attrs.get("constraint")
    if original.user_attrs.get("feasible") is not None:
        set_constraint(study, trial, constraint if constraint is not None else 1e300)
    elif "trial_samples" in original.user_attrs:  # a short run: not judged
        set_constraint(study, trial, SHORT_RUN_CONSTRAINT)
    study.tell(trial, list(original.values))
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


def _prune_predicted_oom(study, trial, reason: str, ui: UI, kind: FailKind = FailKind.PREDICTED_OOM):
    """Store a trial the OOM frontier rules out (or, with ``kind``, another rule: a class that failed
    the loss) as PRUNED (not run; it counts against ``--trials``)."""

    trial.set_user_attr("fail_kind", kind)
    trial.set_user_attr("fail_reason", reason)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


#: Seconds the bookkeeping after Ctrl-C or SIGTERM waits for the study database before the process exits
#: anyway (:func:`after_interrupt`).
INTERRUPT_STORE_SECONDS = 15.0
_gave_up = False  # a write after the interruption already timed out: the later ones do not wait again


def after_interrupt(call: Callable[[], Any], fallback: Any = None) -> Any:
    """``call()`` (a study-database call after Ctrl-C or SIGTERM), given at most :data:`INTERRUPT_STORE_SECONDS`.

    A new user's Ctrl-C once hung 4 minutes on ``database is locked`` (two 120 s storage retries), then
    exited 1 instead of 130. The call runs in a daemon thread; when it has not returned in time (or a
    call before it in this process timed out) a warning says what was left as it was and ``fallback`` is
    returned: a trial left RUNNING goes stale after its heartbeat grace and the next run retries it, so
    nothing measured is lost. A call that raises is warned about and gives ``fallback`` too (the process
    is stopping; its exit status stays the interruption's). A second Ctrl-C while it waits stops at once.
    """
    global _gave_up
    import sys
    import threading

    result: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except Exception as e:
            failed.append(e)

    if not _gave_up:
        thread = threading.Thread(target=run, name="autotune-after-interrupt", daemon=True)
        thread.start()
        thread.join(INTERRUPT_STORE_SECONDS)
        if result:
            return result[0]
        if failed:
            print(f"warning: could not store the interruption in the study database: {failed[0]}", file=sys.stderr, flush=True)
            return fallback
        _gave_up = True
        print(
            f"warning: the study database did not answer within {INTERRUPT_STORE_SECONDS:g} s after the interruption (locked by "
            "another process?): exiting without storing it; a trial left RUNNING goes stale after its heartbeat grace and the "
            "next run retries it",
            file=sys.stderr,
            flush=True,
        )
    return fallback


def _fail_interrupted(study, number: int) -> None:
    """Store an asked trial that Ctrl-C cut short as FAIL (reason ``interrupted``), if not told yet."""

    frozen = study.get_trials(deepcopy=False)[number]
    if frozen.state != optuna.trial.TrialState.RUNNING:
        return
    trial = trial_of(study, frozen)
    trial.set_user_attr("fail_kind", FailKind.INTERRUPTED)
    trial.set_user_attr("fail_reason", f"interrupted: {stopped_by()} in the autotune process")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
