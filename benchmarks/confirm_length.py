"""Benchmark: how long should a paired confirmation run be, at equal confirmation time?

A race (``autotune.paired``) judges a candidate on the log-ratios of its paired runs against the
incumbent, and wins only when the lower end of the 90% Student-t interval of their mean clears
``log(1.05)``. With a fixed confirmation budget, shorter runs buy more pairs (a narrower interval:
``t(n - 1) / sqrt(n)`` falls from 1.69 at 3 pairs to 0.95 at 5) but each pair jitters more (start-up,
warm-up and validation weigh more in a short run). This measures which wins on a finished study.

On a copy of the study (``optuna.copy_study`` into a temporary SQLite file: the study is not
changed), the baseline's config and a candidate's (``--candidate``, else the best feasible config
other than the baseline, :func:`autotune.study.records.confirm_candidates`) run in back-to-back
pairs through autotune's own queue and warm process pool, exactly as a race runs them (the order
alternating within each length, the lengths interleaved pair by pair, so that a drifting load hits
every length alike). Per length: the mean paired ratio, the standard deviation of the log-ratios,
the mean wall seconds of a pair, and what the race rule would make of it at the study's
confirmation budget (``--budget``, else ``0.25`` times the study's search seconds, as
:func:`autotune.study.racing.confirm_budget` allows): the pairs that fit, and the expected lower end
of the interval (``exp(mean - t(n - 1) * sd / sqrt(n))``) -- the larger, the likelier a real win is
confirmed.

Usage::

    python benchmarks/confirm_length.py sqlite:///studies/charlm.db charlm                 # lengths: half and 0.8x --samples
    python benchmarks/confirm_length.py sqlite:///s.db charlm --lengths 4096,6647 --pairs 6 --candidate 16

Prints a table and writes ``benchmarks/results/confirm_length.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def expected_lower(mean: float, sd: float, pairs: int) -> float | None:
    """``exp(mean - t95(pairs - 1) * sd / sqrt(pairs))``: the lower end of the race's 90% interval of
    the mean log-ratio after ``pairs`` pairs (None below 2 pairs)."""
    from autotune.paired import _t95  # the race's own quantiles

    if pairs < 2:
        return None
    return math.exp(mean - _t95(pairs - 1) * sd / math.sqrt(pairs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("storage", help="the finished study's storage URL")
    parser.add_argument("study", help="its name")
    parser.add_argument("--candidate", type=int, help="trial whose config races the baseline (default: the best feasible one)")
    parser.add_argument("--lengths", help="training samples per run, comma-separated (default: half and 0.8x the study's --samples)")
    parser.add_argument("--pairs", type=int, default=6, help="pairs per length (default 6)")
    parser.add_argument("--budget", type=float, help="confirmation seconds to judge at (default: 0.25x the study's search seconds)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "confirm_length.json")
    args = parser.parse_args(argv)

    import optuna

    from autotune.jobs import SlotPools
    from autotune.report import ConsoleUI
    from autotune.study.queue import drain_queue
    from autotune.study.racing import confirm_budget
    from autotune.study.records import confirm_candidates
    from autotune.study.settings import BASELINE_ATTR, load_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="autotune-confirm-length-"))
    url = f"sqlite:///{folder / 'copy.db'}"
    optuna.copy_study(from_study_name=args.study, from_storage=args.storage, to_storage=url, to_study_name=args.study)
    study, settings = load_study(args.study, url)
    every = study.get_trials(deepcopy=False)
    base = every[study.user_attrs[BASELINE_ATTR]["trial"]]
    if args.candidate is not None:
        cand = every[args.candidate]
    else:
        found = confirm_candidates(study, settings, 1)
        if not found:
            print(f"error: study {args.study!r} has no feasible config other than the baseline; give --candidate N", file=sys.stderr)
            return 2
        cand = found[0]
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else [settings.samples // 2, int(settings.samples * 0.8)]
    search_s, _, allowed = confirm_budget(study, 0.2)
    budget = args.budget if args.budget is not None else allowed
    ui = ConsoleUI(quiet=True)
    pools = SlotPools(settings.model_file, False, str(folder), ui)
    load_before = os.getloadavg()
    runs: dict[int, list[dict]] = {n: [] for n in lengths}
    try:
        for i in range(args.pairs):
            for n in lengths if i % 2 == 0 else lengths[::-1]:
                order = [base, cand] if i % 2 == 0 else [cand, base]
                first = len(study.get_trials(deepcopy=False))
                for t in order:
                    study.enqueue_trial(dict(t.params), user_attrs={"confirm_of": t.number, "confirm_samples": n})
                drain_queue(study, settings, ui, add=0, jobs=1, storage_url=url, stage="confirm", pools=pools)
                done = study.get_trials(deepcopy=False)[first : first + 2]
                by_role = {("base" if t.user_attrs["confirm_of"] == base.number else "cand"): t for t in done}
                if any(t.state.name != "COMPLETE" for t in done):
                    print(f"pair {i} at {n} samples: a run failed: {[t.user_attrs.get('fail_reason') for t in done]}", file=sys.stderr)
                    continue
                seconds = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in done)
                ratio = by_role["cand"].user_attrs["samples_per_sec"] / by_role["base"].user_attrs["samples_per_sec"]
                busy = max(float(t.user_attrs.get("other_cpu_fraction") or 0.0) for t in done)
                runs[n].append({"pair": i, "ratio": ratio, "seconds": seconds, "other_cpu_fraction": busy})
                print(f"pair {i} at {n:>6} samples: ratio {ratio:.3f}, {seconds:.1f} s, other processes {busy:.0%} of the CPU", flush=True)
    finally:
        pools.close()
    rows = []
    for n, pairs in runs.items():
        logs = [math.log(p["ratio"]) for p in pairs]
        if len(logs) < 2:
            continue
        mean, sd = statistics.fmean(logs), statistics.stdev(logs)
        pair_s = statistics.fmean(p["seconds"] for p in pairs)
        fit = max(0, int(budget // pair_s))
        rows.append(
            {
                "samples": n,
                "pairs": len(logs),
                "ratio": math.exp(mean),
                "sd_log_ratio": sd,
                "pair_seconds": pair_s,
                "pairs_in_budget": fit,
                "expected_lower": expected_lower(mean, sd, fit),
                "runs": pairs,
            }
        )
    # judged at one common mean (the pooled one), so that only jitter and pair count differ between lengths
    pooled = statistics.fmean(math.log(p["ratio"]) for r in rows for p in r["runs"]) if rows else 0.0
    for r in rows:
        r["expected_lower_same_mean"] = expected_lower(pooled, r["sd_log_ratio"], r["pairs_in_budget"])
    load_after = os.getloadavg()
    print(
        f"\nstudy {args.study}: baseline trial {base.number} vs trial {cand.number}'s config; budget {budget:.0f} s "
        f"(search {search_s:.0f} s); load average {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} cores"
    )
    print(f"{'samples':>8} {'pairs':>5} {'ratio':>6} {'sd log':>7} {'s/pair':>7} {'fit':>4} {'lower':>6} {'lower@pooled':>12}")
    for r in rows:

        def fmt(x: float | None) -> str:
            return f"{x:.3f}" if x is not None else "-"

        print(
            f"{r['samples']:>8} {r['pairs']:>5} {r['ratio']:>6.3f} {r['sd_log_ratio']:>7.3f} {r['pair_seconds']:>7.1f} "
            f"{r['pairs_in_budget']:>4} {fmt(r['expected_lower']):>6} {fmt(r['expected_lower_same_mean']):>12}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "study": args.study,
                "baseline": base.number,
                "candidate": cand.number,
                "budget_seconds": budget,
                "load_before": load_before,
                "load_after": load_after,
                "host": platform.node(),
                "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
