"""Paired, sequential confirmation: is a candidate config really faster than the incumbent?

After the search, the best configs (the candidates, best first) are *raced* one at a time against the
*incumbent*: the baseline first, then any candidate that won. A race is a series of *pairs*: one run of
the incumbent's config and one of the candidate's, back to back in the same warm process pool, the
order alternating from pair to pair (pair 0 runs the incumbent first). Whatever the machine's load does
over minutes, the two runs of a pair see nearly the same machine, so the pair's *log-ratio* cancels the
drift that unpaired medians drown in (racing as in irace's F-race, Birattari et al. 2002, and SMAC's
intensification, Hutter et al. 2011). This module holds the statistics, on plain numbers; the runs
themselves are queued by :mod:`autotune.study.racing`.

The decision rule (:func:`judge`), on ``d_i = log(candidate / incumbent)`` of the objective value
(the inverse ratio for a minimised objective, so ``d_i > 0`` always means the candidate did better):

- **Win**: at least ``min_pairs`` (2) pairs, and the lower end of the 90% Student-t interval of the
  mean log-ratio is above ``log(1 + min_effect)`` (a one-sided 95% bound: the candidate is at least
  5% better), and the exact one-sided sign test of "the candidate is better in more pairs than not"
  has ``p <= 0.125`` (3 of 3, 4 of 4, 5 of 5 or 5 of 6 pairs). The t interval alone can be pulled by
  one large pair; the sign test alone cannot say by how much. 0.125 is the smallest level three pairs
  can reach (``0.5 ** 3``). Two pairs reach only 0.25, so a win at two pairs asks instead that the
  candidate be better in both, with the same t bound: at one degree of freedom (t = 6.31) it clears
  ``log(1.05)`` only when the smaller log-ratio is at least 0.73 times the larger, so one large pair
  cannot pull it, and a consistent speed-up is decided a pair early (digits' batch 128 in bf16, 1.61x
  and 1.45x in its first two pairs; demo ``BoringModel``'s 12x at batch 32 over batch 1, whose
  batch-1 runs make each pair costly), which keeps a short search's confirmation within its share of
  the run. Simulated races of up to 6 pairs with normal log-ratios and no true speed-up
  (``tests/test_paired.py``) are won 3.4% of the time at a log-ratio standard deviation of 0.15 when
  decisions start at three pairs, and 5.3% with the two-pair look (6.3% and 8.6% at 0.3: each look
  is a one-sided 5% test, and the looks add up); one truly 10% slower, 0.1% and 0.3% (1.6% and 2.9%
  at 0.3): it must clear 1.05x.
- **The replicate runs' interval.** Each config of a race also ran several times on its own: once per
  pair, and once in the search (its search trial, when it trained as many samples as the race's runs).
  Model a run's log figure as config + moment + jitter: two runs of one config differ by jitter and by
  the load's drift between them, so their variance about the config's mean is at least the jitter's,
  and a pair's log-ratio, one moment's two jitters, has at most twice it. Pooled over both configs
  (:func:`replicate_ss`, a one-way ANOVA's within-group mean square, with ``2n - 2`` degrees of freedom
  from ``n`` pairs and up to 2 more from the search trials), this bounds the pairs' variance with more
  degrees of freedom than the ``n - 1`` of the pairs alone: at two pairs, ``t = 2.92`` (2 degrees) or
  ``2.35`` (3) instead of 6.31. Under drift it overstates (conservative); the candidate's search trial,
  picked as the fastest, too. The narrower of the two intervals is used (both are valid; the choice adds
  to the false wins: simulated in ``tests/test_paired.py`` with a jitter of 0.15 a run, 9.2% of races
  of two equal configs are won against 7.5% by the pairs' interval alone, 7.6% with a drift of 0.3 between
  moments; a config 10% slower, 1.9% against 1.7%), and it decides a true 1.3x speed-up at two pairs
  twice as often (40% against 19%, no drift): a short search's confirmation, which the budget holds to
  two pairs, decides instead of stopping (digits on a 2-core CPU without bf16: 1.34x and 1.80x sooner
  to the baseline's loss in its two pairs, [0.61x, 3.98x] from the pairs alone, [1.30x, 1.87x] with
  its replicate runs).
  The sign test's rule is unchanged.
- **A win at one pair**, by the replicate runs alone: when both configs' search trials count (2 degrees
  of freedom at one pair), the pair's log-ratio less ``t(0.995) = 9.92`` of those runs' standard errors
  is above ``log(1 + min_effect)``. Only a win is decided at one pair (any other outcome waits for the
  second). It takes a speed-up several times the runs' jitter: simulated with a jitter of 0.15 a run,
  equal configs are won at one pair in 0.2% of races (0.1% at most at a jitter of 0.05 or 0.3, with or
  without a drift of 0.3; a config 10% slower, 0.1% at most), a true 19x in 85% (33% with that drift),
  a 3x in 22% (6%); the demo ``BoringModel`` beside a CPU hog, 19x in its one pair, had stopped undecided when
  the confirmation budget fitted no second pair.
- **Loss**: the candidate's median final loss over its paired runs breaks the study's loss tolerance
  against the incumbent's median over the same pairs (judged from ``min_pairs`` on, as a win is); or,
  with ``quality`` (a candidate of other math), it was slower to the study's loss target in the
  median pair (seconds from each run's loss curve, as MLPerf's time-to-train counts them).
- **Slower** (mean ratio at most 1) or **unproven** (mean ratio above 1): the upper end of the
  interval is below ``log(1 + min_effect)`` (at least ``min_pairs`` pairs): the candidate cannot be
  5% better; or it already lost so many pairs that the sign test cannot pass within ``max_pairs``
  (a mean ratio above 1 then comes from one or two large pairs, which the sign test does not trust).
- **Undecided**: ``max_pairs`` (6) pairs without a decision.
- **Failed**: a paired run failed (a crash, a NaN, out of memory), after the one retry a race gives it
  (:func:`autotune.study.races.races_of`).

Only a win changes the incumbent; every other outcome keeps it, so a config that was not shown better
than the baseline is never recommended.

Why a 5% minimum effect: on a 2-core machine the same 8,000-sample run measured twice differed by 13%;
a pairing removes the drift but not that per-run jitter, and at most six pairs cannot tell a smaller
effect from it. A change of config the user has to carry is also
not worth less than a few percent.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.objective import constraint_value

__all__ = [
    "MAX_PAIRS",
    "MIN_EFFECT",
    "MIN_PAIRS",
    "PLANNED_PAIRS",
    "SIGN_ALPHA",
    "Pair",
    "Verdict",
    "chain",
    "fit_samples",
    "judge",
    "log_ratio",
    "replicate_ss",
    "runs_first",
    "slower_to_target",
]

#: Smallest speed-up a candidate must be shown to have (a fraction; 0.05 = 5%, see the module docstring).
MIN_EFFECT = 0.05
#: Fewest pairs before any decision but "failed" or "slower by the sign test" (2: a t interval needs two;
#: a win at 2 must be better in both, see the module docstring).
MIN_PAIRS = 2
#: Most pairs of one race (``--confirm-pairs``).
MAX_PAIRS = 6
#: Pairs of the first race the confirmation's run length is planned for
#: (:func:`autotune.study.racing.confirm_samples`): more, shorter runs rather than the minimum 3 long
#: ones. At equal jitter per pair the interval's half-width ``t(n - 1) / sqrt(n)`` is 1.69 at 3 pairs
#: and 0.95 at 5. Measured (``benchmarks/confirm_length.py``, 6 interleaved pairs per length, quiet
#: 2-core CPU): charlm's runs of 4,096 samples jittered less than runs of 6,647 (standard deviation
#: of the log-ratio 0.064 vs 0.153) at 31% less time per pair; the input-bound augmented_digits'
#: a little more than runs of 5,670 (0.248 vs 0.189) at 25% less; start-up and validation are a
#: fixed cost. In the budget, the expected lower end of the interval was higher at the shorter
#: length on both (0.90 vs 0.75; 0.60 vs 0.39, at one pooled mean).
PLANNED_PAIRS = 5
#: Level of the exact one-sided sign test (``0.5 ** 3``: 3 of 3 pairs; 2 of 2 pairs win on the t bound alone).
SIGN_ALPHA = 0.125
#: A log-ratio is clipped to +-log(100) (a run that never reached its target: ``inf`` seconds).
_CLIP = math.log(100.0)
#: Student-t 0.95 quantiles for 1..30 degrees of freedom (a 90% two-sided interval; Fisher & Yates' tables).
_T95 = (
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
    1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
    1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
)  # fmt: skip
#: Student-t 0.995 quantiles for 1..10 degrees of freedom (a one-sided 99.5% bound; the 10th is used beyond).
_T995 = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169)


@dataclass(frozen=True)
class Pair:
    """One incumbent run and one candidate run, back to back.

    Attributes:
        incumbent: The incumbent run's objective value (samples/s, goodput samples/s, or seconds to target).
        candidate: The candidate run's.
        incumbent_loss: The incumbent run's final loss.
        candidate_loss: The candidate run's.
        runs: ``(incumbent trial number, candidate trial number)`` (``(-1, -1)`` when not from a study).
        incumbent_reach: The incumbent run's seconds to the study's loss target (the baseline's training
            loss, :func:`autotune.objective.time_to_target`; ``inf``: never; NaN: not known).
        candidate_reach: The candidate run's.
    """

    incumbent: float
    candidate: float
    incumbent_loss: float = 1.0
    candidate_loss: float = 1.0
    runs: tuple[int, int] = (-1, -1)
    incumbent_reach: float = math.nan
    candidate_reach: float = math.nan


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` decided about one race.

    Attributes:
        outcome: ``win``, ``slower`` or ``unproven`` (cannot win: mean ratio at most 1, or above 1),
            ``loss``, ``failed``, ``undecided`` (the pair cap), or ``running`` (more pairs are needed).
        pairs: Completed pairs judged (>= 0).
        ratio: ``exp(mean log-ratio)``: how many times better the candidate is (> 1: better); NaN without pairs.
        low, high: The 90% t interval of the ratio (NaN below 2 pairs, unless the replicate runs' interval
            judged one pair: ``df`` >= 2).
        better: Pairs in which the candidate did better.
        sign_p: The exact one-sided sign test's p-value (1.0 without pairs).
        reason: One line saying why (empty while running).
        df: Degrees of freedom of the interval when the replicate runs' variance gave the narrower one
            (``replicates`` of :func:`judge`), else -1 (the pairs': ``pairs - 1``).
        timed: The figures judged were seconds to the study's loss target, not the objective value
            (:func:`autotune.study.races.judge_race`, a candidate of other math).
    """

    outcome: str
    pairs: int
    ratio: float
    low: float
    high: float
    better: int
    sign_p: float
    reason: str = ""
    df: int = -1
    timed: bool = False

    @property
    def decided(self) -> bool:
        return self.outcome != "running"

    @property
    def degrees(self) -> int:
        """Degrees of freedom of the interval: ``df`` when the replicate runs' variance set it, else ``pairs - 1``."""
        return self.df if self.df >= 1 else self.pairs - 1

    @property
    def log_se(self) -> float:
        """Standard error of the mean log-ratio, recovered from the interval (NaN without one)."""
        if self.pairs < 1 or self.degrees < 1 or not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low <= 0:
            return math.nan
        return (math.log(self.high) - math.log(self.low)) / (2 * _t95(self.degrees))


def runs_first(pair_index: int) -> str:
    """Which config runs first in pair ``pair_index`` (>= 0): ``incumbent`` for even pairs, ``candidate`` for odd."""
    return "incumbent" if pair_index % 2 == 0 else "candidate"


def log_ratio(incumbent: float, candidate: float, maximize: bool) -> float:
    """``log(candidate / incumbent)`` (``log(incumbent / candidate)`` when minimising), clipped to +-log(100).

    A value that is not a positive finite number is worse than any other (``inf`` seconds to target
    when minimising: never reached; NaN or <= 0 samples/s when maximising); both such: 0.
    """

    def good(v: float) -> bool:
        return math.isfinite(v) and v > 0

    if not good(incumbent) or not good(candidate):
        return 0.0 if good(incumbent) == good(candidate) else (_CLIP if good(candidate) else -_CLIP)
    d = math.log(candidate / incumbent) if maximize else math.log(incumbent / candidate)
    return max(-_CLIP, min(_CLIP, d))


def _t95(df: int) -> float:
    return _T95[min(df, len(_T95)) - 1] if df >= 1 else math.inf


def _t995(df: int) -> float:
    return _T995[min(df, len(_T995)) - 1] if df >= 1 else math.inf


def _sign_p(better: int, n: int) -> float:
    """Exact one-sided binomial p-value ``P(X >= better)`` for ``X ~ Binomial(n, 1/2)``."""
    return sum(math.comb(n, k) for k in range(better, n + 1)) / 2**n if n else 1.0


def _can_still_win(better: int, n: int, max_pairs: int) -> bool:
    """Whether some count of pairs up to ``max_pairs`` could still pass the sign test (all later pairs better)."""
    return any(_sign_p(better + (m - n), m) <= SIGN_ALPHA for m in range(max(n, 1), max_pairs + 1))


def judge(
    pairs: Sequence[Pair],
    maximize: bool,
    tolerance: float,
    mode: str = "min",
    *,
    failed: int = 0,
    min_effect: float = MIN_EFFECT,
    min_pairs: int = MIN_PAIRS,
    max_pairs: int = MAX_PAIRS,
    quality: bool = False,
    replicates: tuple[float, int] | None = None,
) -> Verdict:
    """Decide a race from its completed pairs (the rule is in the module docstring).

    Args:
        pairs: The race's completed pairs, in order.
        maximize: Whether a larger objective value is better (samples/s) or smaller (seconds).
        tolerance: The study's loss tolerance, ``0 <= tolerance < 1``.
        mode: ``"min"`` or ``"max"``, as for the loss tolerance.
        failed: Paired runs that failed (> 0 decides ``failed``).
        min_effect: Smallest improvement a win must show, a fraction ``>= 0`` (0.05: 5%).
        min_pairs: Fewest pairs for a win, a loss or an interval decision (>= 2).
        max_pairs: The pair cap (>= ``min_pairs``).
        quality: Also judge the seconds to the loss target (a math-changing candidate, which trains the
            same samples in other steps): when every pair knows both runs' and the candidate was slower
            to the target in the median pair, the race is lost on the loss.
        replicates: ``(sum of squares, degrees of freedom)`` of the log figures of the two raced
            configs' runs about each config's own mean (:func:`replicate_ss`), or ``None``: the interval
            is then the pairs' alone.

    Returns:
        A :class:`Verdict`; ``running`` when another pair is needed.

    Raises:
        ValueError: ``min_pairs < 2`` or ``max_pairs < min_pairs``.
    """
    if min_pairs < 2 or max_pairs < min_pairs:
        raise ValueError(f"need 2 <= min_pairs <= max_pairs, got min_pairs={min_pairs}, max_pairs={max_pairs}")
    d = [log_ratio(p.incumbent, p.candidate, maximize) for p in pairs]
    n = len(d)
    better = sum(x > 0 for x in d)
    sign_p = _sign_p(better, n)
    mean = statistics.fmean(d) if d else math.nan
    half = _t95(n - 1) * statistics.stdev(d) / math.sqrt(n) if n >= 2 else math.nan
    df = -1
    if n >= 2 and replicates is not None and replicates[1] >= 1:  # the replicate runs' interval, when narrower
        ss, dof = replicates
        wide = _t95(dof) * math.sqrt(2.0 * ss / dof / n)
        if wide < half:
            half, df = wide, dof
    ratio, low, high = math.exp(mean) if d else math.nan, math.exp(mean - half), math.exp(mean + half)
    threshold = math.log1p(min_effect)

    def verdict(outcome: str, reason: str = "") -> Verdict:
        return Verdict(outcome, n, ratio, low, high, better, sign_p, reason, df)

    def cannot_win(reason: str) -> Verdict:  # "slower" only where the mean ratio says so
        return verdict("slower" if ratio <= 1 else "unproven", reason)

    if failed:
        return verdict("failed", f"{failed} paired run(s) failed")
    if n and not _can_still_win(better, n, max_pairs):
        return cannot_win(f"better in only {better} of {n} pairs: the sign test cannot pass within {max_pairs} pairs")
    one_pair = n == 1 < min_pairs and replicates is not None and replicates[1] >= 2
    if one_pair:  # the replicate runs' interval alone, and only a win (see the module docstring)
        assert replicates is not None
        ss, df = replicates
        se = math.sqrt(2.0 * ss / df)
        low, high = math.exp(mean - _t95(df) * se), math.exp(mean + _t95(df) * se)
    elif n < min_pairs:
        return verdict("running")
    mine = statistics.median(p.candidate_loss for p in pairs)
    theirs = statistics.median(p.incumbent_loss for p in pairs)
    if one_pair:  # only a win, within the loss tolerance and (quality) sooner to the target
        kept = constraint_value(mine, theirs, tolerance, mode) <= 0
        first = pairs[0]
        both = not (math.isnan(first.incumbent_reach) or math.isnan(first.candidate_reach))
        sooner = not (quality and both and log_ratio(first.incumbent_reach, first.candidate_reach, False) < 0)
        if kept and sooner and mean - _t995(df) * se > threshold:
            return verdict("win", f"better by {ratio:.2f}x in its one pair, above {1 + min_effect:.2f}x by its replicate runs' 99.5% bound")
        return verdict("running")
    if constraint_value(mine, theirs, tolerance, mode) > 0:
        return verdict("loss", f"median paired loss {mine:.4g} above the incumbent's {theirs:.4g} + {tolerance:.0%}")
    known = _timed(pairs)
    if quality and len(known) == n and slower_to_target(known):
        mine, theirs = statistics.median(p.candidate_reach for p in known), statistics.median(p.incumbent_reach for p in known)
        return verdict(
            "loss", f"slower to the baseline's training loss: median {_seconds(mine)} against the incumbent's {_seconds(theirs)}"
        )
    if mean - half > threshold and (sign_p <= SIGN_ALPHA or better == n == 2):  # 2 of 2: the t bound alone
        return verdict("win", f"better in {better} of {n} pairs, interval above {1 + min_effect:.2f}x")
    if mean + half < threshold:
        return cannot_win(f"interval below the minimum effect {1 + min_effect:.2f}x")
    if n >= max_pairs:
        return verdict("undecided", f"{n} pairs (the cap) without a decision: not shown {min_effect:.0%} better")
    return verdict("running")


def _timed(pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs that know both runs' seconds to the loss target (``inf`` counts: never reached)."""
    return [p for p in pairs if not (math.isnan(p.incumbent_reach) or math.isnan(p.candidate_reach))]


def slower_to_target(pairs: Sequence[Pair]) -> bool:
    """Whether the candidate was slower to the loss target than the incumbent in the median of the
    pairs that know both runs' seconds to it (``False`` when none does)."""
    known = _timed(pairs)
    return bool(known) and statistics.median(log_ratio(p.incumbent_reach, p.candidate_reach, False) for p in known) < 0


def _seconds(value: float) -> str:
    """``"1.23 s"``, or ``"never (not reached, nor on course to be)"`` for an infinite time to the target."""
    return f"{value:.3g} s" if math.isfinite(value) else "never (not reached, nor on course to be)"


def chain(verdicts: Sequence[Verdict]) -> tuple[float, float, float, int]:
    """The ratio over the baseline of a chain of won races (each won against the previous winner).

    The log-ratios add up; the interval's half-width is the root sum of squares of the races' standard
    errors times the t quantile of the race with the fewest pairs (conservative: fewer degrees of freedom).

    Args:
        verdicts: The won races, the first one against the baseline.

    Returns:
        ``(ratio, low, high, pairs)``: ratio and its 90% interval (> 1: better), and the pairs in all;
        ``(1.0, 1.0, 1.0, 0)`` for no race.
    """
    if not verdicts:
        return 1.0, 1.0, 1.0, 0
    if len(verdicts) == 1:
        v = verdicts[0]
        return v.ratio, v.low, v.high, v.pairs
    mean = sum(math.log(v.ratio) for v in verdicts)
    se = math.sqrt(sum(v.log_se**2 for v in verdicts))
    half = _t95(min(v.degrees for v in verdicts)) * se
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), sum(v.pairs for v in verdicts)


def replicate_ss(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """``(sum of squares, degrees of freedom)`` of the log of each group's values about the group's own
    log mean, pooled over the groups (a one-way ANOVA's within-group terms), for :func:`judge`'s
    ``replicates``; ``None`` when no group has two finite positive values.

    Args:
        groups: The figures of each raced config's runs at one race length (each > 0; others are skipped).
    """
    ss, df = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values if math.isfinite(v) and v > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return (ss, df) if df else None


def fit_samples(budget: float, pairs: int, runs: Sequence[tuple[float, float]], floor: int, ceiling: int) -> int:
    """Training samples per confirmation run so that ``pairs`` pairs fit in ``budget`` seconds.

    A run of ``s`` samples of a config is modelled as ``overhead + s / samples_per_sec`` seconds, both
    measured by its search trial (the overhead: start-up, warm-up, validation).

    Args:
        budget: Seconds the confirmation may take (>= 0).
        pairs: Pairs that must fit (>= 1).
        runs: ``(overhead seconds >= 0, samples/s > 0)`` of the incumbent and of the candidate.
        floor, ceiling: The answer is clamped to ``[floor, ceiling]`` (1 <= floor <= ceiling).

    Returns:
        Samples per run, a whole number in ``[floor, ceiling]``.
    """
    per_pair = budget / pairs - sum(o for o, _ in runs)
    rate = sum(1.0 / sps for _, sps in runs if sps > 0)
    if rate <= 0 or not math.isfinite(per_pair):
        return ceiling
    return int(max(floor, min(ceiling, per_pair / rate)))
