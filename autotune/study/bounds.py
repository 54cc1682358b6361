"""What the data bounds during a search: batch sizes larger than an epoch.

A training set whose length inspection cannot read (an ``IterableDataset``) may hold fewer samples
per device than a batch of the space. The first trial that asks for such a batch finds out: its
first batch comes short from a DataLoader built with the trial's batch size, and it fails
(``batch_size_not_applied``) with the epoch's samples per device in its rank report
(:func:`autotune.callback.check_batch_size`). :func:`learn_epoch` then stores that bound in the
study (user attribute :data:`EPOCH_ATTR`) and prints one line, and :func:`above_epoch` keeps every
later config with a larger per-device batch from running: it is stored as PRUNED
(``batch_above_epoch``, :func:`prune_above_epoch`) and replaced, like a predicted OOM. The sampler's
distributions stay as they are (Optuna does not let a study's categorical choices change); a resumed
search and every worker read the bound from the study.

A bound found with ``W`` devices bounds every config with ``W`` or more devices: a rank never sees
more samples per epoch when the data is split over more ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from autotune.config import TrialConfig
from autotune.errors import FailKind
from autotune.study.settings import StudySettings

if TYPE_CHECKING:
    from autotune.ui import UI

__all__ = ["EPOCH_ATTR", "above_epoch", "epoch_limit", "epoch_lines", "learn_epoch", "prune_above_epoch"]

#: Study user attribute: world size (as a string) to ``{"samples": epoch samples per device, "trial": number}``.
EPOCH_ATTR = "epoch_samples"


def epoch_limit(bounds: Mapping[str, Mapping[str, Any]], world_size: int) -> tuple[int, int] | None:
    """The largest per-device batch an epoch holds at ``world_size`` devices, and the trial that showed
    it: the smallest bound found with as many devices or fewer (pure); ``None`` when none is known."""
    found = [(int(b["samples"]), int(b["trial"])) for w, b in bounds.items() if int(w) <= world_size]
    return min(found) if found else None


def above_epoch(study: optuna.Study, config: TrialConfig) -> str | None:
    """Why ``config`` cannot run (its per-device batch is larger than an epoch), or ``None``."""
    limit = epoch_limit(study.user_attrs.get(EPOCH_ATTR) or {}, config.world_size)
    if limit is None or config.batch_size <= limit[0]:
        return None
    return (
        f"not run: batch_size {config.batch_size} is larger than an epoch ({limit[0]} samples per device, "
        f"as trial {limit[1]}'s first batch showed)"
    )


def learn_epoch(
    study: optuna.Study, number: int, ranks: Sequence[Mapping[str, Any]], config: TrialConfig, settings: StudySettings, ui: UI
) -> None:
    """Store the epoch's samples per device that a trial's ranks found (their first batch came short),
    and print one line when that bounds the space more than before.

    Args:
        study: The study.
        number: The trial's number.
        ranks: The trial's rank reports (:class:`autotune.rank_report.RankReport`).
        config: The trial's config.
        settings: The study's settings (the searched batch sizes, for the line).
        ui: Where the line goes.
    """
    found = [int(e["epoch_samples"]) for r in ranks if (e := r.get("error")) and e.get("epoch_samples") is not None]
    if not found:
        return
    samples = min(found)
    bounds = dict(study.user_attrs.get(EPOCH_ATTR) or {})
    known = epoch_limit(bounds, config.world_size)
    if known is not None and known[0] <= samples:
        return  # a trial sampled before the bound was known (another job, another worker)
    bounds[str(config.world_size)] = {"samples": samples, "trial": number}
    study.set_user_attr(EPOCH_ATTR, bounds)
    entry = settings.space.get("batch_size") or {}
    removed = [c for c in entry.get("choices", []) if c > samples]
    what = f"batch sizes {removed}" if removed else f"batch sizes above {samples}"
    ui.warn(
        f"removed {what} from the space: trial {number}'s training data ran out after {samples} samples per device "
        f"(an epoch){'' if config.world_size == 1 else f' on {config.world_size} devices'}; larger batches are not run"
    )


def prune_above_epoch(study: optuna.Study, trial: optuna.trial.Trial, reason: str):
    """Store a trial whose batch is larger than an epoch as PRUNED (not run, nothing printed; it counts
    against ``--trials``). Returns the frozen trial."""
    trial.set_user_attr("fail_kind", FailKind.BATCH_ABOVE_EPOCH)
    trial.set_user_attr("fail_reason", reason)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return study.get_trials(deepcopy=False)[trial.number]


def epoch_lines(study: optuna.Study) -> list[str]:
    """One line per bound the study holds (for ``autotune show`` and a resumed search)."""
    bounds = study.user_attrs.get(EPOCH_ATTR) or {}
    return [
        f"epoch: {b['samples']} samples per device with {w} or more device(s) (trial {b['trial']}): larger batches are not run"
        for w, b in sorted(bounds.items(), key=lambda item: int(item[0]))
    ]
