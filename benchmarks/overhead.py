"""Benchmark: the tool's own cost per trial, cold processes against warm (forked) ones.

Runs, one after another on this machine, real ``autotune search`` studies of the digits example:

1. 10 trials with ``--cold`` and 10 warm, one device;
2. the same with two-rank DDP trials (``--devices 2``);
3. 3 warm trials whose training takes about 30 s each (a space with only ``lr``).

For each it reports the median launch overhead (trial process start to its first training batch,
the ``startup_seconds`` stored on every trial) and the study's overhead fraction (the share of the
run's wall time outside training steps: process start-up, imports, data set-up, validation,
teardown and the study's own bookkeeping).

Usage::

    python benchmarks/overhead.py            # prints a table, writes benchmarks/results/overhead.json
    python benchmarks/overhead.py --quick    # 4 trials per row and ~10 s trials (a smoke run)

Targets (issue "Fast trials"): warm launch overhead <= 0.2 s per single-device trial (about 15x less
than cold), and under 5% of a study's wall time outside training for trials that train 30 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "digits" / "model.py"


def run_study(folder: Path, name: str, trials: int, samples: int, extra: list[str]) -> dict:
    """Run one study through the CLI and summarise its overhead figures."""
    import optuna

    db = folder / f"{name}.db"
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        str(MODEL),
        "--trials",
        str(trials),
        "--samples",
        str(samples),
        "--storage",
        f"sqlite:///{db}",
        "--study-name",
        name,
        "--out",
        str(folder / f"{name}.yaml"),
        "--quiet",
        *extra,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    command_seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    done = [t for t in study.trials if "startup_seconds" in t.user_attrs]
    run = study.user_attrs["runs"][-1]
    training = sum(t.user_attrs["training_seconds"] for t in done)
    wall = sum(t.user_attrs["wall_seconds"] for t in done)
    return {
        "study": name,
        "trials": len(study.trials),
        "measured_trials": len(done),
        "median_startup_seconds": statistics.median(t.user_attrs["startup_seconds"] for t in done),
        "median_training_seconds": statistics.median(t.user_attrs["training_seconds"] for t in done),
        "median_teardown_seconds": statistics.median(t.user_attrs["teardown_seconds"] for t in done),
        "study_overhead_fraction": run["overhead_fraction"],
        "trial_overhead_fraction": 1 - training / wall,
        "run_wall_seconds": run["wall_seconds"],
        "command_seconds": command_seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter trials")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "overhead.json"))
    args = parser.parse_args()
    trials = 4 if args.quick else 10
    long_samples = 60_000 if args.quick else 180_000  # digits baseline: ~6,000 samples/s here, so ~30 s
    rows = []
    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
        folder = Path(tmp)
        (folder / "lr_only.yaml").write_text("lr:\n  low: 0.5\n  high: 2.0\n  log: true\n  relative: true\n")
        plan = [
            ("1 device, cold", "cold1", trials, 4096, ["--cold"]),
            ("1 device, warm", "warm1", trials, 4096, []),
            ("2-rank DDP, cold", "cold2", trials, 4096, ["--cold", "--devices", "2"]),
            ("2-rank DDP, warm", "warm2", trials, 4096, ["--devices", "2"]),
            ("1 device, warm, ~30 s training", "long", 3, long_samples, ["--space", str(folder / "lr_only.yaml")]),
        ]
        for label, name, n, samples, extra in plan:
            print(f"running: {label} ({n} trials) ...", flush=True)
            rows.append({"case": label, "samples_per_trial": samples, **run_study(folder, name, n, samples, extra)})
    by = {r["study"]: r for r in rows}
    ratios = {
        "single_device_cold_over_warm": by["cold1"]["median_startup_seconds"] / by["warm1"]["median_startup_seconds"],
        "ddp_cold_over_warm": by["cold2"]["median_startup_seconds"] / by["warm2"]["median_startup_seconds"],
    }
    header = f"{'case':34} {'trials':>6} {'launch s (median)':>18} {'train s (median)':>17} {'study overhead':>15} {'trial overhead':>15}"
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['case']:34} {r['trials']:>6} {r['median_startup_seconds']:>18.3f} {r['median_training_seconds']:>17.2f} "
            f"{r['study_overhead_fraction']:>14.1%} {r['trial_overhead_fraction']:>14.1%}"
        )
    print(
        f"\nlaunch overhead, cold / warm: {ratios['single_device_cold_over_warm']:.1f}x (1 device), {ratios['ddp_cold_over_warm']:.1f}x (2-rank DDP)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import platform

    out.write_text(json.dumps({"machine": platform.platform(), "rows": rows, "ratios": ratios}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
