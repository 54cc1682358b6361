"""The confirmation races stored in a study, read back (:mod:`autotune.paired` decides them).

Every paired run is an ordinary trial with these user attributes:

- ``confirm_of``: the search trial whose config it runs; ``confirm_samples``: its training samples;
- ``pair_of``: the candidate's search trial (which race); ``incumbent``: the incumbent's search trial;
- ``pair_index``: the pair's place in the race (0, 1, ...); ``pair_cap``: the race's most pairs;
- ``confirm_budget`` (only when it differs from ``confirm_samples``): the confirmation's samples per
  run that the race belongs to, when its own runs train more: a confirmation shortened for a race of
  the baseline's math runs a later race of other math at ``--samples`` (its loss is judged there);
- ``stop_at_target`` (a race judged on the seconds to the study's loss target,
  :func:`autotune.study.racing.stop_target`): the loss the run stops at; ``stopped_at_target``: it did.

A race is keyed by ``(incumbent, pair_of, confirm_budget or confirm_samples)``: re-reading the same stored runs gives
the same verdict, so a resumed search continues a race from its stored pairs and a finished race is
never run again. The chain of races starts at the baseline; a won race makes its candidate the
incumbent of the next.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.objective import directions
from autotune.paired import MAX_PAIRS, Pair, Verdict, chain, judge, replicate_ss, runs_first
from autotune.study.settings import StudySettings

__all__ = [
    "PAIR_ATTRS",
    "PAIR_RUN_ATTR",
    "Confirmation",
    "Race",
    "budget_of",
    "confirmation_of",
    "judge_race",
    "objective_value",
    "races_of",
    "uncounted_runs",
    "won_chain",
]

#: User attributes of a paired run besides ``confirm_of`` and ``confirm_samples`` (kept on a retry).
PAIR_ATTRS = ("pair_of", "pair_index", "incumbent", "pair_cap", "confirm_budget")
#: The search run (its id) that ran a paired run, stored when it starts: a pair counts only when its two
#: runs ran in one search run (:func:`_pair_of`), back to back. Not kept on a retry (helper-34: a pair
#: whose incumbent run completed before Ctrl-C and whose candidate run ran after the resume, in another
#: process minutes later, read 0.12x).
PAIR_RUN_ATTR = "pair_run"


def budget_of(attrs: Any) -> int:
    """The confirmation budget a paired run belongs to (its ``confirm_budget``, else its ``confirm_samples``)."""
    return int(attrs.get("confirm_budget") or attrs["confirm_samples"])


@dataclass(frozen=True)
class Race:
    """One race's stored runs and its verdict.

    Attributes:
        incumbent: The incumbent's search trial (its config).
        candidate: The candidate's search trial.
        samples: Training samples per run.
        cap: The race's most pairs (``pair_cap``).
        pairs: Its completed pairs, by pair index.
        verdict: :func:`autotune.paired.judge` of ``pairs`` (``running`` when more pairs are needed).
        pending: Its runs still waiting or running.
        missing: ``(pair index, role)`` of the runs the next pair still needs (role ``incumbent`` or
            ``candidate``), in the order they run; empty when every started pair has its two runs.
        next_index: The index of the next pair to start.
        quality: Its candidate changes the incumbent's math, so the race judges the seconds to the
            study's loss target (:func:`judge_race`), not the objective value alone.
        waiting_index: The lowest pair index of its ``pending`` runs (a run queued again after Ctrl-C), or ``None``.
    """

    incumbent: int
    candidate: int
    samples: int
    cap: int
    pairs: tuple[Pair, ...]
    verdict: Verdict
    pending: int = 0
    missing: tuple[tuple[int, str], ...] = ()
    next_index: int = 0
    quality: bool = False
    waiting_index: int | None = None

    @property
    def stopped(self) -> bool:
        """Undecided and nothing left to run: stopped by the confirmation budget (or an interruption)."""
        return not self.verdict.decided and not self.pending


@dataclass(frozen=True)
class Confirmation:
    """A study's confirmation: its races at the latest confirmation budget, and the outcome.

    Attributes:
        races: Every race at ``samples``, in the order they started.
        won: The chain of won races from the baseline (each against the previous winner).
        baseline: The baseline's search trial.
        chosen: The recommended config's search trial (``baseline`` when no race was won).
        samples: The confirmation's training samples per paired run (a race lengthened to ``--samples``
            trains more: its :attr:`Race.samples`).
        ratio, low, high: How many times better the chosen config is than the baseline, and its 90%
            interval (:func:`autotune.paired.chain`; 1.0 each when nothing won).
        pairs: Paired runs behind ``ratio`` (0 when nothing won).
        chosen_run: The chosen config's paired run closest to the median of its last race (``None``:
            the baseline was chosen and ran in no pair).
        baseline_run: The baseline's paired run closest to the median of its first race, or ``None``.
        unraced: The search trials of the candidates confirmation left unraced because their pairs
            would pass its budget, and still unraced (:data:`autotune.study.records.UNRACED_CANDIDATES_ATTR`).
    """

    races: tuple[Race, ...]
    won: tuple[Race, ...]
    baseline: int
    chosen: int
    samples: int
    ratio: float
    low: float
    high: float
    pairs: int
    chosen_run: int | None
    baseline_run: int | None
    unraced: tuple[int, ...] = ()


def objective_value(trial: Any, objective: str) -> float:
    """The figure a paired run is judged by: samples/s (``throughput``, ``pareto``), goodput samples/s,
    or seconds to the target (``time-to-quality``; ``inf`` when never reached)."""
    attrs = trial.user_attrs
    if objective == "time-to-quality":
        if "time_to_target" not in attrs:
            return math.nan
        return math.inf if attrs["time_to_target"] is None else float(attrs["time_to_target"])
    if objective == "goodput":
        return float(attrs.get("goodput", math.nan))
    return float(attrs.get("samples_per_sec", math.nan))


def races_of(trials: Sequence[Any], settings: StudySettings, samples: int | None = None, current: str | None = None) -> list[Race]:
    """The races stored in ``trials`` (runs at ``samples`` only, when given), in the order they started.

    A paired run that failed once (not interrupted) is *missing*: the race queues it again, once (its
    config trained in the search, so one fault may be transient: helper-32's flaky data ended the race
    of its best candidate); failed twice, it ends the race ``failed``, the reason naming the last try.

    Args:
        trials: Frozen trials of one study (digests will do).
        settings: Its settings (objective, loss tolerance, mode).
        samples: Only the runs of this confirmation budget.
        current: The search run about to queue runs (:data:`PAIR_RUN_ATTR`), or ``None``: a pair with one
            run completed in another search run and the other still to run then needs both runs again,
            in the pair's order (:func:`autotune.paired.runs_first`), so that they run back to back.
    """
    maximize = directions(settings.objective, settings.mode)[0] == "maximize"
    by_key: dict[tuple[int, int, int], dict[tuple[int, str], list]] = {}
    for t in trials:
        attrs = t.user_attrs
        if "pair_of" not in attrs or (samples is not None and budget_of(attrs) != samples):
            continue
        key, index, role = _slot(attrs)
        by_key.setdefault(key, {}).setdefault((index, role), []).append(t)
    races = []
    by_number = {t.number: t for t in trials} if by_key else {}
    for (incumbent, candidate, _), runs in by_key.items():
        cap = max(int(t.user_attrs.get("pair_cap") or MAX_PAIRS) for mine in runs.values() for t in mine)
        trained = int(next(iter(runs.values()))[0].user_attrs["confirm_samples"])  # the race's runs' own samples
        searched = tuple(_search_run(by_number.get(n), trained, settings) for n in (incumbent, candidate))
        races.append(_race(incumbent, candidate, trained, cap, runs, maximize, settings, searched, current))
    return races


def _slot(attrs: Any) -> tuple[tuple[int, int, int], int, str]:
    """A paired run's race (``(incumbent, candidate, confirmation budget)``), pair index and role."""
    role = "candidate" if attrs["confirm_of"] == attrs["pair_of"] else "incumbent"
    return (int(attrs["incumbent"]), int(attrs["pair_of"]), budget_of(attrs)), int(attrs["pair_index"]), role


def uncounted_runs(trials: Sequence[Any]) -> set[int]:
    """The completed paired runs among ``trials`` that no pair counts: a pair's run whose other run ran in
    a later search run (Ctrl-C between them; :func:`_pair_of`), for ``autotune show``'s note (helper-35:
    three runs read "pair 0 of #4", nothing said which one the race left out)."""
    slots: dict[tuple[int, int, int, int], dict[str, list]] = {}
    for t in trials:
        attrs = t.user_attrs
        if "pair_of" in attrs and t.state.name == "COMPLETE":
            key, index, role = _slot(attrs)
            slots.setdefault((*key, index), {}).setdefault(role, []).append(t)
    left: set[int] = set()
    for runs in slots.values():
        if len(runs) == 2:
            counted, _ = _pair_of(runs["incumbent"], runs["candidate"])
            left |= {t.number for mine in runs.values() for t in mine} - {t.number for t in counted.values()}
    return left


def _search_run(trial: Any, samples: int, settings: StudySettings) -> Any:
    """A raced config's search trial when it is a replicate of the race's runs (completed, and as long:
    ``samples`` is the search's own, and it was not a short stage-1 run), else ``None``."""
    if trial is None or trial.state.name != "COMPLETE" or "trial_samples" in trial.user_attrs or "confirm_of" in trial.user_attrs:
        return None
    return trial if int(samples) == int(settings.samples) else None


def _pair_of(incumbents: Sequence[Any], candidates: Sequence[Any]) -> tuple[dict[str, Any], set[str]]:
    """A pair index's two completed runs, ``({"incumbent": trial, "candidate": trial}, set())``, when a
    completed run of each role ran in one search run (:data:`PAIR_RUN_ATTR`; a run without it, stored
    before it was, matches any), the latest such couple; else ``(the roles that have one: the first
    completed run of each, set())`` when a role has none, or, when each has one but never from one run
    (an interruption between them), ``({the later run's role: its run}, {the other role})``: that role
    runs again in the later run's search run, beside it."""
    done = {
        role: [t for t in tries if t.state.name == "COMPLETE"] for role, tries in (("incumbent", incumbents), ("candidate", candidates))
    }
    if not (done["incumbent"] and done["candidate"]):
        return {role: runs[0] for role, runs in done.items() if runs}, set()
    couples = [
        (inc, cand)
        for inc in done["incumbent"]
        for cand in done["candidate"]
        if None in (inc.user_attrs.get(PAIR_RUN_ATTR), cand.user_attrs.get(PAIR_RUN_ATTR))
        or inc.user_attrs.get(PAIR_RUN_ATTR) == cand.user_attrs.get(PAIR_RUN_ATTR)
    ]
    if couples:
        inc, cand = max(couples, key=lambda c: max(c[0].number, c[1].number))
        return {"incumbent": inc, "candidate": cand}, set()
    latest = max((t for runs in done.values() for t in runs), key=lambda t: t.number)
    role = "incumbent" if latest in done["incumbent"] else "candidate"
    return {role: latest}, {"candidate" if role == "incumbent" else "incumbent"}


def _stale_half(slot: dict[str, Any], runs: dict, index: int, current: str) -> bool:
    """Whether pair ``index``'s one completed run (``slot``) ran in another search run than ``current`` while
    its other run has still to run (never queued, interrupted, or failed once: not waiting, not failed twice)."""
    ((role, done),) = slot.items()
    if done.user_attrs.get(PAIR_RUN_ATTR) in (None, current):
        return False
    other = runs.get((index, "candidate" if role == "incumbent" else "incumbent"), [])
    if any(t.state.name in ("WAITING", "RUNNING") for t in other):
        return False
    return len([t for t in other if t.state.name == "FAIL" and t.user_attrs.get("fail_kind") != "interrupted"]) < 2


def _same_math(incumbent: Any, candidate: Any) -> bool:
    """Whether two stored ``config`` attributes compute the same math up to rounding (:func:`autotune.study.math_class.is_preserving`)."""
    if not isinstance(incumbent, dict) or not isinstance(candidate, dict):
        return False
    from autotune.config import TrialConfig
    from autotune.study.math_class import is_preserving

    return is_preserving(TrialConfig.from_dict(candidate), TrialConfig.from_dict(incumbent))


def _race(
    incumbent: int,
    candidate: int,
    samples: int,
    cap: int,
    runs: dict,
    maximize: bool,
    settings: StudySettings,
    searched: tuple[Any, Any] = (None, None),
    current: str | None = None,
) -> Race:
    """One race from its runs by ``(pair index, role)`` (a retried run leaves a failed try beside it);
    ``searched``: the incumbent's and the candidate's search trials where they replicate the race's runs
    (:func:`_search_run`), for the replicate runs' interval (:func:`autotune.paired.replicate_ss`)."""
    pairs, failed, pending, missing, waiting = [], 0, 0, [], []
    why = ""  # the failed runs' reason, for the verdict
    same_math = False  # the candidate keeps the incumbent's math: its loss is held to the sanity tolerance
    indices = sorted({i for i, _ in runs})
    for i in indices:
        slot, split = _pair_of(runs.get((i, "incumbent"), []), runs.get((i, "candidate"), []))
        if current is not None and len(slot) == 1 and _stale_half(slot, runs, i, current):
            missing += [(i, "incumbent"), (i, "candidate")]  # (the one left waits for this run to run both)
            continue
        for role in ("incumbent", "candidate"):
            tries = runs.get((i, role), [])
            if role in slot:
                continue
            if any(t.state.name in ("WAITING", "RUNNING") for t in tries):
                pending += 1
                waiting.append(i)
            elif role in split:  # its other half ran in a later search run: this half runs again beside it
                missing.append((i, role))
            elif len(faults := [t for t in tries if t.state.name == "FAIL" and t.user_attrs.get("fail_kind") != "interrupted"]) > 1:
                failed += 1
                why = why or f"trial {faults[-1].number}: {faults[-1].user_attrs.get('fail_reason')}"
            else:  # never queued; interrupted and not queued again; or failed once: the next run queues it (again)
                missing.append((i, role))  # (a config its search trial ran: a transient fault must not shut it out)
        if len(slot) == 2:
            inc, cand = slot["incumbent"], slot["candidate"]
            same_math = _same_math(inc.user_attrs.get("config"), cand.user_attrs.get("config"))
            inc_loss = float(inc.user_attrs.get("loss", math.nan))
            # a run stopped at the loss target (racing.stop_target) ends at other samples than its pair's:
            # the final losses are not compared; the race is judged on the seconds to that target
            stopped = inc.user_attrs.get("stopped_at_target") or cand.user_attrs.get("stopped_at_target")
            pairs.append(
                Pair(
                    objective_value(inc, settings.objective),
                    objective_value(cand, settings.objective),
                    inc_loss,
                    inc_loss if stopped else float(cand.user_attrs.get("loss", math.nan)),
                    (inc.number, cand.number),
                    _reach(inc, samples > settings.samples),
                    _reach(cand, samples > settings.samples),
                )
            )
    tolerance = settings.loss_tolerance
    if same_math:  # rounding and data order, not convergence (as the math-preserving stage judges it)
        from autotune.study.math_class import SANITY_FACTOR, SANITY_FLOOR

        tolerance = max(SANITY_FACTOR * tolerance, SANITY_FLOOR)
    # a candidate of other math is judged on the seconds to the baseline's loss (not the pareto trade-off)
    quality = not same_math and settings.objective in ("throughput", "goodput")
    verdict = judge_race(
        pairs,
        maximize,
        tolerance,
        settings.mode,
        failed=failed,
        max_pairs=max(cap, 3),
        quality=quality,
        searched=searched,
        settings=settings,
    )
    if verdict.outcome == "failed" and why:
        verdict = replace(verdict, reason=f"{verdict.reason}, each tried twice ({why})")
    missing.sort(key=lambda m: (m[0], m[1] != runs_first(m[0])))
    return Race(
        incumbent,
        candidate,
        samples,
        cap,
        tuple(pairs),
        verdict,
        pending,
        tuple(missing),
        (indices[-1] + 1) if indices else 0,
        quality,
        min(waiting) if waiting else None,
    )


#: What the reason of a race of other math judged on the objective value adds (:func:`judge_race`): a
#: new user's race of another batch and lr read "1.70x faster" with no word that it was samples/s.
UNTIMED = "on {figure}, not on the seconds to the baseline's training loss: not every run has a finite time to it (no loss curve, or never reached)"
#: What a timed race's reason adds (:func:`judge_race`).
TIMED = "in seconds to the baseline's training loss: the two configs' training math differs"


def judge_race(
    pairs: Sequence[Pair],
    maximize: bool,
    tolerance: float,
    mode: str,
    *,
    failed: int,
    max_pairs: int,
    quality: bool,
    searched: tuple[Any, Any] = (None, None),
    settings: StudySettings | None = None,
) -> Verdict:
    """:func:`autotune.paired.judge` of a race, on the right figure.

    A candidate that keeps the incumbent's math (``quality`` False) is judged on the objective value
    (samples/s): the same samples train the same steps, so more samples/s is less time to any loss. A
    candidate of other math (another effective batch, lr or constructor arguments; ``quality``) under
    ``throughput`` or ``goodput`` is judged on the seconds each run took to the study's loss target
    (the baseline's training loss plus the tolerance, from the run's loss curve, as MLPerf's
    time-to-train counts them) whenever every pair knows both: more samples/s that need more samples
    to reach the same loss are not a speed-up, and fewer samples/s that reach it in fewer steps are
    one (the issue's rule: the math-changing knobs are judged on time-to-quality). Its ratio is then
    how many times sooner it reached the baseline's loss, and the reason says so. Without those times
    (a run with no loss curve) it falls back to the objective value with ``quality``'s veto (slower to
    the target in the median pair: a loss), and its reason says so (:data:`UNTIMED`).

    ``searched`` (the incumbent's and the candidate's search trials, each ``None`` unless it trained as
    many samples as the race's runs) and ``settings`` (for the objective) add those trials' figures to
    each config's replicate runs (:func:`autotune.paired.replicate_ss`), beside its paired runs, except
    in a race of other math judged on samples/s (its runs may have stopped at the loss target).
    """
    timed = quality and bool(pairs) and all(math.isfinite(p.incumbent_reach) and math.isfinite(p.candidate_reach) for p in pairs)
    inc_search, cand_search = searched
    if not timed:
        # a race of other math may have stopped its runs at the loss target, short of its search trial's samples
        extra = ([], []) if quality or settings is None else ([_value(inc_search, settings)], [_value(cand_search, settings)])
        replicates = replicate_ss([[p.incumbent for p in pairs] + extra[0], [p.candidate for p in pairs] + extra[1]])
        verdict = judge(pairs, maximize, tolerance, mode, failed=failed, max_pairs=max_pairs, quality=quality, replicates=replicates)
        if quality and pairs and verdict.reason and verdict.outcome not in ("loss", "failed"):  # say what it was judged on instead
            figure = "goodput" if settings is not None and settings.objective == "goodput" else "samples/s"
            verdict = replace(verdict, reason=f"{verdict.reason} ({UNTIMED.format(figure=figure)})")
        return verdict
    by_time = [replace(p, incumbent=p.incumbent_reach, candidate=p.candidate_reach) for p in pairs]
    replicates = replicate_ss(
        [[p.incumbent for p in by_time] + [_reach(t) for t in (inc_search,) if t is not None],
         [p.candidate for p in by_time] + [_reach(t) for t in (cand_search,) if t is not None]]
    )  # fmt: skip
    verdict = judge(by_time, False, tolerance, mode, failed=failed, max_pairs=max_pairs, replicates=replicates)
    return replace(verdict, reason=f"{verdict.reason} ({TIMED})" if verdict.reason else "", timed=True)


def _value(trial: Any, settings: StudySettings) -> float:
    """A search trial's objective value (:func:`objective_value`), NaN without the trial."""
    return math.nan if trial is None else objective_value(trial, settings.objective)


def _reach(trial: Any, reached: bool = False) -> float:
    """A paired run's seconds to the study's loss target: ``inf`` when stored as ``None`` (never, or no loss
    curve: then both runs of a pair, of one model, have none and tie), NaN when not stored. With
    ``reached`` (runs longer than ``--samples``: a longer-training candidate's race,
    :func:`autotune.study.records.longer_candidates`, and any race of a confirmation lengthened past
    ``--samples``) a run that did not reach the target is ``inf``, not its curve's extrapolation: past
    the search's budget, an extrapolation is not a measurement."""
    if "time_to_target" not in trial.user_attrs:
        return math.nan
    if reached and not trial.user_attrs.get("target_reached"):
        return math.inf
    seconds = trial.user_attrs["time_to_target"]
    return math.inf if seconds is None else float(seconds)


def won_chain(races: Sequence[Race], baseline: int) -> list[Race]:
    """The chain of won races from the ``baseline`` (search trial number), each against the previous
    winner, in the order the races started; empty when none was won."""
    won: list[Race] = []
    for race in races:
        if race.incumbent == (won[-1].candidate if won else baseline) and race.verdict.outcome == "win":
            won.append(race)
    return won


def confirmation_of(trials: Sequence[Any], settings: StudySettings, baseline: int) -> Confirmation | None:
    """The study's confirmation at its latest confirmation budget (the budget of its last paired run).

    Args:
        trials: Frozen trials of one study.
        settings: Its settings.
        baseline: The baseline's search trial.

    Returns:
        A :class:`Confirmation`, or ``None`` when the study has no paired run.
    """
    paired = [t for t in trials if "pair_of" in t.user_attrs]
    if not paired:
        return None
    samples = budget_of(paired[-1].user_attrs)
    races = races_of(trials, settings, samples)
    won = won_chain(races, baseline)
    incumbent = won[-1].candidate if won else baseline
    ratio, low, high, pairs = chain([r.verdict for r in won])
    by_number = {t.number: t for t in trials}
    # the baseline's runs as long as the chosen config's (a race lengthened to --samples has the baseline's
    # search trial for that: None, and the recommendation takes it)
    length = won[-1].samples if won else samples
    first = next((r for r in races if r.incumbent == baseline and r.pairs and r.samples == length), None)
    chosen_run = _median_run(won[-1], "candidate", by_number, settings.objective) if won else None
    base_run = _median_run(first, "incumbent", by_number, settings.objective) if first else None
    return Confirmation(tuple(races), tuple(won), baseline, incumbent, samples, ratio, low, high, pairs, chosen_run, base_run)


def _median_run(race: Race, role: str, by_number: dict[int, Any], objective: str) -> int:
    """The run of ``role`` in ``race`` whose objective value is closest to the median of that role's runs."""
    numbers = [p.runs[0] if role == "incumbent" else p.runs[1] for p in race.pairs]
    values = [objective_value(by_number[n], objective) for n in numbers]
    finite = [v for v in values if math.isfinite(v)]
    middle = statistics.median(finite) if finite else math.nan
    return min(zip(numbers, values), key=lambda nv: abs(nv[1] - middle) if math.isfinite(nv[1]) else math.inf)[0]


def stop_target(settings: StudySettings, baseline_info: dict[str, Any] | None, incumbent, candidate) -> float | None:
    """The loss at which a race's runs stop, or ``None`` (they train their whole budget).

    A race of a candidate of other math than the incumbent (another effective batch, lr or constructor
    arguments) under ``throughput`` or ``goodput`` is judged on each run's seconds to the study's loss
    target (:func:`autotune.study.races.judge_race`), so each run stops once its training loss,
    averaged over the window the target was set with (the last tenth of ``--samples``), reaches that target, as MLPerf's time-to-train stops
    at its quality target: the rest of the run would measure nothing the verdict reads. A run that never
    reaches it trains its whole budget. Only a one-process trial (``--devices 1``, one node) stops
    early: the ranks of a DDP trial would have to agree on the step.

    Args:
        settings: The study's settings.
        baseline_info: The study's baseline attribute (its ``loss_target``: the baseline's smoothed
            training loss at the end of its budget plus the loss tolerance).
        incumbent, candidate: The two configs' search trials (frozen).
    """
    from autotune.config import TrialConfig
    from autotune.study.math_class import is_preserving

    target = (baseline_info or {}).get("loss_target")
    if settings.objective not in ("throughput", "goodput") or target is None or not math.isfinite(float(target)):
        return None
    if int(settings.devices) * int(settings.num_nodes or 1) != 1:
        return None
    if is_preserving(TrialConfig.from_dict(candidate.user_attrs["config"]), TrialConfig.from_dict(incumbent.user_attrs["config"])):
        return None
    return float(target)
