"""The input-bound line of the summary and the export header: what is left to try when the
recommended config waits on its data (:func:`autotune.objective.input_bound_advice`), weighed
against what the study measured with other ``num_workers``. Pure: frozen trials in, text out
(re-exported by :mod:`autotune.summary`, which holds the other result sentences).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.study.settings import StudySettings

__all__ = ["input_bound_line"]


def input_bound_line(trial: Any, settings: StudySettings, trials: Sequence[Any] = ()) -> str | None:
    """:func:`autotune.objective.input_bound_advice` for a stored trial of a study, or None.

    Args:
        trial: The frozen trial (a search trial or a confirmation run).
        settings: The study's settings (hardware, space, inspected DataLoader).
        trials: Every frozen trial of the study: the completed search trials (no confirmation run
            or duplicate) that ran ``trial``'s config with other ``num_workers`` (every other knob
            alike; ``prefetch_factor`` and ``persistent_workers`` may differ) are what the advice
            weighs against its samples/s (a confirmation run's is the search trial it confirms):
            those at the study's budget, else short screening runs (samples/s is a rate, measured
            after the warm-up either way). A trial with other knobs (another batch size or
            precision) is not weighed against ``trial``, but when no trial of ``trial``'s knobs ran
            other workers, more workers are not suggested if they measured slower in every other
            config that ran both (:func:`_slower_elsewhere`). Empty: nothing measured is weighed.
    """
    from autotune.objective import input_bound_advice

    accelerator = settings.hardware.get("accelerator", "cpu")
    # the user's DataLoader as inspected, overridden by what the trial's ranks really trained with
    loader = dict((settings.model_info or {}).get("loader") or {})
    applied = trial.user_attrs.get("applied") or {}
    loader.update({k: applied[k] for k in ("pin_memory", "prefetch_factor", "persistent_workers") if applied.get(k) is not None})
    config = trial.user_attrs.get("config", {})
    other, sps, missed = _other_workers(trial, config, trials)
    raced = _raced_workers(trial, config, trials, settings)
    elsewhere = None if other or raced else (_missed_text(missed) or _slower_elsewhere(config, trials))
    return input_bound_advice(
        trial.user_attrs.get("data_wait_fraction", 0.0), config, settings.space, accelerator, loader, other, sps, raced, elsewhere
    )


def _raced_workers(trial: Any, config: Mapping[str, Any], trials: Sequence[Any], settings: StudySettings) -> dict[int, str]:
    """``{num_workers: the race's figure}`` of each config that differs from ``trial``'s in its workers
    alone, raced against it (its search trial as the incumbent) and not won (see :func:`input_bound_line`)."""
    from autotune.summary import ratio_text  # (summary re-exports this module's line)

    if not any("pair_of" in t.user_attrs for t in trials):
        return {}
    from autotune.paired import MIN_EFFECT
    from autotune.study.races import races_of

    by_number = {t.number: t for t in trials}
    reference = int(trial.user_attrs.get("confirm_of", trial.number))

    out: dict[int, str] = {}
    for race in races_of(trials, settings):
        candidate = by_number.get(race.candidate)
        v = race.verdict
        if race.incumbent != reference or candidate is None or not v.pairs or v.outcome == "win":
            continue
        theirs = candidate.user_attrs.get("config") or {}
        if _without_workers(theirs) != _without_workers(config):
            continue
        figure = ratio_text(v.ratio, v.low, v.high, v.pairs, settings.objective, "this config")
        if not v.decided and v.ratio > 1 + MIN_EFFECT:  # ahead when the budget stopped it: not shown slower either
            figure += ", undecided: the confirmation budget stopped its race (a larger --confirm-share gives it room)"
        out[int(theirs.get("num_workers") or 0)] = figure
    return out


#: Config keys that only shape the DataLoader's workers: a trial differing in these alone ran "this config with other workers".
_WORKER_KEYS = ("num_workers", "prefetch_factor", "persistent_workers")


def _without_workers(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config without its :data:`_WORKER_KEYS`: equal for two configs that differ in their workers alone."""
    return {k: v for k, v in config.items() if k not in _WORKER_KEYS}


def _missed_text(missed: Mapping[int, int]) -> str | None:
    """The advice's words for more ``num_workers`` whose only runs missed the loss (``{workers: trial}``), or ``None``."""
    if not missed:
        return None
    runs = ", ".join(f"{w} in trial {n}" for w, n in sorted(missed.items()))
    return (
        f"other num_workers ran in this study but missed the baseline's loss ({runs}), so they are not suggested; "
        "a Dataset that draws random augmentations per sample draws other ones with other workers"
    )


def _other_workers(trial: Any, config: Mapping[str, Any], trials: Sequence[Any]) -> tuple[dict[int, float], float | None, dict[int, int]]:
    """``({num_workers other than the config's: best samples/s measured with it}, the config's own samples/s,
    {num_workers whose runs all missed the loss: the last such trial})`` over the study's completed search
    trials at its budget (see :func:`input_bound_line`). A run that missed the loss is not weighed: the
    advice had suggested the workers of a config the same summary called infeasible (helper-37)."""
    by_number = {t.number: t for t in trials}
    reference = by_number.get(trial.user_attrs.get("confirm_of"), trial) if "confirm_of" in trial.user_attrs else trial
    sps = reference.user_attrs.get("samples_per_sec")
    workers = int(config.get("num_workers") or 0)

    alike = [
        t
        for t in trials
        if t.state.name == "COMPLETE"
        and not {"confirm_of", "duplicate_of"} & t.user_attrs.keys()
        and int((t.user_attrs.get("config") or {}).get("num_workers") or 0) != workers
        and (t.user_attrs.get("samples_per_sec") or 0) > 0
        and _without_workers(t.user_attrs["config"]) == _without_workers(config)
    ]
    missed = {int(t.user_attrs["config"]["num_workers"]): t.number for t in alike if t.user_attrs.get("feasible") is False}
    alike = [t for t in alike if t.user_attrs.get("feasible") is not False]
    # full-budget runs first; short screening runs of the same knobs when none ran at full budget
    full = [t for t in alike if "trial_samples" not in t.user_attrs]
    other: dict[int, float] = {}
    for t in full or alike:
        w = int(t.user_attrs["config"]["num_workers"])
        other[w] = max(other.get(w, 0.0), float(t.user_attrs["samples_per_sec"]))
    return other, (float(sps) if sps else None), {w: n for w, n in missed.items() if w not in other}


def _slower_elsewhere(config: Mapping[str, Any], trials: Sequence[Any]) -> str | None:
    """What the study measured of more ``num_workers`` than ``config`` has with other knobs, when every
    such comparison found them slower, or ``None``: for each other config of the study's completed
    search trials (short screening runs too: samples/s is a rate after the warm-up) measured with
    ``config``'s workers and with more, every other knob alike, the best samples/s of each. A config no trial ran with other workers is otherwise told to add some
    that the same batch at another lr had measured 3x slower (a new user's in-memory tabular model)."""
    workers = int(config.get("num_workers") or 0)
    groups: dict[str, dict[int, float]] = {}
    for t in trials:
        cfg, sps = t.user_attrs.get("config"), t.user_attrs.get("samples_per_sec")
        if t.state.name != "COMPLETE" or {"confirm_of", "duplicate_of"} & t.user_attrs.keys() or not cfg or not sps:
            continue
        group = groups.setdefault(repr(sorted(_without_workers(cfg).items())), {})
        w = int(cfg.get("num_workers") or 0)
        group[w] = max(group.get(w, 0.0), float(sps))
    compared: list[tuple[float, int, float]] = []  # (samples/s with the config's workers, more workers, theirs)
    for group in groups.values():
        counts = [w for w in group if w > workers]
        if workers in group and counts:
            best = max(counts, key=lambda w: group[w])
            compared.append((group[workers], best, group[best]))
    if not compared or any(theirs > own for own, _, theirs in compared):
        return None
    own, more, theirs = max(compared, key=lambda c: c[2] / c[0])
    return (
        "more num_workers measured slower with other knobs in "
        + (f"each of the {len(compared)} configs" if len(compared) > 1 else "the one config")
        + " of this study that ran both "
        f"(at best {more}: {theirs:,.0f} samples/s vs {own:,.0f} with {workers})"
    )
