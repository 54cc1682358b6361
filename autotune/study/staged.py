"""``--search staged``: short system-knob screening runs (stage 1, math-preserving configs first), then
full-budget runs: the fastest math-preserving config, then the fastest math-changing system configs with
their lr following the effective batch (stage 2). See docs/search.md and :mod:`autotune.study.math_class`."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.config import TrialConfig
from autotune.errors import FailKind, UsageError
from autotune.samplers import grid_space
from autotune.space import baseline_params, param_name, user_arg
from autotune.study.math_class import (
    PRESERVING,
    Failure,
    failed_class,
    failures_of,
    lr_rule,
    raised_lr_needed,
    ruled_out_at_any_lr,
    same_question,
)
from autotune.study.memo import per_finished_trial
from autotune.study.records import _baseline_pending
from autotune.study.screen import MathContext, batch_ladder, screen_order
from autotune.study.settings import BASELINE_ATTR, StudySettings
from autotune.ui import UI

#: Share of a staged run's sampled trials that are short system-knob runs (stage 1).
SYSTEM_FRACTION = 0.6


#: Optimizer steps a stage-1 run trains at least (enough for the warm-up cut and a steady state).
SYSTEM_STEPS = 32


#: Fastest system configs of stage 1 that stage 2 trains at full budget.
STAGE2_CONFIGS = 3


#: The loss-tolerance constraint a short stage-1 run tells the sampler (> 0: not known to be
#: feasible). Its lr and accumulation are the baseline's, so feasible would steer stage 2's sampler
#: back to them on the strength of runs whose loss was never judged.
SHORT_RUN_CONSTRAINT = 1.0


#: Knobs that decide convergence but hardly the speed: fixed in stage 1, searched in stage 2.
CONVERGENCE_KNOBS = ("lr", "accumulate_grad_batches")


#: Full-budget trials of one system config, none feasible, after which stage 2 takes the next config.
STAGE2_ATTEMPTS = 3


#: Largest system grid stage 1 enumerates (see :func:`screen_points`).
SCREEN_MAX_POINTS = 100_000


def system_budget(config: TrialConfig, samples: int) -> int:
    """Training samples of a stage-1 run of ``--search staged`` (a throughput measurement).

    A quarter of the study's budget, but at least :data:`SYSTEM_STEPS` optimizer steps of the
    config, and never more than the full budget: ``min(samples, max(samples // 4, SYSTEM_STEPS x
    effective batch))``.

    Args:
        config: The trial's config.
        samples: The study's ``samples`` per trial (>= 1).
    """
    return min(samples, max(samples // 4, SYSTEM_STEPS * config.effective_batch_size))


def staged_plan(add: int, baseline_needed: bool, seeds: int, system_knobs: bool) -> tuple[int, int]:
    """Split a staged run's trials: ``(stage-1 short runs, stage-2 full-budget runs)``.

    The baseline (when the study has none yet) and the ``--enqueue`` configs run first at full
    budget; of the rest, :data:`SYSTEM_FRACTION` (rounded) are stage-1 runs, the others stage 2.
    Without system knobs to search there is no stage 1.

    Args:
        add: Trials this run adds (``--trials``, >= 1).
        baseline_needed: The study has no baseline yet (it takes one of ``add``).
        seeds: ``--enqueue`` configs (each takes one of ``add``).
        system_knobs: The space searches a knob outside :data:`CONVERGENCE_KNOBS`.
    """
    rest = max(0, add - (1 if baseline_needed else 0) - seeds)
    system = round(SYSTEM_FRACTION * rest) if system_knobs else 0
    return system, rest - system


def top_system_configs(trials: Sequence[Any], k: int | None = None, with_speed: bool = False) -> list:
    """The ``k`` (default: all) fastest distinct system configs among completed trials, fastest first.

    A trial's system config is its Optuna params without :data:`CONVERGENCE_KNOBS` (``lr`` or
    ``lr_multiplier``, ``accumulate_grad_batches``) and the user's constructor arguments
    (``model.<arg>``, ``data.<arg>``); a config's speed is the best samples/s any of its trials
    measured. Confirmation runs are left out.

    Args:
        trials: Frozen Optuna trials.
        k: Configs wanted (>= 0), or ``None`` for all.
        with_speed: Return ``(config, samples/s)`` pairs.
    """
    best: dict[str, tuple[float, dict]] = {}
    for t in trials:
        sps = t.user_attrs.get("samples_per_sec")
        if t.state.name != "COMPLETE" or "confirm_of" in t.user_attrs or not sps:
            continue
        key, system = _system_of(t)
        if key not in best or sps > best[key][0]:
            best[key] = (float(sps), system)
    ranked = sorted(best.values(), key=lambda pair: -pair[0])[:k]
    return [(dict(system), speed) for speed, system in ranked] if with_speed else [dict(system) for _, system in ranked]


def slower_moves(trials: Sequence[Any], reference: Mapping[str, Any]) -> set[tuple[str, Any]]:
    """The ``(knob, value)`` moves from ``reference``'s system knobs (other than the batch size) that the
    study measured slower in every comparison it has: each pair of distinct system configs
    (:func:`top_system_configs`, short screening runs included: samples/s is a rate after the warm-up)
    that differ in that knob alone, one at ``value`` and one at ``reference``'s. A move with no such pair
    is not in the set. A new user's stage 2 ran batch 16 with 2 loader workers at full budget (116
    samples/s) after stage 1 had measured 2 workers at 49 samples/s against the baseline's 639."""
    ranked = top_system_configs(trials, with_speed=True)
    speed = {repr(sorted(system.items())): sps for system, sps in ranked}
    verdicts: dict[tuple[str, Any], list[bool]] = {}
    for system, sps in ranked:
        for knob, value in system.items():
            if knob == "batch_size" or knob not in reference or value == reference[knob]:
                continue
            theirs = speed.get(repr(sorted({**system, knob: reference[knob]}.items())))
            if theirs is not None:
                verdicts.setdefault((knob, value), []).append(sps < theirs)
    return {move for move, slower in verdicts.items() if all(slower)}


@per_finished_trial
def _system_of(trial: Any) -> tuple[str, dict[str, Any]]:
    """``(key, system part)`` of a trial's params (:func:`system_part`), derived once per finished trial."""
    system = system_part(trial.params)
    return repr(sorted(system.items())), system


def system_part(params: Mapping[str, Any]) -> dict[str, Any]:
    """The system knobs of a trial's Optuna params (see :func:`top_system_configs`)."""

    return {name: value for name, value in params.items() if name not in (*CONVERGENCE_KNOBS, "lr_multiplier") and user_arg(name) is None}


def screen_points(
    trials: Sequence[Any], resolved: Mapping[str, Any], convergence: set, seed: int, visited_params: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]] | None:
    """Stage 1's system configs: every point of the system knobs' grid that no trial has visited, in a
    random order (seeded), or ``None`` when the system knobs are not all discrete (or the grid is
    larger than :data:`SCREEN_MAX_POINTS`; the sampler then chooses). Screening without repeats is
    what a short throughput run is for; the sampler's model of the loss constraint matters in stage 2.

    Args:
        trials: The study's frozen trials (their system configs count as visited).
        resolved: The study's resolved space.
        convergence: Optuna parameter names of the convergence knobs (left out of the grid).
        seed: Seed of the order.
        visited_params: More visited points (the baseline's, before its trial exists). A queued trial's
            point (``--enqueue``) counts as visited: it runs anyway (a new user's enqueued config was
            screened again right after its full-budget run).
    """

    system = {name: entry for name, entry in resolved.items() if param_name(name, entry) not in convergence}
    try:
        grid = grid_space(system)
    except UsageError:
        return None
    if not grid or math.prod(len(v) for v in grid.values()) > SCREEN_MAX_POINTS:
        return None
    # a queued trial (an --enqueue config not run yet) has its params in Optuna's "fixed_params" system attribute
    queued = [t.system_attrs.get("fixed_params") for t in trials if not t.params and t.state.name == "WAITING"]
    visited = {
        repr(sorted(system_part(p).items())) for p in [*(t.params for t in trials if t.params), *filter(None, queued), *visited_params]
    }
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    points = [p for p in points if repr(sorted(p.items())) not in visited]
    random.Random(seed).shuffle(points)
    return points


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal params (floats up to rounding)."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and isinstance(b[k], float) and math.isclose(a[k], b[k], rel_tol=1e-9)) for k in a
    )


def stage2_round(
    trials: Sequence[Any], fixed: Mapping[str, Any], k: int = STAGE2_CONFIGS, context: MathContext | None = None
) -> list[tuple[dict, dict]]:
    """The next round of stage 2 of ``--search staged``: ``(params, user attributes)`` of up to ``k`` trials.

    System configs are taken fastest first (stage 1's ranking, :func:`top_system_configs`), skipping
    one that already has a feasible full-budget trial (it is solved), one with
    :data:`STAGE2_ATTEMPTS` full-budget trials and none feasible (its batch does not converge at any
    lr tried), and one no faster than the best feasible trial so far (it cannot win). Each taken config
    runs first at the baseline's lr and accumulation (``fixed``), then with the sampler choosing them.
    An empty round means no system config can beat the best feasible trial.

    With a ``context``: a round of one math-preserving config comes first, while one is left (the
    fastest whose short run passed the loss sanity check, with no full-budget run yet, and whose
    class did not fail the loss: :func:`autotune.study.math_class.failed_class`); a system config
    that has a math-preserving split is never run with other math, and a math-changing one runs
    first at the lr of the context's rule (:meth:`MathContext.first_point`), or straight with the
    sampler choosing when that point's class failed already.

    Args:
        trials: The study's frozen trials.
        fixed: The baseline's Optuna params of the convergence knobs.
        k: Trials per round (the configs explored side by side).
        context: The baseline, space and lr rule; ``None``: every config is treated alike.
    """
    full = [
        t
        for t in trials
        if t.state.name == "COMPLETE"
        and "confirm_of" not in t.user_attrs
        and "trial_samples" not in t.user_attrs
        and t.user_attrs.get("feasible") is not None
    ]
    incumbent = max((t.user_attrs["samples_per_sec"] for t in full if t.user_attrs.get("feasible")), default=0.0)
    # full-budget attempts: completed or failed (a NaN loss, an OOM), stage-1 runs as long as the budget
    # included, and trials skipped because their class failed (they count, or a config could loop)
    tried = [
        t
        for t in trials
        if (t.state.name in ("COMPLETE", "FAIL") or t.user_attrs.get("fail_kind") == FailKind.FAILED_CLASS)
        and "confirm_of" not in t.user_attrs
        and "trial_samples" not in t.user_attrs
    ]
    ranked = top_system_configs(trials, with_speed=True)
    failures = failures_of(full) if context is not None else []
    if context is not None:
        preserving = _preserving_round(trials, tried, ranked, fixed, incumbent, failures, context)
        if preserving:
            return preserving
    by_system: dict[str, list] = {}  # grouped once: a pass per config would be quadratic in the study's size
    for t in tried:
        by_system.setdefault(_system_of(t)[0], []).append(t)
    out: list[tuple[dict, dict]] = []
    for system, speed in ranked:
        if len(out) == k:
            break
        if context is not None and context.split(system, fixed) is not None:
            continue  # a math-preserving config: its own round, never other math
        mine = by_system.get(repr(sorted(system.items())), [])
        if speed <= incumbent or any(t.user_attrs.get("feasible") for t in mine) or len(mine) >= STAGE2_ATTEMPTS:
            continue
        first = {**system, **fixed} if context is None else context.first_point(system, fixed)
        done = any(_same({n: t.params.get(n) for n in first}, first) for t in mine)
        if context is not None and ruled_out_at_any_lr(context.config_of(first), failures):
            continue  # its class failed with more optimizer steps: every lr of it would be skipped (failed_class)
        if not done and context is not None:
            done = failed_class(context.config_of(first), failures, context.baseline, context.rule) is not None
        if (
            done
            and context is not None
            and "lr" in first
            and raised_lr_needed(context.config_of(first), failures, context.baseline, context.rule) is not None
        ):
            raised = context.raised_point(first, failures)  # under-trained: every smaller lr is ruled out; next up or none
            if raised is not None and not any(_same({n: t.params.get(n) for n in raised}, raised) for t in mine):
                out.extend([] if _twin_asked(raised, out, context) else [(raised, {"stage": "full"})])
            continue
        # done: the sampler chooses the lr, at the baseline's accumulation (a larger one trains fewer
        # optimizer steps, which failed_class rules out once the class failed)
        again = {**system, **({k: v for k, v in fixed.items() if k == "accumulate_grad_batches"} if context is not None else {})}
        if done and not set(fixed) - set(again):
            continue  # no convergence knob left for the sampler (lr is not searched): it could only ask the same config again
        point = again if done else first
        if context is None or not _twin_asked(point, out, context):
            out.append((point, {"stage": "full"}))
    return out


def unscreened_round(
    trials: Sequence[Any], unscreened: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any], context: MathContext, k: int = STAGE2_CONFIGS
) -> list[tuple[dict, dict]]:
    """Stage 2's next round once no screened system config can beat the best feasible trial: up to
    ``k`` system configs stage 1 did not screen, each run at full budget (so its loss is judged) at
    the math :func:`stage2_round` would give it (a math-preserving split, else the lr rule's lr),
    in :func:`autotune.study.screen.batch_ladder` order from the fastest completed trial's other
    system knobs (coordinate search from the best point so far), leaving out a config whose class
    failed the loss already (:func:`autotune.study.math_class.failed_class`) and one that moves a knob
    to a value the study measured slower than the fastest trial's (:func:`slower_moves`). A short search of a
    regression MLP screened batch 64 alone above its baseline's 32 and then sampled every knob at
    random; batch 128 at the rule's lr, never run, was 2.2x faster within the loss tolerance.

    Args:
        trials: The study's frozen trials.
        unscreened: System points no trial has visited (:func:`screen_points`, seeded order).
        fixed: The baseline's Optuna params of the convergence knobs.
        context: The study's :class:`MathContext`.
        k: Trials per round.
    """
    failures = failures_of(_full_budget_runs(trials))
    best = top_system_configs(trials, k=1)
    candidates: list[dict[str, Any]] = []
    preserving: list[dict[str, Any]] = []  # the math-preserving candidates
    for point in unscreened:
        split = context.split(point, fixed)
        params = split or context.first_point(point, fixed)
        config = context.config_of(params)
        if ruled_out_at_any_lr(config, failures) or failed_class(config, failures, context.baseline, context.rule) is not None:
            continue
        candidates.append(params)
        if split is not None:
            preserving.append(params)
    out: list[tuple[dict, dict]] = []
    slower = slower_moves(trials, best[0]) if best else set()
    for params in batch_ladder(candidates, context, best[0] if best else None):
        if len(out) == k:
            break
        if best and any((n, v) in slower for n, v in params.items() if n in best[0] and v != best[0][n]):
            continue  # a knob value the study measured slower than the fastest config's, in every config that ran both
        if any(params is p for p in preserving):  # the baseline's math, judged already: speed alone
            out.append((params, {"stage": "full", "math": PRESERVING}))
        elif not _twin_asked(params, out, context):  # one config per convergence question
            out.append((params, {"stage": "full"}))
    return out


def _twin_asked(point: Mapping[str, Any], out: Sequence[tuple[dict, dict]], context: MathContext) -> bool:
    """Whether the round ``out`` already asks ``point``'s convergence question, from a faster system
    config (ranked first): :func:`autotune.study.math_class.same_question`, on ``lr`` when both fix it."""
    config = context.config_of(point)
    return any(same_question(config, context.config_of(o), "lr" in point and "lr" in o) for o, _ in out)


def _preserving_round(
    trials: Sequence[Any],
    tried: Sequence[Any],
    ranked: Sequence[tuple[dict, float]],
    fixed: Mapping[str, Any],
    incumbent: float,
    failures: list[Failure],
    context: MathContext,
) -> list[tuple[dict, dict]]:
    """The fastest math-preserving config left for a full-budget run, as a round of one (or none): see :func:`stage2_round`."""
    insane = [t.params for t in trials if (t.user_attrs.get("loss_sanity") or {}).get("ok") is False]
    for system, speed in ranked:
        if speed <= incumbent:
            break  # fastest first: none after it can win
        params = context.split(system, fixed)
        if (
            params is None
            or any(_same(t.params, params) for t in tried)  # had its full-budget run (the baseline's config too)
            or any(_same(p, params) for p in insane)
            or failed_class(context.config_of(params), failures, context.baseline, context.rule) is not None
        ):
            continue
        return [(params, {"stage": "full", "math": PRESERVING})]
    return []


def math_context(settings: StudySettings) -> tuple[MathContext, str]:
    """The study's :class:`MathContext` and the reason for its lr rule (:func:`lr_rule`: the space's
    ``lr_scaling``, else the optimizer the inspection recorded, else square-root)."""
    resolved = settings.space
    rule, why = lr_rule(str(resolved.get("lr", {}).get("scaling", "none")), (settings.model_info or {}).get("optimizer"))
    return MathContext(TrialConfig.from_dict(settings.baseline_config), resolved, rule), why


def class_failed(study, config: TrialConfig, settings: StudySettings) -> str | None:
    """Why a stage-2 trial's config need not run (:func:`autotune.study.math_class.failed_class`), or ``None``."""
    context, _ = math_context(settings)
    return failed_class(config, failures_of(_full_budget_runs(study.get_trials(deepcopy=False))), context.baseline, context.rule)


def _full_budget_runs(trials: Sequence[Any]) -> list[Any]:
    """The completed search trials of ``trials`` that trained the study's whole budget (no
    confirmation run, no short stage-1 screen: ``trial_samples`` marks one)."""
    return [t for t in trials if t.state.name == "COMPLETE" and "confirm_of" not in t.user_attrs and "trial_samples" not in t.user_attrs]


def _convergence(resolved: Mapping[str, Any]) -> set:
    """Optuna parameter names of the convergence knobs: :data:`CONVERGENCE_KNOBS` and the user's constructor arguments."""
    return {param_name(name, resolved[name]) for name in resolved if name in CONVERGENCE_KNOBS or user_arg(name) is not None}


def _screen(study, settings: StudySettings) -> list[dict[str, Any]] | None:
    """Stage 1's unvisited system points of this study (:func:`screen_points`), the baseline's counted as visited."""
    resolved = settings.space
    baseline = TrialConfig.from_dict(settings.baseline_config)
    return screen_points(
        study.get_trials(deepcopy=False),
        resolved,
        _convergence(resolved),
        int(settings.seed) + len(study.get_trials(deepcopy=False)),
        [baseline_params(resolved, baseline)],
    )


def screen_room(study, settings: StudySettings) -> int:
    """Stage-1 screening runs a discrete system space has left (0 when the sampler chooses them)."""
    screen = _screen(study, settings)
    return len(screen) if screen is not None else 0


def _staged_search(
    study,
    settings: StudySettings,
    ui: UI,
    drain: Callable[..., int],
    add: int,
    seeds: list,
    full_room: int | None = None,
    plan: Any = None,
) -> int:
    """``--search staged``: stage 1 samples the system knobs with short throughput runs, the
    math-preserving configs first (the baseline's effective batch, lr and constructor arguments:
    :func:`screen_order`); stage 2 gives the fastest math-preserving config a full-budget round of its
    own, then trains the fastest math-changing system configs at full budget in rounds of
    :data:`STAGE2_CONFIGS` (see :func:`stage2_round`), first at the baseline's accumulation and the lr
    rule's lr, then with the sampler choosing those; when no system config can beat the best feasible
    trial, the rest sample every knob. Trials
    are marked ``stage`` (``system`` or ``full``); short runs are never recommended. ``drain`` carries the
    run's warm processes, which serve every round (and the confirmation after it). ``full_room`` (a discrete space): the configs no trial has run at
    full budget yet, which bounds the full-budget runs (the baseline's and ``--enqueue``'s included);
    the runs above it screen more system configs instead, or are not added. ``plan`` (a
    :class:`autotune.study.plan._Plan`) records what the run has still to add. Returns the trials this
    process ran."""

    resolved = settings.space
    baseline = TrialConfig.from_dict(settings.baseline_config)
    convergence = _convergence(resolved)
    system_knobs = any(param_name(name, entry) not in convergence for name, entry in resolved.items())
    baseline_needed = study.user_attrs.get(BASELINE_ATTR) is None and not _baseline_pending(study)
    n_system, n_full = staged_plan(add, baseline_needed, len(seeds), system_knobs)
    fixed = {key: value for key, value in baseline_params(resolved, baseline).items() if key in convergence}
    screen = _screen(study, settings)
    if screen is not None and len(screen) < n_system:
        n_system, n_full = len(screen), n_full + n_system - len(screen)
    if full_room is not None:
        room = max(0, full_room - (1 if baseline_needed else 0) - len(seeds))
        if n_full > room:  # the space has no more configs to train at full budget: screen more, or add fewer
            more = min(n_full - room, len(screen) - n_system) if screen is not None else 0
            n_system, n_full = n_system + more, room
    context, why = math_context(settings)
    same_math = same_math_phrase(resolved, baseline)
    if screen is not None:  # a discrete system space: unvisited points, in a seeded random order, math-preserving first
        points = screen_order(screen, n_system, fixed, context)
        first = [(params, {"stage": "system", "screen": True}) for params in points]
        preserving = sum(context.split(system_part(p), fixed) == p for p in points)
        lead = f"{preserving} math-preserving first: {same_math}" if preserving else f"none keeps {same_math}"  # not "0 ... first"
    else:
        first = [(dict(fixed), {"stage": "system"}) for _ in range(n_system)]
        lead = "sampled by the sampler"
    # a part with no run is not listed (a 1-trial run adds only the baseline's)
    screens = f"{n_system} system-knob screening run(s) ({lead}; {system_budget(baseline, int(settings.samples))} samples at the baseline's batch)"
    lr_part = (
        f"with the lr following the effective batch ({context.rule}: {why})"
        if "lr" in resolved  # else every run keeps the baseline's lr (two new users read a promise that it followed)
        else "at the baseline's lr (the space searches no lr: add lr as a relative: true range, or lr_scaling, for it to follow the effective batch)"
    )
    fulls = f"{n_full} full-budget run(s): the fastest math-preserving config, then the fastest system configs {lr_part}"
    seeded = f"{len(seeds)} --enqueue config(s) at full budget"  # (a new user read "no run beyond the baseline's", then one ran)
    parts = ", then ".join(p for n, p in ((len(seeds), seeded), (n_system, screens), (n_full, fulls)) if n)
    ui.info("staged search: " + (parts or "no run beyond the baseline's"))
    add = (1 if baseline_needed else 0) + len(seeds) + n_system
    _hold(plan, list(seeds) + first, add, n_full)
    return _stages(study, settings, ui, drain, add, list(seeds) + first, n_full, plan)


def same_math_phrase(resolved: Mapping[str, Any], baseline: TrialConfig) -> str:
    """What stage 1's math-preserving configs keep, for the plan's line: the effective batch split as
    micro-batch x accumulation, or, without ``accumulate_grad_batches`` in the space (manual
    optimization drops it), the baseline's batch itself."""
    if "accumulate_grad_batches" in resolved:
        return f"the baseline's effective batch {baseline.effective_batch_size} and lr, split as micro-batch x accumulation"
    return f"the baseline's batch {baseline.effective_batch_size} and lr"


def _stages(study, settings: StudySettings, ui: UI, drain: Callable[..., int], add: int, seeds: list, full: int, plan: Any = None) -> int:
    """Run a staged search's plan: queue and drain ``add`` trials (``seeds`` first: the baseline's turn,
    ``--enqueue``'s, stage 1's), then ``full`` stage-2 runs round by round (:func:`stage2_round`). A
    continued run (:mod:`autotune.study.plan`) starts here with what it had left. ``plan`` (a
    :class:`autotune.study.plan._Plan`) records the stage-2 runs not queued yet. Returns the trials
    this process ran."""
    resolved = settings.space
    fixed = {
        key: value
        for key, value in baseline_params(resolved, TrialConfig.from_dict(settings.baseline_config)).items()
        if key in _convergence(resolved)
    }
    context, _ = math_context(settings)
    ran = drain(add=add, seeds=seeds)
    left = full
    while left > 0:
        trials = study.get_trials(deepcopy=False)
        batch = stage2_round(trials, fixed, context=context)[:left]
        kind = (
            "math-preserving, at the baseline's effective batch and lr"
            if batch and batch[0][1].get("math") == PRESERVING
            else "math-changing"
        )
        if not batch:
            batch = unscreened_round(trials, _screen(study, settings) or [], fixed, context)[:left]
            kind = (
                "configs stage 1 did not screen, at full budget: each effective batch size from the smallest, "
                "at the fewest knobs changed from the fastest trial's"
            )
        if not batch:
            ui.info(
                "staged search: no system config left that could beat the best feasible trial (every one was screened, "
                f"or its batch's class failed the loss); the last {left} trial(s) sample every knob"
            )
            _hold(plan, [], left, 0)
            ran += drain(add=left)
            break
        ui.info(
            f"staged search, stage 2 ({kind}): "
            + "; ".join(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()) for params, _ in batch)
        )
        _hold(plan, batch, len(batch), left - len(batch))
        ran += drain(add=len(batch), seeds=batch)
        left -= len(batch)
    return ran


def _hold(plan: Any, seeds: list, held: int, full: int) -> None:
    """Record in ``plan`` (if any) the trials about to be queued (``held``, ``seeds`` first) and the
    stage-2 runs after them (``full``): until the queue has them, a stopped run's plan keeps them."""
    if plan is not None:
        plan.full = full
        plan.hold(seeds, held)
