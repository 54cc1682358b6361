"""Read-only queries over a study's trials: the baseline, search records, duplicates, confirmation
groups, and the recommendation."""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.config import TrialConfig
from autotune.errors import AutotuneError, UsageError
from autotune.objective import TrialRecord, recommend
from autotune.samplers import grid_space
from autotune.study.races import _same_math, confirmation_of, objective_value
from autotune.study.settings import BASELINE_ATTR, StudySettings, settings_of


def _budget(attrs: Mapping[str, Any], settings: StudySettings) -> int:
    """Training samples of a trial: a confirmation run's or a stage-1 run's own budget, else the study's ``samples``."""
    return int(attrs.get("confirm_samples") or attrs.get("trial_samples") or settings.samples)


def records_of(study, trials: list | None = None) -> list:
    """:class:`~autotune.objective.TrialRecord` of every trial of a study (of ``trials``, a snapshot
    of ``study.get_trials()``, when given)."""

    out = []
    for t in study.get_trials(deepcopy=False) if trials is None else trials:
        attrs = t.user_attrs
        out.append(
            TrialRecord(
                number=t.number,
                complete=t.state == optuna.trial.TrialState.COMPLETE,
                samples_per_sec=float(attrs.get("samples_per_sec", math.nan)),
                loss=float(attrs.get("loss", math.nan)),
                baseline=bool(attrs.get("baseline", False)),
                time_to_target=_seconds_to_target(attrs),
                target_reached=bool(attrs.get("target_reached", False)),
                goodput=float(attrs.get("goodput", math.nan)),
                feasible=None if attrs.get("feasible") is None else bool(attrs["feasible"]),
            )
        )
    return out


def _seconds_to_target(attrs: Mapping[str, Any]) -> float:
    """A trial's stored ``time_to_target``: ``inf`` when stored as None (never reached), NaN when absent."""
    if "time_to_target" not in attrs:
        return math.nan
    value = attrs["time_to_target"]
    return math.inf if value is None else float(value)


def _first_baseline(study) -> int | None:
    """Number of the study's baseline trial: its first baseline-flagged trial that did not fail."""
    numbers = [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.state.name != "FAIL"]
    return min(numbers) if numbers else None


def _baseline_pending(study) -> bool:
    """Whether a baseline trial is waiting or running (so its result is still to come)."""
    return any(t.user_attrs.get("baseline") and t.state.name in ("WAITING", "RUNNING") for t in study.get_trials(deepcopy=False))


def full_budget_trials(trials) -> list:
    """The completed search trials at the study's own budget: no short stage-1 run (``trial_samples``),
    no confirmation run (``confirm_of``: another budget) and no duplicate (``duplicate_of``: another
    trial's figures, not a measurement of its own).

    Args:
        trials: Frozen Optuna trials of one study, in any state.
    """
    return [
        t
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE and not {"trial_samples", "confirm_of", "duplicate_of"} & t.user_attrs.keys()
    ]


def _search_records(study, trials: list | None = None) -> list:
    """:func:`records_of` without confirmation runs and stage-1 runs (their other budgets make them
    incomparable) and duplicates (their figures are another trial's).

    Every query that indexes trials by number reads the study once (``trials``, else a fresh
    snapshot) and takes numbers only from that read: other processes add trials all the time, so
    numbers from a later read can be past the end of an earlier one."""
    every = study.get_trials(deepcopy=False) if trials is None else trials
    return [
        r
        for r in records_of(study, every)
        if "confirm_of" not in every[r.number].user_attrs
        and "duplicate_of" not in every[r.number].user_attrs
        and "trial_samples" not in every[r.number].user_attrs
    ]


#: Per storage and study: the finished trials indexed, and the completed search trials by (config, budget).
_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _measured_before(study, number: int, config: TrialConfig, budget: int):
    """The first completed search trial (not a confirmation run, nor itself a duplicate) with the same
    config and training budget as trial ``number``, or ``None``."""

    settings = settings_of(study)
    assert settings is not None  # only trials of an autotune study (it stores its settings) come here
    # an index of the completed search trials by (config, budget), each finished trial added once
    # (Optuna never changes a finished trial): a lookup instead of a pass over the study per trial
    seen, first = _MEASURED.setdefault(study._storage, {}).setdefault(study._study_id, (set(), {}))
    every = study.get_trials(deepcopy=False)
    for t in every:
        if t._trial_id in seen or not t.state.is_finished():
            continue
        seen.add(t._trial_id)
        attrs = t.user_attrs
        if t.state == optuna.trial.TrialState.COMPLETE and "confirm_of" not in attrs and "duplicate_of" not in attrs and "config" in attrs:
            key = (json.dumps(attrs["config"], sort_keys=True), _budget(attrs, settings))
            first.setdefault(key, []).append(t.number)
    numbers = first.get((json.dumps(config.to_dict(), sort_keys=True), budget), [])
    found = min((n for n in numbers if n != number), default=None)
    return None if found is None else every[found]


def configs_left(study, resolved: Mapping[str, Any]) -> tuple[int, int] | None:
    """How many distinct configs a discrete space has, and how many of them trials ran already.

    A config counts as run once a search trial at the study's own budget has its params, whatever
    its state (a failed or pruned config is not a new config either); confirmation runs and short
    stage-1 runs (another budget) do not count, nor do queued trials whose params are not sampled yet.

    Args:
        study: The study.
        resolved: Its resolved space (``settings.space``).

    Returns:
        ``(configs in the space, configs run)``, or ``None`` when a knob is a continuous range (the
        space has no end).
    """
    try:
        grid = grid_space(resolved)
    except UsageError:
        return None
    size = math.prod(len(values) for values in grid.values())
    run = set()
    for t in study.get_trials(deepcopy=False):
        if not t.params or "confirm_of" in t.user_attrs or "trial_samples" in t.user_attrs:
            continue
        point = tuple(t.params.get(name) for name in grid)
        if all(value in grid[name] for value, name in zip(point, grid)):
            run.add(point)
    return size, len(run)


def trial_log(trial, study_name: str) -> str:
    """The end of a trial's own output (stdout and stderr of all its ranks), as the trial stored it
    (user attribute ``log``, at most :data:`autotune.runner.LOG_KEEP_BYTES`); ``""`` when it printed nothing.

    Args:
        trial: A frozen Optuna trial.
        study_name: Its study's name (for the command in a message).

    Raises:
        AutotuneError: The trial kept no output, and why: not run (a duplicate, a predicted OOM, a batch
            above an epoch), not ended yet, or stored before trials kept their output.
    """
    attrs = trial.user_attrs
    if isinstance(attrs.get("log"), str):
        return attrs["log"]
    n = trial.number
    if "duplicate_of" in attrs:
        original = attrs["duplicate_of"]
        raise AutotuneError(
            f"trial {n} was not run: it copies trial {original}'s figures (a duplicate); see `autotune show {study_name} {original} --log`"
        )
    if trial.state.name in ("WAITING", "RUNNING"):
        raise AutotuneError(f"trial {n} is {trial.state.name.lower()}: its output is stored when it ends")
    if attrs.get("fail_kind") in ("predicted_oom", "batch_above_epoch"):
        raise AutotuneError(f"trial {n} was not run ({attrs['fail_kind']}), so it has no output")
    tail = " (its log_tail: `autotune show " + study_name + f" {n} --format json`)" if attrs.get("log_tail") else ""
    raise AutotuneError(f"trial {n} has no stored output: it ran before autotune kept trial output, or its process never started{tail}")


#: A config of the baseline's math whose one search run measured at least this share of the baseline's
#: figure (samples/s; for ``time-to-quality``, the baseline's seconds over it) is a near tie: raced when
#: no other candidate is (:func:`confirm_candidates`). One unpaired run on this 2-core CPU moves 10% or
#: more: the zoo's CNN's ``bf16-mixed`` at its baseline's batch won its paired races by 1.14x (4 pairs)
#: and 1.26x (2), but in another search its one run measured no faster than the baseline's, and
#: nothing was raced.
NEAR_TIE = 0.9


def confirm_candidates(study, settings: StudySettings, k: int) -> list:
    """The ``k`` best distinct feasible configs of the search (by the objective), baseline excluded, as
    frozen trials. A config of the baseline's math whose own search run measured no better than the
    baseline's is not raced (its race is on the same measure): a regression MLP's confirmation spent
    its budget racing a math-preserving config at 3,608 samples/s against the baseline's 5,976, and
    had none left for batch 128 at 13,062. One of other math is (its race is on the seconds to the
    baseline's loss: a larger lr at the same speed can win it), when its search run reached the loss
    target sooner than the baseline's; one that did not, or whose time to it is unknown (a model with no
    loss curve), cannot win and is not raced (a new user's manual-optimization model had its budget
    offered to a config measured at 116 samples/s against the baseline's 639). When no other candidate is raced, the
    fastest such config within :data:`NEAR_TIE` of the baseline's figure is: its race is what tells a
    real 10-25% gain from a single run's noise, and the confirmation budget would otherwise go unused.

    Under ``throughput`` and ``goodput``, when fewer than ``k`` are found, the longer-training candidates
    follow (:func:`longer_candidates`: infeasible at ``--samples``, extrapolated sooner to the baseline's
    loss with more samples), raced on longer runs.

    Under ``throughput`` and ``goodput`` a candidate of other math than the baseline's is also raced on
    its seconds to the loss target (:func:`autotune.paired.judge`), so one whose own search trial was
    already slower to the target than the baseline trial (or never reached it) goes after the others,
    in the same order among themselves: a tight confirmation budget then races first the candidates
    that can win. Measured (the zoo's demo ``BoringModel`` beside the test suite): the fastest
    candidate by samples/s was bf16 at batch 32, ~8.7 s to the target in its trial against the
    baseline's 2.6 s; it took the whole budget to lose, while fp32 at batch 32 (0.59 s) won 14x on a
    quiet run.
    """

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return []
    every = study.get_trials(deepcopy=False)
    remaining = _search_records(study, every)
    seen = [every[baseline_info["trial"]].params]
    picked: list[Any] = []
    near: list[Any] = []  # the fastest config of the baseline's math below it, when a near tie
    below = False  # past the baseline's own search run in the ranking
    base = every[baseline_info["trial"]]
    base_config = base.user_attrs.get("config")
    while len(picked) < k:
        best = recommend(remaining, baseline_info["loss"], settings.loss_tolerance, settings.objective, settings.mode)
        if best is None:
            break
        remaining = [r for r in remaining if r.number != best.number]
        if best.number == baseline_info["trial"]:
            below = True  # the baseline's search run: the rest measured no better than it in their own
            continue
        best_config = every[best.number].user_attrs.get("config")
        if below and best_config and _same_math(base_config, best_config):
            if not near and every[best.number].params not in seen and _near_tie(every[best.number], base, settings.objective):
                near.append(every[best.number])
            continue  # the baseline's math, no faster in its own run: its race, on samples/s, would spend the budget
        if below and settings.objective != "pareto" and not _sooner_to_target(every[best.number], base):
            continue  # other math, no faster in its own run and not sooner to the loss target: it cannot win its race
        if every[best.number].params not in seen:
            seen.append(every[best.number].params)
            picked.append(every[best.number])
    if not picked and k > 0:
        picked = near
    if settings.objective in ("throughput", "goodput") and len(picked) < k:
        picked += longer_candidates(every, base, settings, seen)[: k - len(picked)]
    if settings.objective in ("throughput", "goodput"):
        picked.sort(key=lambda t: _slower_to_target(t, base))
    return picked


#: Most training samples a paired run of a longer-training candidate (:func:`longer_candidates`) trains, as a
#: multiple of ``--samples``; its runs stop at the loss target (:func:`autotune.study.racing.stop_target`).
LONGER_FACTOR = 2.0


def longer_candidates(every: list, base: Any, settings: StudySettings, seen: list | None = None) -> list:
    """Search trials of other math than the baseline ``base`` that missed the loss tolerance at
    ``--samples`` but whose training loss, extrapolated along its curve
    (:func:`autotune.objective.time_to_target`), reaches the baseline's loss target within
    :data:`LONGER_FACTOR` times ``--samples`` and sooner in wall time than the baseline's run by at least
    :data:`autotune.paired.MIN_EFFECT`: fastest to the target first, params in ``seen`` left out.

    A larger batch at a larger lr often needs more samples for the same loss and yet gets there sooner
    (fewer, faster steps): the time-to-train of large-batch training (Goyal et al. 2017; MLPerf Training
    counts the time to a quality target, whatever the samples). At equal samples it fails the loss and
    is never a candidate; raced on runs of up to :data:`LONGER_FACTOR` times ``--samples`` that stop at the
    baseline's loss, it wins only where it is sooner there in paired runs, and the recommendation then
    says how much longer to train it (:func:`autotune.summary.longer_line`). Measured: the zoo's vision
    transformer at batch 128 and 6.3x the lr missed the loss by 101% at 8,192 samples, extrapolated to
    the target in 2.7 s against the baseline's 4.1 s.
    """
    from autotune.paired import MIN_EFFECT

    theirs = base.user_attrs.get("time_to_target")
    if theirs is None or not math.isfinite(float(theirs)):
        return []
    ceiling = LONGER_FACTOR * max(1, settings.samples)
    found = []
    for t in full_budget_trials(every):
        attrs = t.user_attrs
        mine, samples = attrs.get("time_to_target"), attrs.get("samples_to_target")
        if attrs.get("feasible") is not False or attrs.get("baseline") or attrs.get("target_reached") or mine is None or samples is None:
            continue
        if float(samples) > ceiling or float(mine) * (1 + MIN_EFFECT) >= float(theirs) or t.params in (seen or []):
            continue
        if _same_math(base.user_attrs.get("config"), attrs.get("config")):
            continue  # the baseline's math that missed its loss: broken, not slow to converge
        found.append(t)
    return sorted(found, key=lambda t: float(t.user_attrs["time_to_target"]))


def is_longer(trial: Any) -> bool:
    """Whether a candidate search trial is a longer-training one (:func:`longer_candidates`): it missed the loss at ``--samples``."""
    return trial.user_attrs.get("feasible") is False


def _near_tie(trial: Any, base: Any, objective: str) -> bool:
    """Whether ``trial``'s search run measured within :data:`NEAR_TIE` of the baseline trial ``base``'s
    figure (:func:`autotune.study.races.objective_value`; seconds to the target under ``time-to-quality``)."""
    mine, theirs = objective_value(trial, objective), objective_value(base, objective)
    if not (math.isfinite(mine) and math.isfinite(theirs)) or mine <= 0 or theirs <= 0:
        return False
    share = theirs / mine if objective == "time-to-quality" else mine / theirs
    return share >= NEAR_TIE


def _sooner_to_target(trial, base) -> bool:
    """Whether ``trial``'s search run reached the loss target sooner than the baseline trial ``base``'s
    (both times known: a model with no loss curve has none)."""
    mine, theirs = trial.user_attrs.get("time_to_target"), base.user_attrs.get("time_to_target")
    if mine is None or theirs is None or not trial.user_attrs.get("target_reached"):
        return False
    return math.isfinite(float(mine)) and float(mine) < float(theirs)


def _slower_to_target(trial, base) -> bool:
    """Whether ``trial`` changes ``base``'s math and its search run was slower to the loss target than ``base``'s."""
    theirs = base.user_attrs.get("time_to_target")
    if theirs is None or "target_reached" not in trial.user_attrs:
        return False  # no curve to judge by
    if _same_math(base.user_attrs.get("config"), trial.user_attrs.get("config")):
        return False
    mine = trial.user_attrs.get("time_to_target")
    return mine is None or float(mine) > float(theirs)


#: Study attribute set when confirmation ran but its first race did not start (its minimum pairs would
#: pass the budget, :mod:`autotune.study.racing`): the samples per paired run it would have had.
UNRACED_ATTR = "confirm_unraced"

#: Study attribute: the search trials of the candidates confirmation left unraced because their pairs
#: would pass its budget (:mod:`autotune.study.racing`), so that the summary says so (a new user's
#: feasible config at 13x the baseline's speed to the loss target went unmentioned under "confirmed:
#: no candidate was shown at least 5% better", the same-math race before it having spent the budget).
UNRACED_CANDIDATES_ATTR = "confirm_unraced_candidates"


def confirmation(study, settings: StudySettings, trials: list | None = None):
    """The study's paired confirmation at its latest confirmation budget (:mod:`autotune.study.races`).

    Args:
        trials: A snapshot of ``study.get_trials()`` to read (else a fresh one).

    Returns:
        A :class:`autotune.study.races.Confirmation`, or ``None`` when the study has no paired run. A
        study whose first race was not started because its minimum pairs would pass the confirmation
        budget (:data:`UNRACED_ATTR`) has one with no race: the baseline is recommended.
    """

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return None
    import dataclasses

    from autotune.study.races import Confirmation

    every = study.get_trials(deepcopy=False) if trials is None else trials
    confirmed = confirmation_of(every, settings, baseline_info["trial"])
    unraced = study.user_attrs.get(UNRACED_ATTR)
    if confirmed is None and unraced is not None:
        base = baseline_info["trial"]
        confirmed = Confirmation((), (), base, base, int(unraced), 1.0, 1.0, 1.0, 0, None, None)
    if confirmed is None:
        return None
    raced = {r.candidate for r in confirmed.races}
    left = tuple(int(n) for n in study.user_attrs.get(UNRACED_CANDIDATES_ATTR) or () if int(n) not in raced)
    return dataclasses.replace(confirmed, unraced=left) if left else confirmed


def recommendation(study, settings: StudySettings, trials: list | None = None):
    """``(recommended_trial, baseline_trial)`` as Optuna FrozenTrials (either may be ``None``).

    When the study has paired confirmation runs, the recommendation is the config that won the last
    race of the chain from the baseline, represented by its paired run closest to its median, and the
    baseline by its paired run closest to its median in its first race (both at the confirmation
    budget); when no race was won, the baseline is recommended (at 1.00x) as its search trial, which
    trained the study's whole ``--samples`` (a paired run may have been shorter: a same-math race's), and
    it is the baseline too. Without paired runs: the best single search trial and the baseline trial;
    under ``throughput`` and ``goodput`` not one of other math whose search run was slower to the
    study's loss target than the baseline's (:func:`_slower_to_target`: what a race judges it on).

    Args:
        trials: A snapshot of ``study.get_trials()`` to read (else a fresh one); the two trials
            returned are taken from it (digests when it holds digests, see :mod:`autotune.study.digest`).
    """

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return None, None
    every = study.get_trials(deepcopy=False) if trials is None else trials
    by_number = {t.number: t for t in every}
    baseline = by_number.get(baseline_info["trial"])
    confirmed = confirmation(study, settings, every)
    if confirmed is not None:
        if confirmed.chosen_run is None:  # no race won: the baseline's own search trial, at the whole budget
            return baseline, baseline
        if confirmed.baseline_run is not None:
            baseline = by_number[confirmed.baseline_run]
        return by_number[confirmed.chosen_run], baseline
    records = _search_records(study, every)
    if settings.objective in ("throughput", "goodput") and baseline is not None:
        # a config of other math slower to the baseline's training loss in its own run is no speed-up to
        # that loss, whatever its samples/s: a race would reject it (helper-33's --confirm 0 recommended
        # batch 64 at 1.38x samples/s and 0.62x to the loss)
        records = [r for r in records if not _slower_to_target(by_number[r.number], baseline)]
    best = recommend(records, baseline_info["loss"], settings.loss_tolerance, settings.objective, settings.mode)
    return (by_number[best.number] if best else None), baseline


def confirmed_speed(study, settings: StudySettings, trials: list | None = None) -> dict[str, Any] | None:
    """The recommended config's paired ratio over the baseline, or ``None`` without paired runs.

    Args:
        trials: A snapshot of ``study.get_trials()`` to read (else a fresh one).

    Returns:
        ``{"trial", "ratio", "low", "high", "pairs", "baseline_trial", "samples", "won", "timed", "races"}``: the chosen
        config's search trial, the ratio (> 1: better) and its 90% interval, the paired runs behind
        it, the baseline's search trial, samples per paired run, whether any race was won (else
        the baseline is recommended at 1.00x), and whether a won race was judged on the seconds to the
        baseline's loss (a config of other math: ``Verdict.timed``), and the won races behind the ratio.
    """
    return speed_of(confirmation(study, settings, trials))


def speed_of(confirmed: Any) -> dict[str, Any] | None:
    """:func:`confirmed_speed` of a :class:`autotune.study.races.Confirmation` already computed
    (:func:`confirmation`; ``None`` gives ``None``): the export reads it once for its lines and its ratio."""
    if confirmed is None:
        return None
    return {
        "trial": confirmed.chosen,
        "ratio": confirmed.ratio,
        "low": confirmed.low,
        "high": confirmed.high,
        "pairs": confirmed.pairs,
        "baseline_trial": confirmed.baseline,
        "samples": confirmed.won[-1].samples if confirmed.won else confirmed.samples,
        "won": bool(confirmed.won),
        "timed": any(r.verdict.timed for r in confirmed.won),
        "races": len(confirmed.won),
    }


def run_again(trials: Sequence[Any]) -> dict[int, int]:
    """``{failed trial: the later trial that ran its config again}``: an interrupted trial queued again
    (``retry_of``), or a race's paired run queued again after it failed (the same race, pair and role:
    :func:`autotune.study.races.races_of`). A summary that listed an interrupted trial only as failed
    read as a measurement lost (helper-31)."""
    again: dict[int, int] = {}
    slots: dict[tuple, int] = {}
    for t in trials:
        attrs = t.user_attrs
        if attrs.get("retry_of") is not None:
            again.setdefault(int(attrs["retry_of"]), t.number)
        if "pair_of" in attrs:
            key = tuple(attrs.get(k) for k in ("incumbent", "pair_of", "pair_index", "confirm_of", "confirm_samples", "confirm_budget"))
            if key in slots:  # the failed try before it
                again.setdefault(slots.pop(key), t.number)
            if t.state.name == "FAIL":
                slots[key] = t.number
    return again
