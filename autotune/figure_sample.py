"""Which trials a report figure draws when a study has more than it can show.

A figure with a point per trial stays readable, small and quick to build up to a few thousand points;
a study of 10,000 trials would make each such figure of ``autotune report`` a blur of overlapping
marks, megabytes of HTML, and seconds of Optuna's own per-trial work. So above :data:`MAX_DRAWN`
trials a figure draws the trials that matter whatever their number (the baseline, the recommended
trial, the best feasible trial, the Pareto front) and a random sample of the others, with a fixed
seed (:data:`SAMPLE_SEED`: the same study gives the same figure), and says so in its subtitle
(:func:`drawn_note`).

Plain data only: works on anything with a ``number`` (frozen trials).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_DRAWN", "SAMPLE_SEED", "Drawn", "drawn_note", "drawn_trials", "light_study"]

#: Most trials a figure draws a point for (the trials always kept may add a few).
MAX_DRAWN = 2000
#: Seed of the random sample of the other trials.
SAMPLE_SEED = 0


@dataclass(frozen=True)
class Drawn:
    """The trials a figure draws.

    Attributes:
        trials: The trials drawn, by number.
        total: How many trials the figure would draw without a limit.
        preferred_left_out: How many of the ``prefer`` trials did not fit (they were sampled too).
    """

    trials: list
    total: int
    preferred_left_out: int = 0


def drawn_trials(
    trials: Sequence[Any],
    always: Collection[int] = (),
    prefer: Collection[int] = (),
    cap: int | None = None,
    seed: int = SAMPLE_SEED,
) -> Drawn:
    """``trials`` when there are at most ``cap``; else those in ``always``, then those in ``prefer``
    while they fit, then a random sample of the others, ``cap`` in all (more when ``always`` alone is more).

    Args:
        trials: The trials the figure would draw (frozen trials, or anything with a ``number``).
        always: Numbers of trials drawn whatever the cap (the baseline, the recommended trial).
        prefer: Numbers of trials drawn before any other (the Pareto front); sampled too when they
            alone are more than the room left.
        cap: Most trials drawn (>= 0); default :data:`MAX_DRAWN`.
        seed: Seed of the samples.

    Returns:
        The :class:`Drawn` trials, sorted by number.
    """
    cap = MAX_DRAWN if cap is None else cap
    if len(trials) <= cap:
        return Drawn(sorted(trials, key=lambda t: t.number), len(trials))
    rng = random.Random(seed)
    kept = [t for t in trials if t.number in always]
    preferred = [t for t in trials if t.number in prefer and t.number not in always]
    others = [t for t in trials if t.number not in always and t.number not in prefer]
    room = max(cap - len(kept), 0)
    left_out = max(len(preferred) - room, 0)
    if left_out:
        preferred = rng.sample(preferred, room)
    room -= len(preferred)
    chosen = kept + preferred + rng.sample(others, min(room, len(others)))
    return Drawn(sorted(chosen, key=lambda t: t.number), len(trials), left_out)


def drawn_note(drawn: Drawn, kept: str, preferred: str = "the preferred trials") -> str | None:
    """The subtitle of a figure that draws fewer trials than it has, else ``None``.

    Args:
        drawn: What :func:`drawn_trials` chose.
        kept: What was drawn before the sample, as words ("the baseline, the recommended trial, the
            fastest feasible trial").
        preferred: What ``prefer`` of :func:`drawn_trials` held, as words (when some were left out).

    Returns:
        ``"2,000 of 10,006 trials drawn: the baseline, ..., and a random sample of the others (seed 0)"``.
    """
    if len(drawn.trials) == drawn.total:
        return None
    note = f"{len(drawn.trials):,} of {drawn.total:,} trials drawn: {kept}, and a random sample of the others (seed {SAMPLE_SEED})"
    if drawn.preferred_left_out:
        note += f"; {drawn.preferred_left_out:,} of {preferred} left out, too many to draw"
    return note


def light_study(trials: Sequence[Any], directions: Sequence[Any], user_keys: Collection[str] = (), params: bool = True) -> Any:
    """An in-memory Optuna study of light copies of ``trials``, for Optuna's own figures of a sample.

    Optuna's figures read a study's every trial, deep-copied (``Study.get_trials()``); a copy holds
    only what a figure reads: its state, values, params (unless ``params`` is false), the constraints
    Optuna judges feasibility by, and the user attributes ``user_keys``. Optuna numbers the copies 0,
    1, ... in the order of ``trials``.

    Args:
        trials: Finished frozen trials of one study.
        directions: The study's directions.
        user_keys: User attributes copied (those a figure's ``target`` reads).
        params: Copy the params (the optimisation history reads none).
    """
    import optuna

    from autotune.optuna_compat import CONSTRAINTS_KEY

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line on the CLI's output
    try:
        study = optuna.create_study(directions=list(directions))
    finally:
        optuna.logging.set_verbosity(verbosity)
    study.add_trials(
        [
            optuna.trial.create_trial(
                state=t.state,
                params=t.params if params else None,
                distributions=t.distributions if params else None,
                values=t.values,
                user_attrs={k: t.user_attrs[k] for k in user_keys if k in t.user_attrs},
                system_attrs={CONSTRAINTS_KEY: t.system_attrs[CONSTRAINTS_KEY]} if CONSTRAINTS_KEY in t.system_attrs else {},
            )
            for t in trials
        ]
    )
    return study
