"""``autotune show``: a study's trial table (at most :data:`SHOW_LIMIT` rows by default), every trial
as JSON or YAML, one trial, or one trial's own output.

A study of 10,000 trials drawn as a table is 10,000 rows no one reads, and takes longer to draw
(~10 s) than the study takes to read. So the table holds at most ``limit`` rows: the recommended
trial, the baseline, then the best complete trials by the study's objective (the order of the
search's own summary table, :func:`autotune.report.sort_key`), shown in trial-number order like a
table of every trial; a line under it says how many trials were left out, by state, and how to see
them (``--limit N``, ``--all``). A study of at most ``limit`` trials prints as before, every trial.
``--format json`` and ``yaml`` always hold every trial: what a program reads stays complete.

The choice of rows is made on digests (:mod:`autotune.study.digest`), and only the rows shown are
read in full.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import UsageError

__all__ = ["SHOW_LIMIT", "TableChoice", "check_show_args", "choose_rows", "left_out_line", "show_study"]

#: Rows of ``autotune show``'s table by default (``--limit N``, ``--all``): a screenful with room for
#: the recommended trial, the baseline and the best of the rest.
SHOW_LIMIT = 25

#: What ``autotune show``'s table orders the best trials by, for each objective.
_RANKED_BY = {"time-to-quality": "time to target", "goodput": "goodput"}


@dataclass(frozen=True)
class TableChoice:
    """The trials a limited table shows, and what it leaves out.

    Attributes:
        numbers: Numbers of the trials shown, ascending.
        kept: What the trials shown whatever their rank are, as words (``["the recommended trial", "the baseline"]``).
        left_out: Trials not shown, counted by state name (``{"COMPLETE": 9975, "FAIL": 6}``).
    """

    numbers: list[int]
    kept: list[str]
    left_out: Counter


def choose_rows(trials: Sequence[Any], objective: str, limit: int, keep: Mapping[int, str] | None = None) -> TableChoice:
    """The trials a table of at most ``limit`` rows shows.

    Args:
        trials: Every frozen trial (or digest) of the study.
        objective: The study's objective: orders the complete trials best first (:func:`autotune.report.sort_key`).
        limit: Most rows (>= 1).
        keep: The trials shown whatever their rank, in order of priority: number -> what it is, as
            words (``{12: "the recommended trial", 0: "the baseline"}``).

    Returns:
        The :class:`TableChoice`: every trial when there are at most ``limit``.
    """
    from autotune.report import sort_key

    every = {t.number for t in trials}
    chosen = [n for n in (keep or {}) if n in every][:limit]
    kept = [(keep or {})[n] for n in chosen]
    if len(trials) <= limit:
        return TableChoice(sorted(every), kept, Counter())
    key = sort_key(objective)
    complete = [t for t in trials if t.state.name == "COMPLETE" and t.number not in chosen]
    ranked = sorted(complete, key=lambda t: (key(_ranking_row(t)), t.number))
    chosen += [t.number for t in ranked[: max(limit - len(chosen), 0)]]
    shown = set(chosen)
    return TableChoice(sorted(shown), kept, Counter(t.state.name for t in trials if t.number not in shown))


def _ranking_row(trial) -> dict[str, Any]:
    """The figures :func:`autotune.report.sort_key` reads, from a trial's user attributes (NaN ranks last)."""
    attrs = trial.user_attrs
    row = {k: attrs.get(k) for k in ("samples_per_sec", "goodput", "time_to_target", "target_reached", "stage", "feasible")}
    for k in ("samples_per_sec", "goodput"):
        if isinstance(row[k], float) and math.isnan(row[k]):
            row[k] = None
    return row


def left_out_line(choice: TableChoice, total: int, objective: str) -> str | None:
    """The line under a limited table: how many trials it shows and leaves out, and how to see them
    (``None`` when it leaves none out)."""
    if not choice.left_out:
        return None
    shown = len(choice.numbers)
    best = shown - len(choice.kept)
    ranked = f"the {best:,} best complete by {_RANKED_BY.get(objective, 'samples/s')}, feasible first" if best else ""
    if best:
        kept = "".join(f"{words}, " for words in choice.kept[:-1]) + (f"{choice.kept[-1]} and " if choice.kept else "")
    else:  # every row shown is one kept (--limit as small as they are): "the recommended trial and the baseline"
        kept = ", ".join(choice.kept[:-1]) + (" and " if len(choice.kept) > 1 else "") + (choice.kept[-1] if choice.kept else "")
    states = ", ".join(f"{n:,} {state.lower()}" for state, n in choice.left_out.most_common())
    return (
        f"{shown:,} of {total:,} trials shown ({kept}{ranked}); "
        f"{sum(choice.left_out.values()):,} left out ({states}): --limit N shows N rows, --all every trial, "
        "--format json or yaml every trial in full"
    )


def show_study(study, settings, trial: int | None = None, fmt: str = "table", limit: int | None = SHOW_LIMIT, log: bool = False) -> None:
    """Print ``autotune show``'s output for ``study`` to standard output.

    Args:
        study, settings: The study and its settings (:func:`autotune.study.load_study`).
        trial: One trial's number, or ``None`` for the study's trials.
        fmt: ``"table"``, ``"json"`` or ``"yaml"``.
        limit: Most rows of the table (>= 1); ``None``: every trial. JSON and YAML hold every trial.
        log: Print trial ``trial``'s own output instead.

    Raises:
        UsageError: ``trial`` is not a trial of the study.
        AutotuneError: ``log`` for a trial that kept no output (:func:`autotune.study.records.trial_log`).
    """
    if log and trial is not None:
        _print_log(study, trial)
        return
    from autotune.contention import busy_run_line, host_load_line
    from autotune.report import render_rows, trial_rows
    from autotune.study import confirmation, oom_frontier, recommendation
    from autotune.study.digest import digest_trials, full_trials

    # the machine-readable formats hold every trial in full: read it all at once
    every = digest_trials(study) if fmt == "table" or trial is not None else study.get_trials(deepcopy=False)
    if trial is not None and trial >= len(every):
        raise UsageError(_no_trial(study, trial, len(every)))
    recommended, baseline = recommendation(study, settings, every)
    rec_number = recommended.number if recommended else None
    if trial is not None:
        one = full_trials(study, [every[trial]])
        text = render_rows(trial_rows(study, rec_number, full=fmt != "table", trials=one), fmt, title=f"study {study.study_name}")
        if text is not None:
            print(text)
        elif line := host_load_line(one[0]):
            print(line)
        return
    if fmt != "table":
        print(render_rows(trial_rows(study, rec_number, full=True, trials=every), fmt))
        return
    from autotune.study.bounds import epoch_lines
    from autotune.study.settings import BASELINE_ATTR
    from autotune.summary import confirmation_lines, frontier_lines, no_curve_line

    base_number = (study.user_attrs.get(BASELINE_ATTR) or {}).get("trial")
    keep: dict[int, str] = {}  # (a trial that is both keeps its first name: the note column says the rest)
    for number, words in (
        (rec_number, "the recommended trial"),
        (base_number, "the baseline"),
        (baseline.number if baseline else None, "the baseline's median paired run"),
    ):
        if number is not None:
            keep.setdefault(number, words)
    choice = choose_rows(every, settings.objective, len(every) if limit is None else limit, keep)
    by_number = {t.number: t for t in every}
    shown = full_trials(study, [by_number[n] for n in choice.numbers])
    render_rows(trial_rows(study, rec_number, trials=shown), "table", title=f"study {study.study_name}")
    for line in (
        left_out_line(choice, len(every), settings.objective),
        *frontier_lines(oom_frontier(study, every)),
        *epoch_lines(study),
        *confirmation_lines(confirmation(study, settings, every), settings.objective),
        busy_run_line(every),
        no_curve_line(shown, settings.monitor),
    ):
        if line:
            print(line)


def check_show_args(args: Any) -> None:
    """Refuse ``autotune show`` flags that do not fit together (``args``: the parsed command line).

    Raises:
        UsageError: ``--log`` without a trial number or with ``--format json|yaml``; ``--limit`` or
            ``--all`` with one trial or a machine-readable format; ``--limit`` below 1.
    """
    if args.log and args.trial is None:
        raise UsageError(f"--log prints one trial's output: give its number, e.g. `autotune show {args.study} 0 --log`")
    if args.log and args.format != "table":
        raise UsageError(
            f"--log prints trial {args.trial}'s output as it printed it, which has no --format {args.format}; "
            f"leave one out (`autotune show {args.study} {args.trial} --format {args.format}` holds the trial's figures)"
        )
    paged = "--all" if args.all else f"--limit {args.limit}" if args.limit is not None else None
    if paged and (args.trial is not None or args.format != "table"):
        what = f"trial {args.trial} alone" if args.trial is not None else f"every trial (--format {args.format})"
        raise UsageError(f"{paged} sets the rows of the table, but this shows {what}; leave {paged.split()[0]} out")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}; --all shows every trial")


def _no_trial(study, number: int, count: int) -> str:
    return f"study {study.study_name!r} has no trial {number} " + (f"(its trials are 0..{count - 1})" if count else "(it has no trial yet)")


def _print_log(study, number: int) -> None:
    """Print trial ``number``'s own output, reading that trial alone."""
    from autotune.study.records import trial_log

    storage = study._storage
    try:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    except KeyError:
        from autotune.study.digest import digest_trials

        raise UsageError(_no_trial(study, number, len(digest_trials(study)))) from None
    text = trial_log(storage.get_trial(trial_id), study.study_name)
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        print(f"(trial {number} printed nothing)", file=sys.stderr)
