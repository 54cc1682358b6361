"""The paired confirmation runs after a search: each candidate raced against the incumbent, pair by pair.

The candidates are the ``--confirm`` best distinct feasible configs of the search, best first
(:func:`autotune.study.records.confirm_candidates`); the incumbent is the baseline until a candidate
wins (:mod:`autotune.paired` decides), and a resumed search starts from the stored chain's last winner
(:func:`_standing`). A pair's two runs are queued together, in the order
:func:`autotune.paired.runs_first` gives, and run one at a time in this process (whatever ``--jobs``)
from one warm process (the search run's own, kept for the whole confirmation); the verdict is read
again from the stored runs after every pair (:mod:`autotune.study.races`), so a resumed search
continues each race where it stopped and a decided race is never run again (a pair with a run from
an earlier search run, Ctrl-C before its other run ended, runs both again here, in its order:
:data:`autotune.study.races.PAIR_RUN_ATTR`).

The budget (:func:`confirm_budget`): the paired runs take at most ``--confirm-share`` (20%) of the
run's wall time, i.e. ``share / (1 - share)`` (0.25) times its other seconds: the study's search
seconds and this run's own start-up, model inspection and memory probes. No pair starts when the
confirmation seconds so far plus the pair's expected seconds (the race's longest pair so far; before
its first, what the two search trials predict) would pass it, the first race's included; a race
needs :data:`autotune.paired.MIN_PAIRS` (2) pairs to be decided (a large speed-up may win at one, on
its replicate runs: :func:`autotune.paired.judge`), and a race after the first starts
only when all of them are expected to fit (:func:`_over_budget`) (the training
samples per run are chosen so that :data:`autotune.paired.PLANNED_PAIRS` pairs fit:
:func:`autotune.paired.fit_samples`). A race judged on the seconds to the baseline's loss stops each
run once it reaches that loss (:func:`stop_target`); a longer-training candidate's race
(:func:`autotune.study.records.longer_candidates`) runs up to :data:`autotune.study.records.LONGER_FACTOR`
times ``--samples`` per run (:func:`race_length`).
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import time
from typing import Any

from autotune.jobs import SlotPools
from autotune.paired import MIN_PAIRS, PLANNED_PAIRS, fit_samples, runs_first
from autotune.study.queue import drain_queue
from autotune.study.races import Race, budget_of, races_of, stop_target, won_chain
from autotune.study.records import LONGER_FACTOR, UNRACED_ATTR, UNRACED_CANDIDATES_ATTR, _budget, confirm_candidates, is_longer
from autotune.study.settings import BASELINE_ATTR, StudySettings
from autotune.summary import behind_on_loss, race_line
from autotune.ui import UI

__all__ = [
    "confirm_budget",
    "confirm_samples",
    "outside_seconds",
    "race_candidates",
    "race_length",
    "run_seconds",
    "same_math_first",
    "short_samples",
    "stop_target",
    "typical_overheads",
]


def confirm_budget(study, share: float, outside: float = 0.0) -> tuple[float, float, float]:
    """``(search seconds, confirmation seconds spent, confirmation seconds allowed)`` of a study.

    The seconds are the wall times of the study's stored runs (its ``runs`` attribute, one record per
    drain of the queue): confirmation records (``stage`` ``confirm``) against all others, plus
    ``outside``. Allowed: ``share / (1 - share)`` times the search's, so that confirmation is ``share``
    of the total.

    Args:
        study: The study.
        share: The fraction of the run's wall time confirmation may take, ``0 < share < 1``.
        outside: This run's wall seconds outside its drains of the queue (start-up, model inspection,
            memory probes; >= 0), counted with the search's: they are part of the run's wall time.
    """
    runs = study.user_attrs.get("runs") or []
    search = outside + sum(float(r.get("wall_seconds") or 0.0) for r in runs if r.get("stage") != "confirm")
    spent = sum(float(r.get("wall_seconds") or 0.0) for r in runs if r.get("stage") == "confirm")
    return search, spent, share / (1.0 - share) * search


def outside_seconds(study, run_id: str | None, started: float | None) -> float:
    """This run's wall seconds outside its drains of the queue: since ``started`` (``time.monotonic()``
    at the run's start; ``None``: 0) less its stored ``runs`` records (those of ``run_id``); >= 0."""
    if started is None:
        return 0.0
    drained = sum(float(r.get("wall_seconds") or 0.0) for r in study.user_attrs.get("runs") or [] if r.get("run_id") == run_id)
    return max(0.0, time.monotonic() - started - drained)


def run_seconds(trial, settings: StudySettings, samples: int, typical: dict | None = None) -> tuple[float, float]:
    """``(overhead seconds, samples/s)`` a run of ``trial``'s config is expected to take, from the trial itself.

    The overhead is the trial's wall time less its training samples over its samples/s (start-up,
    warm-up, validation; >= 0), at most the study's typical overhead for a run compiled as it is
    (``typical``, :func:`typical_overheads`, when given): one run's overhead can hold a one-off delay
    that the next run does not repeat (bn_cnn's baseline trial: 0.86 s after its last training step
    against 0.05-0.14 s in every other run, a 1.7 s overhead against the others' median 0.6 s). A run of
    ``samples`` then takes ``overhead + samples / samples_per_sec``.
    """
    sps = float(trial.user_attrs.get("samples_per_sec") or 0.0)
    if trial.datetime_start is None or trial.datetime_complete is None or sps <= 0:
        return 0.0, sps
    wall = (trial.datetime_complete - trial.datetime_start).total_seconds()
    own = max(0.0, wall - _budget(trial.user_attrs, settings) / sps)
    usual = (typical or {}).get(_compiled(trial))
    return (own if usual is None else min(own, usual)), sps


def _compiled(trial) -> bool:
    """Whether a trial's config compiles the module (its runs pay the compilation in their overhead)."""
    return (trial.user_attrs.get("config") or {}).get("compile") not in (None, False)


def typical_overheads(study, settings: StudySettings) -> dict[bool, float]:
    """The median overhead (:func:`run_seconds`) of the study's completed runs, keyed by whether the
    run's config compiles the module (:func:`_compiled`); a key with fewer than 3 runs is left out.
    Duplicates (``duplicate_of``: not run) are not counted."""
    seen: dict[bool, list[float]] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.name != "COMPLETE" or "duplicate_of" in t.user_attrs or float(t.user_attrs.get("samples_per_sec") or 0) <= 0:
            continue
        seen.setdefault(_compiled(t), []).append(run_seconds(t, settings, settings.samples)[0])
    return {k: statistics.median(v) for k, v in seen.items() if len(v) >= 3}


def confirm_samples(
    study, settings: StudySettings, given: int | None, first: Any, base: Any, share: float, outside: float = 0.0
) -> tuple[int, str]:
    """Training samples per paired run, and the words that say where they come from.

    ``given`` (``--confirm-samples``) first; else the budget of the study's last paired run (a
    resumed confirmation continues its races); else what fits :data:`autotune.paired.PLANNED_PAIRS`
    (5) pairs of the best candidate ``first`` against the baseline ``base`` in the budget
    (:func:`confirm_budget`, with ``outside``), between the study's ``samples`` and twice that.

    Never fewer than ``samples`` (but see :func:`short_samples`: a first candidate of the baseline's
    math whose :data:`autotune.paired.PLANNED_PAIRS` full-length pairs do not fit the budget races on
    shorter runs, as many as fit (down to the shortest stage-1 run), rather than on the 2 long ones a
    tight budget allows, whose race stops undecided when one pair runs late on a busy machine; a
    later race of other math runs at ``--samples``, :func:`race_candidates`): a race judges the loss (and the time to the baseline's loss) too, and a
    shorter run asks another question than the search trial that found the candidate feasible: a larger
    batch at a larger lr, or a schedule set from the run's length (OneCycleLR), is often behind at half
    the budget and ahead at the full one (bn_cnn's batch 128 at 4.5x the lr: val_loss 0.16 against the
    baseline's 0.23 at 8,192 samples, 2.70 against 1.15 at 4,096). A tight budget then stops the races
    after their minimum pairs instead of shortening every run.
    """
    if given:
        return given, "--confirm-samples"
    stored = [budget_of(t.user_attrs) for t in study.get_trials(deepcopy=False) if "pair_of" in t.user_attrs]
    if stored:
        return int(stored[-1]), "the study's stored races"
    _, spent, allowed = confirm_budget(study, share, outside)
    typical = typical_overheads(study, settings)
    runs = [run_seconds(base, settings, settings.samples, typical), run_seconds(first, settings, settings.samples, typical)]
    samples = fit_samples(allowed - spent, PLANNED_PAIRS, runs, floor=max(1, settings.samples), ceiling=2 * settings.samples)
    said = f"what fits {PLANNED_PAIRS} pairs of trial {first.number}'s config vs the baseline in {allowed - spent:.0f} s"
    pair = predicted_pair(study, settings, samples, base, first)
    if samples == settings.samples and pair * PLANNED_PAIRS > allowed - spent and pair > 0:  # clamped at --samples
        fit = int((allowed - spent) // pair)
        said = (
            f"--samples, the shortest run a race judging the loss trains: {f'about {fit}' if fit else 'no'} pair(s) "
            f"of trial {first.number}'s config vs the baseline, {pair:.1f} s each, fit in {allowed - spent:.0f} s"
        )
    short = short_samples(settings, first, base)
    if short < settings.samples and not _full_pairs_fit(allowed - spent, runs, settings, PLANNED_PAIRS):
        # its PLANNED_PAIRS full-length pairs do not fit: a candidate of the baseline's math races on shorter runs
        # (a rate, measured after the warm-up at any length), more of them rather than the minimum 2 long ones
        samples = fit_samples(allowed - spent, PLANNED_PAIRS, runs, floor=short, ceiling=settings.samples)
        pair = sum(o + samples / sps for o, sps in runs if sps > 0)
        if samples == short and pair > 0:
            fit = int((allowed - spent) // pair)
            said = f"the shortest run a race of trial {first.number}'s config may train: {f'about {fit}' if fit else 'no'} pair(s) of {pair:.1f} s fit in {allowed - spent:.0f} s; it keeps the baseline's math, so its pairs measure samples/s"
        else:  # between the shortest run and --samples (not "--samples": it is shorter)
            said = (
                f"what fits {PLANNED_PAIRS} pairs of trial {first.number}'s config vs the baseline in {allowed - spent:.0f} s, "
                f"between {short} and --samples {settings.samples}: it keeps the baseline's math, so its pairs measure samples/s, "
                "and the loss only as a sanity check"
            )
    return samples, said


def _full_pairs_fit(budget: float, runs: list[tuple[float, float]], settings: StudySettings, pairs: int = MIN_PAIRS) -> bool:
    """Whether ``pairs`` (default :data:`autotune.paired.MIN_PAIRS`) pairs of ``--samples`` runs (``runs``:
    :func:`run_seconds` of the two configs) fit in ``budget`` seconds."""
    return fit_samples(budget, pairs, runs, 1, settings.samples) >= settings.samples


def same_math_first(study, settings: StudySettings, candidates: list, base: Any, share: float, outside: float = 0.0) -> list:
    """``candidates`` (best first), with the best of the baseline's math moved first when the best
    one's :data:`autotune.paired.MIN_PAIRS` full-length pairs do not fit the confirmation budget
    (:func:`confirm_budget`): that race could not be decided, and a same-math one can on shorter runs
    (:func:`short_samples`). Unchanged otherwise, or when none keeps the baseline's math. The pairs are
    predicted as :func:`_over_budget` predicts them (:func:`pair_seconds`, runs that stop at the loss
    target ending there, overheads at most the study's typical ones): bn_cnn's batch 128 at 6.3x the lr,
    1.8x sooner at the baseline's loss, was put behind a same-math config on a prediction of full-length
    runs and the baseline trial's one-off overhead, and the budget then had no room for its race."""
    same = next((c for c in candidates if short_samples(settings, c, base) < settings.samples), None)
    if same is None or same is candidates[0]:
        return candidates
    _, spent, allowed = confirm_budget(study, share, outside)
    if MIN_PAIRS * predicted_pair(study, settings, settings.samples, base, candidates[0]) <= allowed - spent:
        return candidates
    return [same] + [c for c in candidates if c is not same]


def short_samples(settings: StudySettings, candidate: Any, incumbent: Any) -> int:
    """The fewest training samples a paired run of ``candidate`` against ``incumbent`` (search trials) may train.

    ``--samples`` when the candidate changes the training math (another effective batch, lr or
    constructor arguments: its race judges the loss at the budget its search trial was judged at);
    the shortest stage-1 screening run (:data:`autotune.study.staged.SYSTEM_STEPS` optimizer steps at
    the larger effective batch of the two, at most ``--samples``) when it keeps the incumbent's math:
    such a race compares samples/s, a rate measured after the warm-up at any length (as stage 1
    ranks configs by it), and the two configs' losses at the same length only as a rounding check. A
    short search whose confirmation share has no room for five full-length pairs then still races a
    same-math config (a new user's 2.3x faster ``num_workers`` at ``--trials 6`` was otherwise never
    raced; at a quarter of ``--samples``, another's ``--trials 8`` still fitted only one pair of 2).
    """
    from autotune.config import TrialConfig
    from autotune.study.math_class import is_preserving
    from autotune.study.staged import SYSTEM_STEPS

    cand, inc = (TrialConfig.from_dict(t.user_attrs["config"]) for t in (candidate, incumbent))
    if not is_preserving(cand, inc):
        return max(1, settings.samples)
    return max(1, min(settings.samples, SYSTEM_STEPS * max(cand.effective_batch_size, inc.effective_batch_size)))


def race_candidates(
    study,
    settings: StudySettings,
    ui: UI,
    k: int,
    cap: int,
    samples: int | None,
    share: float,
    *,
    cold: bool,
    storage_url: str,
    run_id: str | None = None,
    plan: Any = None,
    started: float | None = None,
    pools: SlotPools | None = None,
) -> int:
    """Race the ``k`` best configs of the search against the incumbent (the module docstring).

    Args:
        study, settings, ui: The study, its settings and the output.
        k: Candidates to race (>= 1).
        cap: Most pairs of a race (>= 3).
        samples: Training samples per paired run (``--confirm-samples``), or ``None``: :func:`confirm_samples`.
        share: Most of the run's wall time confirmation takes, ``0 < share < 1``.
        cold: Start runs as fresh processes instead of forking warm ones.
        storage_url: For the resume command.
        run_id, plan: The search run's id and :class:`autotune.study.plan._Plan`.
        started: ``time.monotonic()`` at the run's start (its seconds outside the queue count toward the
            budget: :func:`outside_seconds`), or ``None``.
        pools: The search run's warm processes, to fork the paired runs from (the caller closes them);
            ``None``: a set of this call's own.

    Returns:
        The paired runs this process ran.

    Raises:
        Interrupted: Ctrl-C; the running run is stored as interrupted and the next search continues the race.
    """
    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if plan is not None:
        plan.confirm_left = 0  # pairs are queued one at a time by this process: no worker waits for them
        plan.racing = True  # until the races end: a stop before then is resumed by the search, which races
        plan.save()
    if baseline_info is None:
        return 0
    base = study.get_trials(deepcopy=False)[baseline_info["trial"]]
    candidates = confirm_candidates(study, settings, k)
    if not candidates:
        ui.info(
            "confirmation: no feasible config measured faster than the baseline, or sooner at its loss, to race; the baseline is recommended"
        )
        return 0
    outside = outside_seconds(study, run_id, started)
    given = samples  # --confirm-samples: every race runs at it, whatever its math
    ranked = candidates
    candidates = same_math_first(study, settings, candidates, base, share, outside) if not given else candidates
    # (helper-33 could not parse a line that gave the whole ordering rule: docs/objectives.md does)
    order = (
        "; one of the baseline's math first: it races on shorter runs, and the best one's pairs do not fit"
        if candidates[0] is not ranked[0]
        else ""
    )
    samples, source = confirm_samples(study, settings, samples, candidates[0], base, share, outside)
    search_s, spent, allowed = confirm_budget(study, share, outside)
    incumbent, settled = _standing(study, settings, samples, base)
    candidates = [c for c in candidates if c.number not in settled]  # already won, or already lost to a config of the chain
    if not candidates:
        ui.info(
            f"confirmation: every candidate was already raced in this study; the recommendation stands (trial {incumbent.number}'s config)"
        )
        return 0
    against = "the baseline" if incumbent.number == base.number else f"trial {incumbent.number}'s config (it won its race(s) in this study)"
    others = sorted({race_length(settings, samples, c, incumbent) for c in candidates} - {samples}) if not given else []
    lengths = " or ".join(f"{n:,}" for n in others)  # a new user read 512 here, and a race of other math ran 4,096-sample runs
    other_math = f"; a config of other math on runs of {lengths}, its loss being judged at --samples or later" if others else ""
    ui.stage(
        f"confirming: racing {len(candidates)} config(s) (trial{'s' if len(candidates) > 1 else ''} {', '.join(str(c.number) for c in candidates)}, "
        f"in that order{order}) against {against} in pairs of back-to-back runs "
        f"(up to {cap} pairs each; a clear win is decided at 1 or {MIN_PAIRS}, anything else at {MIN_PAIRS} or more) of {samples:,} training samples ({source}{other_math}); budget {allowed:.0f} s "
        f"({share:.0%} of the run: {search_s:.0f} s of search and set-up, {spent:.0f} s confirmed so far; --confirm 0 skips this)",
        0,
    )
    own = pools is None
    if pools is None:
        pools = SlotPools(settings.model_file, cold, tempfile.mkdtemp(prefix="autotune-warm-"), ui)
    ran, started_any = 0, False
    try:
        for candidate in candidates:
            first = not started_any and incumbent.number == base.number  # the race that can find any speed-up at all
            started_any = True
            length = samples if given else race_length(settings, samples, candidate, incumbent)
            race, done = _run_race(
                study, settings, ui, incumbent, candidate, (samples, length), cap, (share, outside), pools, storage_url, run_id, plan, first
            )
            ran += done
            if race.stopped and not race.pairs and length != samples:  # a shorter race after it may still fit
                _left_unraced(study, [candidate])
                why = (
                    "it reached the baseline's loss only past the search's budget"
                    if is_longer(candidate)
                    else "its loss is judged at the search's budget"
                )
                ui.info(
                    f"race: trial {candidate.number}'s config changes the training math: the pairs of {length}-sample runs its race "
                    f"needs ({why}) would take confirmation past its budget ({allowed:.0f} s): not raced"
                )
                continue
            rest = candidates[candidates.index(candidate) :]  # this one and those after it
            if race.stopped and not race.pairs and first:
                study.set_user_attr(UNRACED_ATTR, samples)
                _left_unraced(study, rest)
                ui.info(
                    f"confirmation: a pair of runs of trial {candidate.number}'s config and the baseline would take confirmation "
                    f"past its budget ({allowed:.0f} s, {share:.0%} of the run): not raced, and the baseline is recommended; "
                    f"a longer search (--trials) or a --confirm-share above {share:g} makes room"
                )
                break
            versus = "the baseline" if incumbent.number == base.number else f"trial {incumbent.number}'s config"
            if race.stopped and not race.pairs:
                _left_unraced(study, rest)
                ui.info(
                    f"confirmation: the {MIN_PAIRS} pairs a race of trial {candidate.number}'s config against {versus} needs would take "
                    f"confirmation past its budget ({allowed:.0f} s, {share:.0%} of the run): it and the remaining candidates are not raced"
                )
                break
            v = race.verdict
            longer = f" ({'up to ' if is_longer(candidate) else ''}{length:,} samples per run)" if length != samples else ""
            how = f"{v.outcome if v.decided else 'stopped'}: {v.reason or 'budget spent'}"
            ui.info(race_line(candidate.number, v, settings.objective, versus, longer, how, behind=behind_on_loss(race)))
            if v.outcome == "win":
                incumbent = candidate
            if race.stopped:
                _left_unraced(study, rest[1:])
                if rest[1:]:
                    ui.info(f"confirmation budget spent ({allowed:.0f} s, {share:.0%} of the run): the remaining candidates are not raced")
                break
    finally:
        if own:
            pools.close()
            shutil.rmtree(pools.log_dir, ignore_errors=True)
    if plan is not None:
        plan.racing = False
    return ran


def race_length(settings: StudySettings, samples: int, candidate: Any, incumbent: Any) -> int:
    """Training samples per run of ``candidate``'s race against ``incumbent`` (search trials), the
    confirmation's being ``samples``: ``samples``, but at least ``--samples`` for a race of other math
    (:func:`short_samples`: its loss is judged at the search's budget) and at least
    :data:`autotune.study.records.LONGER_FACTOR` times ``--samples`` for a longer-training candidate
    (:func:`autotune.study.records.is_longer`: its runs stop at the baseline's loss, where it is judged)."""
    if is_longer(candidate):
        return max(samples, int(LONGER_FACTOR * max(1, settings.samples)))
    if samples < short_samples(settings, candidate, incumbent):
        return max(1, settings.samples)
    return samples


def _left_unraced(study, candidates: list) -> None:
    """Add ``candidates`` (search trials) to the study's :data:`UNRACED_CANDIDATES_ATTR`: left unraced by the budget."""
    if candidates:
        before = [int(n) for n in study.user_attrs.get(UNRACED_CANDIDATES_ATTR) or ()]
        study.set_user_attr(UNRACED_CANDIDATES_ATTR, before + [c.number for c in candidates if c.number not in before])


def _standing(study, settings: StudySettings, samples: int, base: Any) -> tuple[Any, set[int]]:
    """Where the stored chain of races at ``samples`` stands: ``(incumbent, settled)``.

    The incumbent is the last winner of the chain from the baseline (:func:`autotune.study.races.won_chain`,
    which the recommendation reads too), ``base`` when none won; ``settled`` holds the search trials a resumed
    confirmation does not race again: the chain's configs, and every candidate whose race against one of
    them was decided other than a win (one that lost to the baseline is not raced again against a winner
    faster than it). A
    resumed search that found a better config then races it against the current winner: raced against
    the baseline, its win could not extend the chain, and the summary would recommend the older winner.
    """
    every = study.get_trials(deepcopy=False)
    races = races_of(every, settings, samples)
    won = won_chain(races, base.number)
    chain, current = {base.number, *(r.candidate for r in won)}, (won[-1].candidate if won else base.number)
    settled = chain | {r.candidate for r in races if r.incumbent in chain and r.verdict.decided and r.verdict.outcome != "win"}
    return (base if current == base.number else every[current]), settled


def _current(
    study,
    settings: StudySettings,
    incumbent: int,
    candidate: int,
    samples: int,
    cap: int,
    length: int | None = None,
    run_id: str | None = None,
) -> Race:
    """The race ``incumbent`` vs ``candidate`` of the confirmation budget ``samples`` as stored (an empty
    one of runs of ``length`` samples, default ``samples``, when none is), as search run ``run_id`` continues it."""
    for race in races_of(study.get_trials(deepcopy=False), settings, samples, run_id):
        if (race.incumbent, race.candidate) == (incumbent, candidate):
            return race
    from autotune.paired import judge

    return Race(incumbent, candidate, length or samples, cap, (), judge([], True, 0.0, max_pairs=max(cap, 3)))


def _run_race(study, settings, ui, incumbent, candidate, samples, cap, budget, pools, storage_url, run_id, plan, first) -> tuple[Race, int]:
    """Queue and run pairs of one race until it is decided or the budget (``(share, outside seconds)``)
    stops it (``first``: the first race, see :func:`_over_budget`); ``samples``: ``(the confirmation's
    samples per run, this race's)``, more for a race of other math in a shortened confirmation. Returns
    ``(race, runs this process ran)``."""
    ran, last = 0, None
    samples, length = samples
    stop = stop_target(settings, study.user_attrs.get(BASELINE_ATTR), incumbent, candidate)
    while True:
        race = _current(study, settings, incumbent.number, candidate.number, samples, cap, length, run_id)
        if race.verdict.decided:
            return race, ran
        if not race.pending and not race.missing:
            if race.next_index >= max(cap, 3) or _over_budget(study, settings, race, incumbent, candidate, budget, first):
                return race, ran
            wanted = [(race.next_index, runs_first(race.next_index))]
            wanted.append((race.next_index, "candidate" if wanted[0][1] == "incumbent" else "incumbent"))
        else:
            wanted = list(race.missing)
        state = (len(race.pairs), race.pending, race.missing)
        if state == last:  # nothing moved since the last drain (another process holds the runs): stop here
            return race, ran
        last = state
        for index, role in wanted:
            config = candidate if role == "candidate" else incumbent
            attrs = {
                "confirm_of": config.number,
                "confirm_samples": length,
                "pair_of": candidate.number,
                "pair_index": index,
                "incumbent": incumbent.number,
                "pair_cap": cap,
            }
            if stop is not None:
                attrs["stop_at_target"] = stop
            if length != samples:  # the race belongs to the confirmation at `samples` (autotune.study.races)
                attrs["confirm_budget"] = samples
            study.enqueue_trial(dict(config.params), user_attrs=attrs)
        index = race.missing[0][0] if race.missing else race.waiting_index if race.waiting_index is not None else race.next_index
        ui.stage(f"pair {index}: trial {candidate.number}'s config", len(wanted) or race.pending)
        ran += drain_queue(
            study,
            settings,
            ui,
            add=0,
            jobs=1,
            cold=pools.cold,
            storage_url=storage_url,
            stage="confirm",
            pools=pools,
            run_id=run_id,
            plan=plan,
        )


def _over_budget(study, settings: StudySettings, race: Race, incumbent, candidate, budget: tuple[float, float], first: bool) -> bool:
    """Whether the next pair of ``race`` would take confirmation past its budget (``(share, outside
    seconds)``, :func:`confirm_budget`): its longest pair so far, or before any, the pair the two search
    trials predict (:func:`pair_seconds`). No race is exempt, the first included: a pair that would pass
    the budget never starts.

    A race after the first (``first`` false) also starts, and goes on below
    :data:`autotune.paired.MIN_PAIRS` pairs, only when all the pairs it needs to be decided are expected
    to fit: one pair decides nothing, and a later race can only improve on what the chain holds (the
    demo ``BoringModel`` beside a CPU hog ran one pair of its second race, 0.98x, before the budget
    stopped it). The first race starts when one pair fits: the prediction is off by up to a third on a
    noisy machine either way (18.9 s for demo ``Transformer``'s pair that took 21.2 s; 22 s for demo
    ``BoringModel``'s 2 pairs that took 16 s), and asking for 2 cost that model its 19x win; it is the
    only race that can find any speed-up at all."""
    _, spent, allowed = confirm_budget(study, *budget)
    if race.pairs:
        every = study.get_trials(deepcopy=False)
        expected = max(
            sum(
                (t.datetime_complete - t.datetime_start).total_seconds()
                for t in (every[n] for n in p.runs)
                if t.datetime_complete and t.datetime_start
            )
            for p in race.pairs
        )
    else:
        expected = predicted_pair(study, settings, race.samples, incumbent, candidate)
    need = 1 if first else max(1, MIN_PAIRS - len(race.pairs))
    return spent + need * expected > allowed


def predicted_pair(study, settings: StudySettings, samples: int, incumbent, candidate) -> float:
    """Seconds one pair of a race of ``candidate`` against ``incumbent`` (search trials) is expected to take
    before any of its pairs ran: :func:`pair_seconds`, its runs stopping at the loss target when the race's
    do (:func:`stop_target`), each run's overhead at most the study's typical one (:func:`typical_overheads`)."""
    stops = stop_target(settings, study.user_attrs.get(BASELINE_ATTR), incumbent, candidate) is not None
    return pair_seconds(settings, samples, (incumbent, candidate), stops, typical_overheads(study, settings))


def pair_seconds(settings: StudySettings, samples: int, configs: tuple[Any, Any], stops: bool, typical: dict | None = None) -> float:
    """Seconds one pair of runs of ``samples`` of the two ``configs`` (their search trials) is expected to
    take: each trial's overhead (:func:`run_seconds`) plus its samples over its samples/s. With
    ``stops`` (a race whose runs stop at the loss target, :func:`stop_target`) a run trains only to where its search
    trial reached the target, or its curve extrapolated it (:func:`autotune.objective.time_to_target`; at
    least the quarter of the run before the first check), as MLPerf's runs stop at their quality target. ``typical``: :func:`typical_overheads`, or
    ``None`` (each trial's own overhead)."""
    total = 0.0
    for trial in configs:
        overhead, sps = run_seconds(trial, settings, samples, typical)
        if sps <= 0:
            continue
        trained = float(samples)
        reach = trial.user_attrs.get("time_to_target")
        if stops and reach is not None and math.isfinite(float(reach)):  # reached, or extrapolated past its run
            trained = min(trained, max(samples / 4, float(reach) * sps))
        total += overhead + trained / sps
    return total
