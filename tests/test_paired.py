"""The paired racing rule on fixed data: drift, ties, the loss check, failures, the cap, and the chain."""

import math
import statistics
import time

import pytest

from autotune.paired import Pair, chain, fit_samples, judge, log_ratio, runs_first

#: The machine's load over a race: each pair runs at a different speed factor (other work comes and goes).
DRIFT = (1.0, 0.3, 0.6, 0.15, 0.8, 0.4)


def _pairs(incumbent, candidate, losses=(1.0, 1.0)):
    return [Pair(i, c, *losses) for i, c in zip(incumbent, candidate)]


def test_drift_defeats_unpaired_medians_but_the_paired_rule_decides_a_win():
    base = [100 * f for f in DRIFT[:3]]
    fast = [130 * f * j for f, j in zip(DRIFT[:3], (1.02, 0.97, 1.01))]  # 1.3x in every pair
    # the old unpaired rule: the medians differ by less than the max-min spread of either: "within noise"
    assert abs(statistics.median(fast) - statistics.median(base)) <= max(max(base) - min(base), max(fast) - min(fast))
    got = judge(_pairs(base, fast), maximize=True, tolerance=0.05)
    assert got.outcome == "win" and got.pairs == 3 and got.better == 3 and got.sign_p == 0.125
    assert got.low > 1.05 and got.ratio == pytest.approx(1.3, rel=0.02) and got.low < got.ratio < got.high


def test_a_race_needs_the_minimum_pairs_before_a_win():
    got = judge(_pairs([100], [200]), maximize=True, tolerance=0.05)
    assert got.outcome == "running" and not got.decided and got.ratio == pytest.approx(2.0)


def test_two_pairs_win_only_a_consistent_speedup():
    # the quiet zoo's digits: batch 128 in bf16 at 1.61x and 1.45x the baseline in its first two pairs
    got = judge(_pairs([4343, 4453], [7008, 6458]), maximize=True, tolerance=0.05)
    assert got.outcome == "win" and got.pairs == 2 and got.reason == "better in 2 of 2 pairs, interval above 1.05x"
    assert got.sign_p == 0.25 and 1.05 < got.low < got.ratio < got.high
    # demo BoringModel's pairs 0 and 1: batch 32 at 13.7x and 15.6x the baseline's batch 1
    assert judge(_pairs([714, 642], [9748, 10045]), maximize=True, tolerance=0.05).outcome == "win"
    # the smaller log-ratio under 0.73 of the larger: one large pair cannot decide two (1.5x and 1.2x: 0.45)
    assert judge(_pairs([100, 100], [150, 120]), maximize=True, tolerance=0.05).outcome == "running"
    # better in one pair only: the sign test's rule, not the interval's
    assert judge(_pairs([100, 100], [300, 95]), maximize=True, tolerance=0.05).outcome == "running"
    # the loss is judged at two pairs too: a faster candidate that breaks the tolerance loses
    assert judge(_pairs([100, 100], [900, 910], losses=(1.0, 1.2)), maximize=True, tolerance=0.05).outcome == "loss"


def _false_wins(sigma: float, races: int = 2000, true_ratio: float = 1.0) -> tuple[float, float]:
    """Share of simulated races a candidate no faster than ``true_ratio`` wins (normal log-ratios of standard
    deviation ``sigma`` around its log): ``(any win, a win at two pairs)``."""
    import random

    rng = random.Random(7)
    wins = early = 0
    for _ in range(races):
        pairs = []
        for _ in range(6):
            pairs.append(Pair(100.0, 100.0 * math.exp(rng.gauss(math.log(true_ratio), sigma))))
            got = judge(pairs, maximize=True, tolerance=0.05)
            if got.decided:
                wins += got.outcome == "win"
                early += got.outcome == "win" and got.pairs == 2
                break
    return wins / races, early / races


def test_a_config_no_faster_rarely_wins_and_the_two_pair_look_adds_little():
    for sigma in (0.05, 0.15, 0.3):  # quiet to very noisy pairs (the 2-core machine's jitter: 0.06 to 0.25)
        wins, early = _false_wins(sigma)
        assert wins <= 0.10 and early <= 0.05, (sigma, wins, early)  # each look is a one-sided 5% test
        slower, _ = _false_wins(sigma, true_ratio=0.9)  # a config truly 10% slower: it must clear 1.05x
        assert slower <= (0.01 if sigma <= 0.15 else 0.04), (sigma, slower)


def test_a_tie_stops_once_the_sign_test_cannot_pass():
    jitter = (1.03, 0.97, 1.02, 0.98, 1.01, 0.99)  # the same config: better in every other pair
    base = [100 * f for f in DRIFT]
    same = [100 * f * j for f, j in zip(DRIFT, jitter)]
    assert judge(_pairs(base[:3], same[:3]), maximize=True, tolerance=0.05).outcome == "running"  # 5 of 6 still possible
    got = judge(_pairs(base[:4], same[:4]), maximize=True, tolerance=0.05)
    assert got.outcome == ("slower" if got.ratio <= 1 else "unproven") and got.better == 2 and got.low < 1.0 < got.high
    assert got.reason == "better in only 2 of 4 pairs: the sign test cannot pass within 6 pairs"


def test_the_cap_ends_a_race_better_in_every_pair_but_too_noisy_to_clear_the_minimum_effect():
    ratios = (1.5, 1.02, 1.6, 1.01, 1.45, 1.02)
    base = [100 * f for f in DRIFT]
    noisy = [b * r for b, r in zip(base, ratios)]
    for n in range(3, 6):
        assert judge(_pairs(base[:n], noisy[:n]), maximize=True, tolerance=0.05).outcome == "running"
    got = judge(_pairs(base, noisy), maximize=True, tolerance=0.05)
    assert got.outcome == "undecided" and got.pairs == 6 and got.better == 6 and got.low < 1.05 < got.ratio
    assert "not shown 5% better" in got.reason
    capped = judge(_pairs(base[:3], noisy[:3]), maximize=True, tolerance=0.05, max_pairs=3)
    assert capped.outcome == "undecided" and capped.pairs == 3


def test_a_faster_candidate_whose_loss_breaks_the_tolerance_does_not_win():
    got = judge(_pairs([100, 100, 100], [200, 210, 190], losses=(1.0, 1.2)), maximize=True, tolerance=0.05)
    assert got.outcome == "loss" and got.reason.startswith("median paired loss 1.2 above the incumbent's 1")


def test_a_candidate_of_other_math_faster_per_sample_but_slower_to_the_baseline_s_loss_loses_the_race():
    """The quiet zoo's charlm: batch 64 at 7x the lr, 1.13x the samples/s in 3 of 3 pairs and its final loss within
    the tolerance, but 27-30 s (extrapolated) to the baseline's training loss against 10-11 s: 0.68x standalone."""
    sps = ([1501, 1346, 1422], [1711, 1586, 1541])
    reach = ([10.2, 11.3, 10.7], [27.0, 29.1, 29.9])
    pairs = [Pair(i, c, 2.301, 2.38, (-1, -1), ri, rc) for i, c, ri, rc in zip(*sps, *reach)]
    assert judge(pairs, maximize=True, tolerance=0.05).outcome == "win"  # samples/s alone (math-preserving)
    got = judge(pairs, maximize=True, tolerance=0.05, quality=True)
    assert got.outcome == "loss" and got.ratio > 1.05
    assert got.reason == "slower to the baseline's training loss: median 29.1 s against the incumbent's 10.7 s"
    # faster to the loss too (or never known): the race is decided on samples/s as before
    quick = [Pair(i, c, 2.301, 2.38, (-1, -1), ri, ri / 1.1) for i, c, ri in zip(*sps, reach[0])]
    assert judge(quick, maximize=True, tolerance=0.05, quality=True).outcome == "win"
    unknown = [Pair(i, c, 2.301, 2.38) for i, c in zip(*sps)]
    assert judge(unknown, maximize=True, tolerance=0.05, quality=True).outcome == "win"
    # a candidate whose curve never reaches the target (inf) where the incumbent's does is slower to it
    never = [Pair(i, c, 2.301, 2.38, (-1, -1), ri, math.inf) for i, c, ri in zip(*sps, reach[0])]
    assert judge(never, maximize=True, tolerance=0.05, quality=True).outcome == "loss"


def test_a_clearly_slower_candidate_stops_after_two_pairs():
    got = judge(_pairs([100, 100], [80, 70]), maximize=True, tolerance=0.05)
    assert got.outcome == "slower" and "sign test cannot pass within 6 pairs" in got.reason


def test_an_interval_below_the_minimum_effect_stops_the_race():
    base = [100.0] * 4
    barely = [103.0, 102.0, 102.5, 101.5]  # better in every pair, but surely by less than 5%
    got = judge(_pairs(base, barely), maximize=True, tolerance=0.05)
    assert got.outcome == "unproven" and got.high < 1.05 and got.better == 4 and got.ratio > 1  # faster, not enough


def test_a_mean_ratio_pulled_up_by_one_pair_is_unproven_not_slower():
    got = judge(_pairs([100, 100, 100], [400, 90, 95]), maximize=True, tolerance=0.05)
    assert got.ratio > 1.3 and got.better == 1
    assert got.outcome == "unproven" and got.reason == "better in only 1 of 3 pairs: the sign test cannot pass within 6 pairs"


def test_a_failed_run_ends_the_race():
    got = judge(_pairs([100], [300]), maximize=True, tolerance=0.05, failed=1)
    assert got.outcome == "failed" and got.reason == "1 paired run(s) failed"


def test_a_minimised_objective_wins_with_fewer_seconds():
    got = judge(_pairs([10.0, 12.0, 9.0], [6.0, 7.5, 5.2]), maximize=False, tolerance=0.05)
    assert got.outcome == "win" and got.ratio > 1.5
    assert log_ratio(10.0, math.inf, maximize=False) < 0 < log_ratio(math.inf, 5.0, maximize=False)
    assert log_ratio(math.nan, math.nan, maximize=True) == 0.0


def test_the_order_alternates_and_bad_limits_are_refused():
    assert [runs_first(i) for i in range(4)] == ["incumbent", "candidate", "incumbent", "candidate"]
    with pytest.raises(ValueError, match="min_pairs <= max_pairs"):
        judge([], maximize=True, tolerance=0.05, min_pairs=4, max_pairs=3)


def test_a_chain_of_wins_multiplies_the_ratios_and_widens_the_interval():
    first = judge(_pairs([100, 100, 100], [150, 160, 155]), maximize=True, tolerance=0.05)
    second = judge(_pairs([155, 150, 160, 152], [186, 183, 190, 185]), maximize=True, tolerance=0.05)
    assert first.outcome == second.outcome == "win"
    ratio, low, high, pairs = chain([first, second])
    assert ratio == pytest.approx(first.ratio * second.ratio) and pairs == 7
    width = math.log(high / low)
    assert low < ratio < high and width > math.log(first.high / first.low) and width > math.log(second.high / second.low)
    assert chain([]) == (1.0, 1.0, 1.0, 0) and chain([first]) == (first.ratio, first.low, first.high, 3)


def test_fit_samples_puts_the_minimum_pairs_in_the_budget():
    # 2 s start-up each, 100 and 200 samples/s: 3 pairs in 60 s leave 20 - 4 = 16 s a pair: 16 / (1/100 + 1/200)
    assert fit_samples(60.0, 3, [(2.0, 100.0), (2.0, 200.0)], floor=64, ceiling=4096) == 1066
    assert fit_samples(6.0, 3, [(2.0, 100.0), (2.0, 200.0)], floor=64, ceiling=4096) == 64
    assert fit_samples(1e6, 3, [(2.0, 100.0), (2.0, 200.0)], floor=64, ceiling=4096) == 4096


def test_the_budget_counts_the_runs_own_seconds_outside_the_queue():
    from study.helpers import make_study  # tests/study/helpers.py

    from autotune.study.racing import confirm_budget, outside_seconds

    study = make_study()
    study.set_user_attr(
        "runs",
        [
            {"stage": "search", "wall_seconds": 300.0, "run_id": "earlier"},
            {"stage": "search", "wall_seconds": 60.0, "run_id": "this"},
            {"stage": "confirm", "wall_seconds": 30.0, "run_id": "this"},
        ],
    )
    assert confirm_budget(study, 0.2) == (360.0, 30.0, pytest.approx(90.0))
    # this run started 100 s ago and drained the queue for 90 s of them: 10 s of start-up, inspection and probes
    outside = outside_seconds(study, "this", time.monotonic() - 100.0)
    assert outside == pytest.approx(10.0, abs=1.0)
    assert confirm_budget(study, 0.2, outside)[2] == pytest.approx(0.25 * (360.0 + outside))
    assert outside_seconds(study, "this", None) == 0.0
    assert outside_seconds(study, "other", time.monotonic() - 5.0) == pytest.approx(5.0, abs=1.0)  # no drain yet


def test_confirmation_runs_are_planned_for_five_pairs_in_the_budget():
    from study.helpers import add, make_settings, make_study  # tests/study/helpers.py

    from autotune.paired import PLANNED_PAIRS
    from autotune.study.racing import confirm_samples

    settings = make_settings(samples=800)
    study = make_study(samples=800)
    base = add(study, 100.0, baseline=True)
    first = add(study, 100.0, batch_size=64)  # both trials stored at once: no start-up seconds
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 400.0}])  # 0.25 x 400 s = 100 s for confirmation
    samples, source = confirm_samples(study, settings, None, first, base, 0.2)
    # 100 s / 5 pairs = 20 s a pair of two runs at 100 samples/s: 1,000 samples (3 pairs would be 1,666)
    assert PLANNED_PAIRS == 5 and samples == 1000
    assert source == f"what fits 5 pairs of trial {first.number}'s config vs the baseline in 100 s"
    # clamped to --samples: a tight budget still trains every run as long as the search trial that judged its loss
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 40.0}])
    assert confirm_samples(study, settings, None, first, base, 0.2)[0] == 800
    # and to twice --samples
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 4000.0}])
    assert confirm_samples(study, settings, None, first, base, 0.2)[0] == 1600
    assert confirm_samples(study, settings, 777, first, base, 0.2) == (777, "--confirm-samples")


def test_a_same_math_candidate_whose_full_length_pairs_do_not_fit_races_on_shorter_runs():
    from study.helpers import add, make_settings, make_study  # tests/study/helpers.py

    from autotune.study.racing import confirm_samples, same_math_first, short_samples

    settings = make_settings(samples=4096)
    study = make_study(samples=4096)
    base = add(study, 100.0, baseline=True)  # batch 16
    same = add(study, 200.0, num_workers=2)  # the baseline's math: a rate to compare
    other = add(study, 200.0, batch_size=64)  # another effective batch: its loss is judged at 4,096 samples
    assert short_samples(settings, same, base) == 512  # the shortest stage-1 run: 32 optimizer steps of batch 16
    assert short_samples(settings, other, base) == 4096
    # 200 s of search allow 50 s: one full-length pair (4,096 / 100 + 4,096 / 200 = 61 s) does not fit
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}])
    samples, source = confirm_samples(study, settings, None, same, base, 0.2)
    assert samples == 666 and source == (  # 5 pairs of 666 samples: 50 s; not "--samples", which is longer
        f"what fits 5 pairs of trial {same.number}'s config vs the baseline in 50 s, between 512 and --samples 4096: "
        "it keeps the baseline's math, so its pairs measure samples/s, and the loss only as a sanity check")
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 100.0}])  # 25 s: 5 pairs would need 256 samples
    samples, source = confirm_samples(study, settings, None, same, base, 0.2)
    assert samples == 512 and source.startswith(f"the shortest run a race of trial {same.number}'s config may train: about 3 pair(s) of 7.7 s fit in 25 s")
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}])
    assert confirm_samples(study, settings, None, other, base, 0.2)[0] == 4096
    # the best candidate of other math first: when its 2 full-length pairs do not fit, the same-math one races first
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 200.0}])
    assert same_math_first(study, settings, [other, same], base, 0.2) == [same, other]
    assert same_math_first(study, settings, [other], base, 0.2) == [other]  # none keeps the math: as it was
    # room for 2 full-length pairs (123 s of 125 s), not for the 5 planned: the same-math race takes 5 shorter pairs
    # (2 long ones would leave it undecided when one runs late); the other math's, --samples; the search's order
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 500.0}])
    assert confirm_samples(study, settings, None, same, base, 0.2)[0] == 1666  # 5 x (1,666 / 100 + 1,666 / 200) = 125 s
    samples, source = confirm_samples(study, settings, None, other, base, 0.2)
    assert samples == 4096 and source == (
        f"--samples, the shortest run a race judging the loss trains: about 2 pair(s) of trial {other.number}'s config vs the "
        "baseline, 61.4 s each, fit in 125 s")
    assert same_math_first(study, settings, [other, same], base, 0.2) == [other, same]
    study.set_user_attr("runs", [{"stage": "search", "wall_seconds": 1300.0}])  # 325 s: 5 pairs fit, of 4,333 samples
    assert confirm_samples(study, settings, None, same, base, 0.2)[0] == 4333


def test_a_candidate_of_other_math_races_on_its_seconds_to_the_baseline_loss():
    from autotune.study.races import TIMED, judge_race

    def race(sps, reach, quality=True):
        pairs = [Pair(i, c, 0.23, 0.16, (-1, -1), ri, rc) for (i, c), (ri, rc) in zip(sps, reach)]
        return judge_race(pairs, True, 0.05, "min", failed=0, max_pairs=6, quality=quality)

    # the quiet zoo's bn_cnn: batch 128 in bf16 at 4.5x the lr, 1.10x and 1.18x the samples/s (undecided at two
    # pairs) but 1.29x and 1.38x sooner at the baseline's training loss: what a user's training gains
    sps = [(4295, 4724), (3972, 4703)]
    reach = [(1.67, 1.29), (1.80, 1.30)]
    assert race(sps, reach, quality=False).outcome == "running"  # on samples/s, as a config of the same math is
    got = race(sps, reach)
    assert got.outcome == "win" and got.ratio == pytest.approx(math.sqrt(1.67 / 1.29 * 1.80 / 1.30)) and TIMED in got.reason
    assert got.timed and not race(sps, reach, quality=False).timed
    assert race(sps[:1], reach[:1]).timed and race(sps[:1], reach[:1]).reason == ""  # running: timed, no reason yet
    # the quiet zoo's charlm: 1.13x the samples/s in 3 of 3 pairs, but 27-30 s to the baseline's loss against 10-11 s
    got = race([(100, 113), (100, 112), (100, 114)], [(10.5, 28.0), (11.0, 30.0), (10.2, 27.0)])
    assert got.outcome == "slower" and got.ratio < 0.5 and TIMED in got.reason
    # a run with no time to the target (no loss curve, or never reached): samples/s, with the veto of the median pair
    never = race([(100, 150), (100, 152), (100, 149)], [(10.0, math.inf), (10.0, math.inf), (10.0, math.inf)])
    assert never.outcome == "loss" and TIMED not in never.reason and "slower to the baseline's training loss" in never.reason
    assert not never.timed
    unknown = race([(100, 150), (100, 152), (100, 149)], [(math.nan, math.nan)] * 3)
    assert unknown.outcome == "win" and unknown.ratio == pytest.approx(1.503, rel=0.01)


def test_replicate_runs_decide_two_consistent_pairs_the_pairs_alone_cannot():
    from autotune.paired import replicate_ss

    # the quiet zoo's digits on a 2-core CPU without bf16 (seconds to the baseline's loss): batch 256 at 9x the lr,
    # 1.34x and 1.80x sooner in its two pairs; the pairs alone give [0.61x, 3.98x]-wide intervals and stop undecided
    pairs = [Pair(1.61, 1.20), Pair(1.79, 0.992)]
    alone = judge(pairs, maximize=False, tolerance=0.05)
    assert alone.outcome == "running" and alone.df == -1
    # each config's three runs (its search trial, one run a pair) vary by 8% at most: their variance bounds the pairs'
    replicates = replicate_ss([[1.55, 1.61, 1.79], [1.10, 1.20, 0.992]])
    assert replicates is not None and replicates[1] == 4
    got = judge(pairs, maximize=False, tolerance=0.05, replicates=replicates)
    assert got.outcome == "win" and got.df == 4 and 1.05 < got.low < got.ratio == alone.ratio < got.high < alone.high
    assert got.log_se == pytest.approx((math.log(got.high) - math.log(got.low)) / (2 * 2.132))  # t at 4 degrees
    # replicates that vary more than the pairs (drift between the search and the pairs): the pairs' interval stands
    wide = judge([Pair(100, 150), Pair(100, 152)], maximize=True, tolerance=0.05, replicates=replicate_ss([[100, 100, 300], [150, 152, 40]]))
    assert wide.df == -1 and wide.outcome == "win"
    # one pair is still not enough, and a pair lost still counts against the sign test
    assert judge(pairs[:1], maximize=False, tolerance=0.05, replicates=replicates).outcome == "running"
    assert judge([Pair(1.6, 1.2), Pair(1.7, 1.9)], maximize=False, tolerance=0.05, replicates=replicates).outcome == "running"


def test_replicate_ss_pools_each_groups_log_deviations_and_skips_what_is_not_a_figure():
    from autotune.paired import replicate_ss

    assert replicate_ss([[100.0], [200.0]]) is None  # no group ran twice
    ss, df = replicate_ss([[100.0, 100.0 * math.e], [5.0, math.nan, math.inf, 0.0, 5.0]])
    assert df == 2 and ss == pytest.approx(0.5)  # logs 0 and 1 about 0.5; the 5s agree; NaN, inf and 0 skipped


def _false_wins_with_replicates(sigma: float, drift: float, races: int = 2000, true_ratio: float = 1.0, one: list | None = None) -> tuple[float, float]:
    """As :func:`_false_wins`, but each run's log figure is the moment's drift (standard deviation ``drift``,
    shared by a pair's two runs) plus its own jitter (``sigma``), and each config also ran once in the search,
    at a moment of its own: the replicate runs' interval (``replicate_ss``) judges beside the pairs'.
    Returns the share of races won, and of races won at two pairs; ``one`` gets the share won at one pair."""
    import random

    from autotune.paired import replicate_ss

    rng = random.Random(11)
    effect = math.log(true_ratio)
    wins = early = first = 0
    for _ in range(races):
        searched = (100.0 * math.exp(rng.gauss(0, drift) + rng.gauss(0, sigma)), 100.0 * math.exp(rng.gauss(0, drift) + effect + rng.gauss(0, sigma)))
        pairs = []
        for _ in range(6):
            moment = rng.gauss(0, drift)
            pairs.append(Pair(100.0 * math.exp(moment + rng.gauss(0, sigma)), 100.0 * math.exp(moment + effect + rng.gauss(0, sigma))))
            replicates = replicate_ss([[searched[0], *(p.incumbent for p in pairs)], [searched[1], *(p.candidate for p in pairs)]])
            got = judge(pairs, maximize=True, tolerance=0.05, replicates=replicates)
            if got.decided:
                wins += got.outcome == "win"
                early += got.outcome == "win" and got.pairs == 2
                first += got.outcome == "win" and got.pairs == 1
                break
    if one is not None:
        one.append(first / races)
    return wins / races, early / races


def test_the_replicate_runs_interval_adds_few_false_wins():
    for sigma in (0.05, 0.15, 0.3):
        for drift in (0.0, 0.3):
            one: list[float] = []  # wins at one pair (the replicate runs' 99.5% bound): 0.2% at most
            wins, early = _false_wins_with_replicates(sigma, drift, one=one)  # 9.3% and 5.0% at 0.15 without drift (7.5%, 4.0% by the pairs alone)
            assert wins <= 0.135 and early <= 0.07, (sigma, drift, wins, early)
            slower, _ = _false_wins_with_replicates(sigma, drift, true_ratio=0.9, one=one)
            assert slower <= (0.025 if sigma <= 0.15 else 0.065), (sigma, drift, slower)
            assert max(one) <= 0.005, (sigma, drift, one)
    # what one pair buys: a true 19x, at a jitter of 0.15, is won at its first pair in most races (85%)
    one = []
    _false_wins_with_replicates(0.15, 0.0, true_ratio=19.0, one=one)
    assert one[0] >= 0.75, one
    # what it buys: a true 1.3x speed-up is decided at two pairs twice as often (40% against 19% by the pairs alone)
    _, early = _false_wins_with_replicates(0.15, 0.0, true_ratio=1.3)
    assert early >= 0.35, early


def test_one_pair_wins_only_a_large_speed_up_its_replicate_runs_agree_on():
    from autotune.paired import chain, replicate_ss

    # demo BoringModel beside a CPU hog: 19x in its one pair, each config's search trial near its paired run
    pair = [Pair(100.0, 1900.0)]
    agree = replicate_ss([[100.0, 112.0], [1900.0, 1750.0]])
    got = judge(pair, maximize=True, tolerance=0.05, replicates=agree)
    assert got.outcome == "win" and got.pairs == 1 and got.df == 2 and "one pair" in got.reason
    assert got.low < 19.0 < got.high and got.low > 1.05
    ratio, low, high, pairs = chain([got])
    assert (ratio, low, high, pairs) == (pytest.approx(19.0), got.low, got.high, 1) and math.isfinite(got.log_se) and got.log_se > 0
    # the pairs alone (no search trials), or search trials far from the paired runs: no decision yet
    assert judge(pair, maximize=True, tolerance=0.05).outcome == "running"
    assert judge(pair, maximize=True, tolerance=0.05, replicates=replicate_ss([[100.0, 112.0], [1900.0]])).outcome == "running"
    spread = replicate_ss([[100.0, 400.0], [1900.0, 300.0]])
    assert judge(pair, maximize=True, tolerance=0.05, replicates=spread).outcome == "running"
    # a 1.3x at this machine's run-to-run jitter (10%) is not decided at one pair (at 1% it is); nor a loss: only a win is
    assert judge([Pair(100.0, 130.0)], maximize=True, tolerance=0.05, replicates=replicate_ss([[100.0, 110.0], [130.0, 118.0]])).outcome == "running"
    assert judge([Pair(100.0, 130.0)], maximize=True, tolerance=0.05, replicates=replicate_ss([[100.0, 101.0], [130.0, 131.0]])).outcome == "win"
    broke = [Pair(100.0, 1900.0, incumbent_loss=1.0, candidate_loss=1.5)]
    assert judge(broke, maximize=True, tolerance=0.05, replicates=agree).outcome == "running"
