"""Read-only queries over a study's trials: the baseline, search records, duplicates, confirmation
groups, and the recommendation."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.config import TrialConfig
from autotune.confirm import ConfirmGroup, pick
from autotune.errors import AutotuneError, UsageError
from autotune.objective import TrialRecord, directions, recommend
from autotune.samplers import grid_space
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


def _measured_before(study, number: int, config: TrialConfig, budget: int):
    """The first completed search trial (not a confirmation run, nor itself a duplicate) with the same
    config and training budget as trial ``number``, or ``None``."""

    wanted, settings = config.to_dict(), settings_of(study)
    assert settings is not None  # only trials of an autotune study (it stores its settings) come here
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs = t.user_attrs
        if (
            t.number != number
            and attrs.get("config") == wanted
            and "confirm_of" not in attrs
            and "duplicate_of" not in attrs
            and _budget(attrs, settings) == budget
        ):
            return t
    return None


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


def confirm_candidates(study, settings: StudySettings, k: int) -> list:
    """The ``k`` best distinct feasible configs of the search (by the objective), baseline excluded, as frozen trials."""

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return []
    every = study.get_trials(deepcopy=False)
    remaining = _search_records(study, every)
    seen = [every[baseline_info["trial"]].params]
    picked: list[Any] = []
    while len(picked) < k:
        best = recommend(remaining, baseline_info["loss"], settings.loss_tolerance, settings.objective, settings.mode)
        if best is None:
            break
        remaining = [r for r in remaining if r.number != best.number]
        if every[best.number].params not in seen:
            seen.append(every[best.number].params)
            picked.append(every[best.number])
    return picked


def confirmation(study, settings: StudySettings, trials: list | None = None):
    """The confirmation groups of the study's latest confirmation budget, and the :class:`autotune.confirm.Pick`.

    Args:
        trials: A snapshot of ``study.get_trials()`` to read (else a fresh one).

    Returns:
        ``(groups, pick, samples)``, or ``None`` when the study has no confirmation run.
    """

    every = study.get_trials(deepcopy=False) if trials is None else trials
    runs = [t for t in every if "confirm_of" in t.user_attrs]
    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if not runs or baseline_info is None:
        return None
    samples = runs[-1].user_attrs["confirm_samples"]
    runs = [t for t in runs if t.user_attrs["confirm_samples"] == samples]
    baseline_params = every[baseline_info["trial"]].params
    by_config: dict[int, list] = {}  # the runs of each confirmed config, in the order their configs were first confirmed
    for t in runs:
        by_config.setdefault(t.user_attrs["confirm_of"], []).append(t)
    groups = []
    for number, mine in by_config.items():
        complete = [t for t in mine if t.state.name == "COMPLETE"]
        params = every[number].params
        groups.append(
            ConfirmGroup(
                number=number,
                values=tuple(_objective_value(t, settings.objective) for t in complete),
                losses=tuple(float(t.user_attrs.get("loss", math.nan)) for t in complete),
                failed=sum(t.state.name == "FAIL" for t in mine),
                distance=sum(params.get(name) != value for name, value in baseline_params.items()),
                baseline=number == baseline_info["trial"],
                runs=tuple(t.number for t in complete),
            )
        )
    maximize = directions(settings.objective, settings.mode)[0] == "maximize"
    return groups, pick(groups, maximize, settings.loss_tolerance, settings.mode), samples


def _objective_value(trial, objective: str) -> float:
    """The figure a confirmation run is judged by (samples/s for ``throughput`` and ``pareto``)."""
    attrs = trial.user_attrs
    if objective == "time-to-quality":
        return _seconds_to_target(attrs)
    if objective == "goodput":
        return float(attrs.get("goodput", math.nan))
    return float(attrs.get("samples_per_sec", math.nan))


def recommendation(study, settings: StudySettings, trials: list | None = None):
    """``(recommended_trial, baseline_trial)`` as Optuna FrozenTrials (either may be ``None``).

    When the study has confirmation runs, the recommendation is the confirmed config
    :func:`autotune.confirm.pick` chooses, represented by its run closest to its median, and the
    baseline likewise by its median confirmation run (both at the confirmation budget); otherwise
    the best single search trial and the baseline trial.

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
        groups, choice, _ = confirmed
        base_group = next((g for g in groups if g.baseline), None)
        if base_group is not None and base_group.median_run() is not None:
            baseline = by_number[base_group.median_run()]
        return (by_number[choice.chosen.median_run()] if choice.chosen else None), baseline
    best = recommend(_search_records(study, every), baseline_info["loss"], settings.loss_tolerance, settings.objective, settings.mode)
    return (by_number[best.number] if best else None), baseline


def confirmed_speed(study, settings: StudySettings, trials: list | None = None) -> dict[str, Any] | None:
    """Median samples/s of the recommended confirmed config's runs and of the baseline's, or ``None``.

    Args:
        trials: A snapshot of ``study.get_trials()`` to read (else a fresh one).

    Returns:
        ``{"trial", "samples_per_sec", "runs", "baseline_trial", "baseline_samples_per_sec", "baseline_runs", "samples"}``.
    """

    every = study.get_trials(deepcopy=False) if trials is None else trials
    confirmed = confirmation(study, settings, every)
    if confirmed is None or confirmed[1].chosen is None:
        return None
    groups, choice, samples = confirmed
    base = next((g for g in groups if g.baseline), None)

    def speed(group) -> float:
        return statistics.median(every[n].user_attrs["samples_per_sec"] for n in group.runs) if group and group.runs else math.nan

    return {
        "trial": choice.chosen.number,
        "samples_per_sec": speed(choice.chosen),
        "runs": len(choice.chosen.runs),
        "baseline_trial": base.number if base else None,
        "baseline_samples_per_sec": speed(base),
        "baseline_runs": len(base.runs) if base else 0,
        "samples": samples,
    }
