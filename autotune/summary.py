"""Result sentences, shared by the terminal summary, ``autotune show``, the export header, the dashboard
note and the HTML report.

Every function here is pure: it takes figures already computed from a study (frozen trials, the
paired confirmation of :func:`autotune.study.confirmation`, the OOM frontier rows of
:func:`autotune.study.oom_frontier`) and returns text, so the sentences read the same everywhere and
none of their callers imports another's module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.input_bound import input_bound_line

__all__ = [
    "behind_on_loss",
    "confirmation_lines",
    "flops_line",
    "frontier_lines",
    "input_bound_line",
    "no_curve_line",
    "quality_line",
    "race_line",
    "ratio_text",
    "speedup_line",
    "timed_caveat",
    "unpaired_text",
]


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


#: How a ratio over the baseline reads for each objective (> 1: better).
_BETTER = {"time-to-quality": "faster to the target", "goodput": "more goodput"}
_AS = {"time-to-quality": "as fast to the target", "goodput": "the goodput"}


def ratio_text(ratio: float, low: float, high: float, pairs: int, objective: str, versus: str = "the baseline", races: int = 1) -> str:
    """``"1.62x faster [1.41x, 1.86x] over 4 pair(s) of runs vs the baseline"`` (4 pairs: 8 runs); over a
    chain of ``races`` won races (each against the winner before it, :func:`autotune.paired.chain`),
    ``"... over 6 pair(s) of runs in a chain of 2 won races from the baseline"``.

    Args:
        ratio, low, high: The ratio (> 1: better) and its 90% interval (:mod:`autotune.paired`).
        pairs: Pairs behind it (>= 1).
        objective: The study's objective (names what is better).
        versus: What the ratio is over.
    """
    interval = f" [{low:.2f}x, {high:.2f}x]" if math.isfinite(low) and math.isfinite(high) else ""
    # "1.00x as fast", not "1.00x faster", for a ratio that rounds to 1
    word = _BETTER.get(objective, "faster") if round(ratio, 2) > 1 else _AS.get(objective, "as fast")
    if races > 1:
        return f"{ratio:.2f}x {word}{interval} over {pairs} pair(s) of runs in a chain of {races} won races from {versus}"
    return f"{ratio:.2f}x {word}{interval} over {pairs} pair(s) of runs vs {versus}"


def confirmation_lines(confirmed: Any, objective: str) -> list[str]:
    """Lines on the paired confirmation of the recommendation: the outcome, then one line per race.

    Args:
        confirmed: :func:`autotune.study.confirmation` (a :class:`autotune.study.races.Confirmation`),
            or ``None`` (no paired run: no line).
        objective: The study's objective (names what "better" means).
    """
    if confirmed is None:
        return []
    if confirmed.won:
        lengths = sorted({r.samples for r in confirmed.won})  # a race lengthened to --samples trains more
        samples = f"{lengths[0]:,}" if len(lengths) == 1 else f"{lengths[0]:,} to {lengths[-1]:,}"
        lines = [
            f"confirmed: the config of trial {confirmed.chosen} is "
            f"{ratio_text(confirmed.ratio, confirmed.low, confirmed.high, confirmed.pairs, objective, races=len(confirmed.won))} ({samples} samples per run)"
        ]
    else:
        lines = [_unconfirmed_line(confirmed, objective)]
    named = None if confirmed.won else _stopped_race(confirmed)  # the outcome line gave its figure and why it stopped
    for race in confirmed.races:
        v = race.verdict
        if named is not None and race is named and race.samples == confirmed.samples:
            continue
        versus = "the baseline" if race.incumbent == confirmed.baseline else f"trial {race.incumbent}'s config"
        if v.decided:
            how = f"{v.outcome}: {v.reason}"
        elif race.pending:
            how = f"running ({race.pending} run(s) queued)"
        else:
            how = "stopped before a decision (the confirmation budget was spent, or the run was stopped)"
        longer = f" ({race.samples:,} samples per run)" if race.samples != confirmed.samples else ""
        lines.append(race_line(race.candidate, v, objective, versus, longer, how, behind=behind_on_loss(race)))
    if confirmed.unraced and confirmed.races:  # (with no race at all, the outcome line says why already)
        names = ", ".join(f"trial {n}'s" for n in confirmed.unraced)
        lines.append(
            f"not raced: {names} config{'s' if len(confirmed.unraced) > 1 else ''}, found in the search: the confirmation budget "
            f"had no room for {'their' if len(confirmed.unraced) > 1 else 'its'} pairs; a longer search (--trials) or a larger --confirm-share makes room"
        )
    return lines


def race_line(candidate: int, verdict: Any, objective: str, versus: str, longer: str, how: str, behind: bool = False) -> str:
    """One race's line: ``"race: trial 6's config, 1.62x faster [...] over 4 pair(s) of runs vs the
    baseline: win: ..."``; a race lost on the loss, or stopped undecided while behind on it
    (``behind``), leads with that, its ratio after as what it was on (a new user read "2.35x faster"
    as the verdict of a race lost on its time to the loss; helper-28 read "3.56x faster ... stopped
    before a decision" for a config slower to the baseline's loss).

    Args:
        candidate: The candidate's trial number.
        verdict: The race's :class:`autotune.paired.Verdict`.
        objective: The study's objective.
        versus: What it raced (``"the baseline"``, ``"trial 3's config"``).
        longer: ``" (N samples per run)"`` when its runs were not the confirmation's length, else ``""``.
        how: The outcome and its reason (``"win: better in 2 of 2 pairs, ..."``).
        behind: The race's candidate was slower to the baseline's training loss in its pairs (read while undecided).
    """
    if not verdict.pairs:
        return f"race: trial {candidate}'s config vs {versus}{longer}: {how}"
    figure = ratio_text(verdict.ratio, verdict.low, verdict.high, verdict.pairs, objective, versus)
    if verdict.decided and verdict.outcome == "loss":
        return f"race: trial {candidate}'s config{longer}: {how}; on {objective} alone it was {figure}"
    if behind and not verdict.decided:
        return f"race: trial {candidate}'s config{longer}: {how}, slower to the baseline's training loss in its pair(s); on {objective} alone it was {figure}"
    return f"race: trial {candidate}'s config, {figure}{longer}: {how}"


def _unconfirmed_line(confirmed: Any, objective: str) -> str:
    """The outcome line of a confirmation that chose the baseline: whether no candidate was raced (the
    budget had no room for a pair), a race was stopped by the budget before a decision (its candidate
    ahead: a speed-up perhaps left unproven, and what makes room; or behind), or every race was decided
    ("confirmed")."""
    room = "a longer search (--trials) or a larger --confirm-share makes room"
    if not confirmed.races:
        return (
            "not confirmed: a pair of runs of the best candidate and the baseline would take confirmation past its budget, "
            f"so no race ran: the baseline is recommended (1.00x); {room}"
        )
    race = _stopped_race(confirmed)
    if race is not None and race.verdict.ratio > 1 and not behind_on_loss(race):
        v = race.verdict
        return (
            f"not confirmed: trial {race.candidate}'s config was {ratio_text(v.ratio, v.low, v.high, v.pairs, objective, 'the baseline')}, "
            f"but the confirmation budget stopped its race before a decision: the baseline is recommended (1.00x); {room}"
        )
    if race is not None:  # behind when stopped: no speed-up in sight, but not shown slower either
        v = race.verdict
        late = (
            ", but slower to the baseline's training loss in its pair(s), so a longer race would not likely win it"
            if behind_on_loss(race)
            else ""
        )
        return (
            f"not confirmed: the confirmation budget stopped trial {race.candidate}'s race before a decision, "
            f"with it {ratio_text(v.ratio, v.low, v.high, v.pairs, objective, 'the baseline')}{late}: the baseline is recommended (1.00x)"
        )
    broken = next((r for r in confirmed.races if r.verdict.outcome == "failed"), None)
    if broken is not None:  # not "confirmed": the race ended on a failed run, not on the figures (helper-32)
        return (
            f"not confirmed: trial {broken.candidate}'s race failed ({broken.verdict.reason}): the baseline is recommended (1.00x), "
            "and a later search of this study does not race that config again"
        )
    if confirmed.unraced:  # what was raced was decided, but not every candidate was raced
        return (
            f"not confirmed: no candidate raced was shown at least 5% better than the baseline in paired runs of {confirmed.samples:,} "
            f"samples, and {len(confirmed.unraced)} other(s) were not raced (the budget): the baseline is recommended (1.00x)"
        )
    return (
        f"confirmed: no candidate was shown at least 5% better than the baseline in paired runs of {confirmed.samples:,} samples: "
        "the baseline is recommended (1.00x)"
    )


def _stopped_race(confirmed: Any) -> Any:
    """The race :func:`_unconfirmed_line` names: of the races the budget stopped before a decision
    (with a pair run, none queued), the first that was ahead (and not behind on the loss), else the
    first; ``None`` when none was stopped."""
    stopped = [r for r in confirmed.races if not r.verdict.decided and not r.pending and r.verdict.pairs]
    ahead = [r for r in stopped if r.verdict.ratio > 1 and not behind_on_loss(r)]
    return (ahead or stopped or [None])[0]


def behind_on_loss(race: Any) -> bool:
    """Whether a race judged on the loss (:attr:`autotune.study.races.Race.quality`) had its candidate
    slower to the study's loss target than its incumbent in the median of the pairs that know both
    runs' times (:attr:`autotune.paired.Pair.candidate_reach`; ``inf``: never reached): ahead on
    samples/s, it would still lose its race on the loss."""
    from autotune.paired import slower_to_target

    return race.quality and slower_to_target(race.pairs)


def frontier_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per setting of the OOM frontier.

    Args:
        rows: :func:`autotune.study.oom_frontier` rows (settings where some trial ran out of memory).
    """
    return [
        f"OOM frontier: {r['precision']}, {r['devices']} device(s), {r['strategy']}{', ' + r['setting'] if r.get('setting') else ''}: "
        f"per-device batch {'<= ' + str(r['fits_up_to']) + ' fits' if r['fits_up_to'] is not None else 'none known to fit'}, "
        f">= {r['oom_from']} runs out of memory (not run again)"
        for r in rows
    ]


def speedup_line(speed: Mapping[str, Any] | None, trial: Any, baseline: Any, objective: str = "throughput") -> str:
    """The measured speed of the recommendation against the baseline's (the export header's line).

    Args:
        speed: :func:`autotune.study.confirmed_speed` (the paired ratio), or ``None`` for the single
            search trial ``trial`` against the ``baseline`` trial.
        trial, baseline: Frozen trials with ``samples_per_sec`` user attributes.
        objective: The study's objective (names what the paired ratio compares).
    """
    if speed is not None and speed["won"]:
        return (
            f"measured: the config of trial {speed['trial']} is "
            + ratio_text(speed["ratio"], speed["low"], speed["high"], speed["pairs"], objective, races=speed.get("races", 1))
            + timed_caveat(speed)
        )
    if speed is not None:
        # (no race may have run at all: the budget; a new user read this as races that were lost)
        return "measured: 1.00x: the baseline is recommended, no candidate having won a paired race against it (the confirmation lines say why)"
    return f"measured: {unpaired_text(trial, baseline)}"


def timed_caveat(speed: Mapping[str, Any]) -> str:
    """What a ratio judged on the seconds to the baseline's loss holds for (:func:`autotune.study.confirmed_speed`'s
    ``timed``), or ``""``: a config of other math (another effective batch or lr) reached that loss sooner in
    runs of the confirmation's length; over a longer training its loss curve and the baseline's can cross
    again (a new user's 1.63x at 2,048 samples was 1.15x over the model's own ``max_epochs``)."""
    if not speed.get("timed"):
        return ""
    return (
        f", in seconds to the baseline's training loss in runs of up to {int(speed['samples']):,} training samples: it changes the "
        "training math, so over the model's own training length the gain can be smaller or larger"
    )


def samples_ratio(confirmed: Any, trials: Sequence[Any]) -> float | None:
    """How many times the baseline's training samples the recommended config needs to reach the baseline's
    training loss: over the won chain of ``confirmed`` (:class:`autotune.study.races.Confirmation`), the
    product of each race judged on the seconds to that loss (``Verdict.timed``) of the median over its
    pairs of the candidate run's ``samples_to_target`` over the incumbent run's (a race of the same math
    counts 1). ``None`` when no won race was timed, or a paired run lacks the figure. ``trials``: the
    study's trials (digests will do)."""
    if confirmed is None or not confirmed.won:
        return None
    by_number = {t.number: t for t in trials}
    ratio, timed = 1.0, False
    for race in confirmed.won:
        if not race.verdict.timed:
            continue
        ratios = []
        for pair in race.pairs:
            inc, cand = (by_number[n].user_attrs.get("samples_to_target") if n in by_number else None for n in pair.runs)
            if not inc or not cand:
                return None
            ratios.append(float(cand) / float(inc))
        ratio, timed = ratio * statistics.median(ratios), True
    return ratio if timed else None


#: Samples ratio (:func:`samples_ratio`) from which the recommendation says to train longer: below it,
#: a run's samples to the target differ by the loss curve's noise.
LONGER_FROM = 1.05


def longer_line(
    trial: int, ratio: float | None, changes: Mapping[str, tuple[int, int]] | None = None, batches: tuple[int, int] | None = None
) -> str | None:
    """The line that says to train the recommended config (search trial ``trial``) longer, or ``None``
    when its samples to the baseline's loss are less than :data:`LONGER_FROM` times the baseline's.

    Args:
        ratio: :func:`samples_ratio`.
        changes: What the export changed (:func:`autotune.export.scale_training_length`); ``None`` or
            empty: the line says how to scale the user's own length by hand.
        batches: The baseline's and this config's effective batch sizes: a changed ``max_steps`` then
            gives its arithmetic (a new user read "1.15x as long" beside "lowers max_steps from 300 to 87").
    """
    if ratio is None or ratio < LONGER_FROM:
        return None
    line = (
        f"training length: the config of trial {trial} reached the baseline's training loss after {ratio:.2f}x the baseline's "
        "training samples (median of its paired runs), and sooner: it changes the training math, so train it "
        f"{ratio:.2f}x as long for the baseline's loss"
    )
    if changes:
        said = line + ": the export " + " and ".join(_length_change(key, old, new) for key, (old, new) in changes.items())
        if "max_steps" in changes and batches is not None and batches[0] != batches[1]:
            old = changes["max_steps"][0]
            said += (
                f" ({old:,} x {ratio:.2f} x {batches[0]} / {batches[1]}, rounded up: {ratio:.2f}x the samples in steps of "
                f"effective batch {batches[1]}, not {batches[0]})"
            )
        return said
    return line + " (scale your max_epochs by it, and max_steps by it times the baseline's effective batch size over this config's)"


def _length_change(key: str, old: int, new: int) -> str:
    return f"{'raises' if new > old else 'lowers'} {key} from {old:,} to {new:,}"


def steps_line(changes: Mapping[str, tuple[int, int]], baseline_batch: int, batch: int) -> str | None:
    """The export header's line when the recommendation's effective batch size changed the user's
    ``max_steps`` (:func:`autotune.export.scale_training_length` with no samples ratio):
    ``"training length: the export lowers max_steps from 1,000 to 250: at effective batch size 128 they
    train the 32,000 samples of the baseline's 1,000 steps at 32 (...)"``; ``None`` when ``max_steps`` is unchanged."""
    if "max_steps" not in changes:
        return None
    old, new = changes["max_steps"]
    return (
        f"training length: the export {_length_change('max_steps', old, new)}: at effective batch size {batch} they train "
        f"the {old * baseline_batch:,} samples of the baseline's {old:,} steps at {baseline_batch} (the rest of the length as in your own runs)"
    )


def unpaired_text(trial: Any, baseline: Any) -> str:
    """The speed of ``trial`` over the ``baseline`` trial from their single search runs (no paired
    confirmation: ``--confirm 0``, or a run stopped before it), said to be unconfirmed:
    ``"3,702 samples/s vs baseline 2,000 samples/s (trial 0): speedup 1.85x in single unpaired runs (not confirmed)"``;
    for the baseline itself, ``"1.00x: no other trial was feasible and faster (the baseline is recommended; 2,000 samples/s)"``.

    For a config that changes the training math (:func:`_other_math`), the same samples are not the
    same progress: the text adds how many times sooner it reached the baseline's training loss, the
    figure a race judges such a config on, when both runs have one.

    When the baseline trial ran on a busy machine (:func:`autotune.contention.is_busy`) its samples/s
    understates the baseline, so every ratio over it overstates the speed-up: the text then says so,
    with the figure, and how to confirm (``--confirm 3`` races the best configs in paired runs).

    Args:
        trial, baseline: Frozen trials with ``samples_per_sec`` user attributes.
    """
    from autotune.contention import is_busy

    sps, b_sps = trial.user_attrs["samples_per_sec"], baseline.user_attrs["samples_per_sec"]
    if trial.number == baseline.number:  # worded as the recommendation of a confirmation that kept the baseline
        return f"1.00x: no other trial was feasible and faster (the baseline is recommended; {sps:,.0f} samples/s)"
    text = f"{sps:,.0f} samples/s vs baseline {b_sps:,.0f} samples/s (trial {baseline.number}): speedup {sps / b_sps:.2f}x"
    text += " in single unpaired runs (not confirmed)"
    mine, theirs = trial.user_attrs.get("time_to_target"), baseline.user_attrs.get("time_to_target")
    if _other_math(trial, baseline) and mine and theirs:  # what a race of other math would judge: helper-32 read 1.20x for 1.01x
        ratio = theirs / mine
        how = f"{ratio:.2f}x sooner" if ratio >= 1.005 else f"{ratio:.2f}x as fast"
        text += f"; {how} to the baseline's training loss, the figure that counts for a config of other math"
    if is_busy(baseline.user_attrs):
        taken = baseline.user_attrs["other_cpu_fraction"]
        text += (
            f"; the baseline trial ran while other processes took {taken:.0%} of the CPU, so this likely overstates "
            "the speed-up: confirm it with --confirm 3 (paired runs)"
        )
    return text


def _other_math(trial: Any, baseline: Any) -> bool:
    """Whether ``trial``'s config changes the training math of ``baseline``'s (effective batch, lr,
    searched constructor arguments: :func:`autotune.study.math_class.is_preserving`)."""
    from autotune.config import TrialConfig
    from autotune.study.math_class import is_preserving

    mine, theirs = trial.user_attrs.get("config"), baseline.user_attrs.get("config")
    return bool(mine and theirs) and not is_preserving(TrialConfig.from_dict(mine), TrialConfig.from_dict(theirs))


def quality_line(trial: Any, baseline: Any) -> str | None:
    """One line comparing the time to the baseline's loss of ``trial`` and of the baseline, or None."""
    mine, theirs = trial.user_attrs.get("time_to_target"), baseline.user_attrs.get("time_to_target")
    if "target_reached" not in trial.user_attrs or theirs is None:
        return None
    if mine is None:
        from autotune.objective import NEVER_FACTOR

        return (
            "time to the baseline's training loss: never (not reached in its run, and its curve, extrapolated against "
            f"log samples, is not falling or would need more than {NEVER_FACTOR:g}x its samples)"
        )
    how = "reached" if trial.user_attrs["target_reached"] else "extrapolated from its curve"
    line = f"time to the baseline's training loss ({trial.user_attrs['loss_target']:.4g}, within the loss tolerance): {mine:.3g} s ({how})"
    if trial.number == baseline.number:  # the baseline recommended: nothing to compare with
        return line
    # paired runs shown for each config (their median runs): one pair's figure, not the race's median over its pairs
    which = " (in the two runs shown; a race's figure is its median over the pairs)" if "pair_of" in trial.user_attrs else ""
    from autotune.contention import is_busy

    if not which and is_busy(baseline.user_attrs):  # single unpaired runs: a slowed baseline inflates this ratio too (helper-31)
        which = (
            f" (single unpaired runs; the baseline trial ran while other processes took {baseline.user_attrs['other_cpu_fraction']:.0%} "
            "of the CPU, so this likely overstates it)"
        )
    ratio = theirs / mine
    return f"{line} vs {theirs:.3g} s for the baseline = {ratio:.2f}x {'faster' if ratio >= 1.005 else 'as fast'}{which}"


def mfu_text(mfu: float) -> str:
    """Model FLOPs utilization (a fraction, 0-1) as a percentage with one decimal, or two significant
    digits below 0.1% (a small model on a CPU: ``"0.034%"``, not ``"0.0%"``)."""
    if 0 < abs(mfu) < 0.001:
        return f"{mfu * 100:.2g}%"
    return f"{mfu:.1%}"


def flops_line(trial: Any) -> str | None:
    """Model FLOPs per sample, FLOP/s and MFU of a trial, or None when they were not measured."""
    attrs = trial.user_attrs
    if not attrs.get("model_flops_per_sec"):
        return None
    mfu = f", MFU {mfu_text(attrs['mfu'])} of the device's peak" if attrs.get("mfu") is not None else ""
    if attrs.get("mfu") is not None and attrs.get("peak_flops_source") == "achieved":
        mfu = ", MFU unknown: the measured peak was below this trial's FLOP/s (re-measure it: docs/troubleshooting.md)"
    return (
        f"model FLOPs: {attrs['flops_per_sample'] / 1e9:.4g} GFLOP per sample (forward + backward), "
        f"{attrs['model_flops_per_sec'] / 1e12:.4g} TFLOP/s{mfu}"
    )


def no_curve_line(trials: Sequence[Any], monitor: str) -> str | None:
    """Why a trial table's time to target reads ``no curve`` (the baseline had no training loss curve, so no
    trial has a target), or ``None`` when no trial of ``trials`` reads it."""
    from autotune.report import _to_target

    if not any(_to_target(t.user_attrs) == "no curve" for t in trials):
        return None
    return (
        f"to target 'no curve': training_step returned no loss tensor and --monitor {monitor!r} is not logged in each "
        "training_step, so no trial has a training loss curve to time (return the loss, or give --monitor a metric "
        "logged in training_step; docs/troubleshooting.md#no_loss_curve)"
    )
