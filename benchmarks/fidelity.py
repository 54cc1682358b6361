"""Benchmark: do the tuner's figures hold outside the tuner, and which objective picks the config that
really trains fastest?

For each example (digits, charlm), on this machine:

1. **Searches**: one ``autotune search`` per objective (``throughput``, ``time-to-quality``,
   ``goodput``), same trials, budget and seed, with confirmation on (the recommendation is a
   median of confirmation runs).
2. **Reproduction**: each recommended config, exported as LightningCLI YAML, is trained 3 times by
   ``benchmarks/standalone.py`` (LightningCLI and a plain timing callback, no autotune code in the
   process) for the confirmation budget; the ratio is the median standalone samples/s over the
   tuner's figure (target: within +-5%).
3. **Repeatability**: the baseline config measured 5 times by the tuner (a study whose space holds
   only the baseline's values): coefficient of variation of samples/s.
4. **Real speedup**: the baseline trains standalone for ``--full`` x the search budget; its smoothed
   training loss at the end is the target. Then the baseline and each recommended config train
   standalone until they reach that target (or 4x that budget), 3 times each: median measured
   seconds to target, and the baseline's over each config's.

Usage::

    python benchmarks/fidelity.py                 # prints a table, writes benchmarks/results/fidelity.json
    python benchmarks/fidelity.py --quick         # fewer trials, digits only (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OBJECTIVES = ("throughput", "time-to-quality", "goodput")
#: example -> (model file, training samples per search trial)
EXAMPLES = {
    "digits": (ROOT / "examples" / "digits" / "model.py", 4096),
    "charlm": (ROOT / "examples" / "charlm" / "model.py", 2048),
}


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc


def search(folder: Path, model: Path, name: str, objective: str, trials: int, samples: int, confirm: int, extra: list[str] = ()) -> dict:
    """One study; returns its recommendation's figures and the paths of the exports."""
    import optuna

    from autotune.study import export_study, load_study, recommendation

    db = folder / f"{name}.db"
    out = folder / f"{name}.yaml"
    start = time.monotonic()
    _run(
        [
            sys.executable,
            "-m",
            "autotune",
            "search",
            str(model),
            "--objective",
            objective,
            "--trials",
            str(trials),
            "--samples",
            str(samples),
            "--confirm",
            str(confirm),
            "--storage",
            f"sqlite:///{db}",
            "--study-name",
            name,
            "--out",
            str(out),
            "--quiet",
            *extra,
        ],
        folder,
    )
    seconds = time.monotonic() - start
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, settings = load_study(name, f"sqlite:///{db}")
    recommended, baseline = recommendation(study, settings)
    base_yaml = folder / f"{name}.baseline.yaml"
    export_study(study, settings, baseline, baseline, base_yaml, f"sqlite:///{db}")
    attrs = recommended.user_attrs
    return {
        "study": name,
        "objective": objective,
        "search_seconds": seconds,
        "trials": len(study.trials),
        "recommended_trial": recommended.number,
        "config": attrs["config"],
        "tuner_samples_per_sec": attrs["samples_per_sec"],
        "baseline_samples_per_sec": baseline.user_attrs["samples_per_sec"],
        "budget": int(attrs.get("confirm_samples") or settings.samples),
        "yaml": str(out),
        "baseline_yaml": str(base_yaml),
    }


def standalone(folder: Path, model: Path, config: str, samples: int, target: float | None = None, window: float | None = None) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "standalone.py"), str(model), config, "--samples", str(samples)]
    if target is not None:
        cmd += ["--target", repr(target), "--window", repr(window)]
    proc = _run(cmd, folder)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def repeatability(folder: Path, model: Path, name: str, samples: int, repeats: int) -> dict:
    """The baseline config measured ``repeats`` times by the tuner."""
    import optuna

    space = folder / f"{name}.space.yaml"
    space.write_text("num_workers: {choices: [0]}\n")  # the baseline's own value: every trial runs the same config
    db = folder / f"{name}.db"
    _run(
        [
            sys.executable,
            "-m",
            "autotune",
            "search",
            str(model),
            "--trials",
            str(repeats),
            "--samples",
            str(samples),
            "--space",
            str(space),
            "--confirm",
            "0",
            "--storage",
            f"sqlite:///{db}",
            "--study-name",
            name,
            "--quiet",
        ],
        folder,
    )
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    values = [t.user_attrs["samples_per_sec"] for t in study.trials if t.state.name == "COMPLETE"]
    return {
        "runs": len(values),
        "samples_per_sec": values,
        "mean": statistics.fmean(values),
        "cv": statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan"),
    }


def bench_example(folder: Path, example: str, trials: int, confirm: int, full: int, quick: bool) -> dict:
    model, samples = EXAMPLES[example]
    print(f"[{example}] searches ({', '.join(OBJECTIVES)}) ...", flush=True)
    searches = {o: search(folder, model, f"{example}-{o}", o, trials, samples, confirm) for o in OBJECTIVES}
    for o, s in searches.items():
        print(
            f"  {o}: trial {s['recommended_trial']} {s['config']} {s['tuner_samples_per_sec']:,.0f} samples/s ({s['search_seconds']:.0f} s)",
            flush=True,
        )

    print(f"[{example}] reproduction (3 standalone runs per recommended config) ...", flush=True)
    for s in searches.values():
        runs = [standalone(folder, model, s["yaml"], s["budget"])["samples_per_sec"] for _ in range(3)]
        s["standalone_samples_per_sec"] = runs
        s["reproduction_ratio"] = statistics.median(runs) / s["tuner_samples_per_sec"]

    print(f"[{example}] repeatability (5 tuner measurements of the baseline) ...", flush=True)
    repeat = repeatability(folder, model, f"{example}-repeat", samples, 5)

    print(f"[{example}] real speedup (standalone training to the baseline's target) ...", flush=True)
    base_yaml = searches["throughput"]["baseline_yaml"]
    full_samples = full * samples
    window = full_samples / 10
    reference = standalone(folder, model, base_yaml, full_samples)
    target = reference["loss_curve_tail"]
    cap = 4 * full_samples

    def to_target(config_yaml: str) -> tuple[float | None, list]:
        runs = [standalone(folder, model, config_yaml, cap, target, window)["seconds_to_target"] for _ in range(3)]
        reached = [r for r in runs if r is not None]
        return (statistics.median(reached) if len(reached) == len(runs) else None), runs

    base_seconds, base_runs = to_target(base_yaml)
    speed = {"target_loss": target, "full_samples": full_samples, "baseline_seconds": base_seconds, "baseline_runs": base_runs}
    for s in searches.values():
        s["seconds_to_target"], s["seconds_to_target_runs"] = to_target(s["yaml"])
        s["real_speedup"] = base_seconds / s["seconds_to_target"] if s["seconds_to_target"] and base_seconds else None
    return {"example": example, "search_samples": samples, "searches": searches, "repeatability": repeat, "time_to_target": speed}


def print_table(results: list[dict]) -> None:
    header = (
        f"{'example':8} {'objective':16} {'config (batch, precision, accum, workers, lr)':48} {'tuner sps':>10} "
        f"{'standalone':>10} {'ratio':>6} {'s to target':>11} {'speedup':>8}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        speed = r["time_to_target"]
        base = speed["baseline_seconds"]
        print(
            f"{r['example']:8} {'baseline':16} {'':48} {'':>10} {'':>10} {'':>6} {base if base is not None else float('nan'):>11.2f} {'1.00x':>8}"
        )
        for o, s in r["searches"].items():
            c = s["config"]
            desc = f"{c['batch_size']}, {c['precision']}, {c['accumulate_grad_batches']}, {c['num_workers']}, {c['lr']:.3g}"
            tt = s["seconds_to_target"]
            sp = f"{s['real_speedup']:.2f}x" if s["real_speedup"] else "never"
            print(
                f"{r['example']:8} {o:16} {desc:48} {s['tuner_samples_per_sec']:>10,.0f} {statistics.median(s['standalone_samples_per_sec']):>10,.0f} "
                f"{s['reproduction_ratio']:>6.3f} {tt if tt is not None else float('nan'):>11.2f} {sp:>8}"
            )
        rep = r["repeatability"]
        print(
            f"{r['example']:8} repeatability: {rep['runs']} tuner runs of the baseline, mean {rep['mean']:,.0f} samples/s, CV {rep['cv']:.1%}; "
            f"target loss {speed['target_loss']:.4g} (baseline after {speed['full_samples']} samples)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 trials, confirmation of 1 config, digits only")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--confirm", type=int, default=2)
    parser.add_argument("--full", type=int, default=8, help="the baseline's full run: this many times the search budget")
    parser.add_argument("--examples", default="digits,charlm")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fidelity.json"))
    args = parser.parse_args()
    trials, confirm, examples = (5, 1, ["digits"]) if args.quick else (args.trials, args.confirm, args.examples.split(","))
    results = []
    with tempfile.TemporaryDirectory(prefix="autotune-fidelity-") as tmp:
        for example in examples:
            results.append(bench_example(Path(tmp), example, trials, confirm, args.full, args.quick))
    print_table(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"machine": platform.platform(), "trials": trials, "confirm": confirm, "results": results}, indent=2, default=str)
    )
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
