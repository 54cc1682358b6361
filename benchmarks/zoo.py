"""Benchmark: does autotune's recommendation make real training faster, across a zoo of models, on a
quiet machine and with a CPU hog?

The zoo: the two examples (``examples/digits``, ``examples/charlm``) and the model files under
``benchmarks/zoo/``: Lightning's own demo classes (``BoringModel``, the demo ``Transformer``) fed
local data, a CNN with BatchNorm and OneCycleLR, an input-bound model (costly per-sample
augmentation in ``Dataset.__getitem__``), an embedding-heavy recommender, a small vision
transformer, a manually optimized autoencoder and a tabular MLP. None needs a download.

For each model, on this machine:

1. **Search**: ``autotune search MODEL`` at its default settings (budget, confirmation, objective;
   ``--trials N`` shrinks it), through the CLI only (``--storage``, ``--study-name``, ``--out``),
   so the benchmark keeps working while the search code changes (this checkout's ``autotune``
   comes first on ``PYTHONPATH``, not an installed one). Recorded: the search's wall
   time; the tuner's speed-up, read from the export header's ``measured:`` line (else from
   ``autotune show --format json``: the recommended trial's samples/s over the baseline's); the
   confirmation share, the wall seconds of the confirmation runs (trials with the user attribute
   ``confirm_of``, from their Optuna ``datetime_start``/``datetime_complete``) over the search's
   wall time; the host's load average (``os.getloadavg``) before and after.
2. **Standalone check** (``benchmarks/standalone.py``: LightningCLI and a plain timing callback,
   no autotune code in the process, through ``benchmarks/fidelity.py``'s ``standalone``): the
   baseline (the export with the baseline trial's knob values) trains for the confirmation budget
   (twice the search's samples per trial); its moving-average training loss at the end, plus
   ``--loss-tolerance`` of it (default 0.05, the search's own default: the quality the search counts
   as the baseline's, :func:`autotune.objective.loss_target`), is the target. Then baseline and
   recommendation train to that target (at most 4x that budget),
   ``--repeats`` pairs (default 3), back to back, alternating which runs first, so that a
   drifting load hits both alike (a paired design, as irace's F-race compares candidates on the
   same instances). The
   standalone speed-up is the median over pairs of the baseline's seconds to target over the
   recommendation's. When the recommendation is the baseline's config, its speed-up is 1.00x by
   definition (the user's training does not change) and the pairs are an A/A test: their range
   (column ``pairs``; ``measured_speedup`` in the JSON) is the noise floor of the check.
3. **Wrong call**: the recommendation is worse standalone beyond noise: it failed to reach the
   baseline's loss in most runs that the baseline's reached it in (``worse loss``), or its median
   paired speed-up is below ``1 - --margin`` (default 0.10) with most pairs slower (``slower``).

The exit code is 1 when a model's search failed (its row says why), else 0.

``--hog`` runs everything beside a CPU hog: a child process, pinned to the last core with
``os.sched_setaffinity``, runs a busy loop that ends by itself after ``--hog-seconds`` or when
this process goes, and is stopped in a ``finally``.

Usage::

    python benchmarks/zoo.py                          # every model, default search; writes benchmarks/results/zoo.json
    python benchmarks/zoo.py --hog                    # the same beside a CPU hog; writes benchmarks/results/zoo_hog.json
    python benchmarks/zoo.py --quick                  # 2 models, 6 trials each (a smoke run, 10-20 min on 2 cores)
    python benchmarks/zoo.py --models bn_cnn,recsys --trials 8
    python benchmarks/zoo.py --search-args "--devices 1 --space gpu.yaml"   # passed on to every autotune search
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from fidelity import standalone

ROOT = Path(__file__).resolve().parent.parent
_ZOO = Path(__file__).resolve().parent / "zoo"
#: model name -> model file; the order of a full run
ZOO = {
    "digits": ROOT / "examples" / "digits" / "model.py",
    "charlm": ROOT / "examples" / "charlm" / "model.py",
    "demo_boring": _ZOO / "demo_boring.py",
    "demo_transformer": _ZOO / "demo_transformer.py",
    "bn_cnn": _ZOO / "bn_cnn.py",
    "augmented_digits": _ZOO / "augmented_digits.py",
    "recsys": _ZOO / "recsys.py",
    "vit_digits": _ZOO / "vit_digits.py",
    "manual_autoencoder": _ZOO / "manual_autoencoder.py",
    "tabular_mlp": _ZOO / "tabular_mlp.py",
}
QUICK_MODELS = ("digits", "tabular_mlp")
QUICK_TRIALS = 6
#: autotune's default --samples: the confirmation budget is twice this when a study records none
DEFAULT_SAMPLES = 8192
#: autotune's default ``--loss-tolerance``: the standalone target's margin over the baseline's loss.
DEFAULT_TOLERANCE = 0.05
#: the knobs of a trial's ``config`` that a LightningCLI YAML sets
_TRAINER_KEYS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "accumulate_grad_batches")


# --- the CPU hog ---------------------------------------------------------------------------------


def _hog_loop(core: int, seconds: float, parent: int) -> None:
    os.sched_setaffinity(0, {core})
    deadline = time.monotonic() + seconds
    x = 1
    while time.monotonic() < deadline and os.getppid() == parent:
        for _ in range(100_000):
            x = (x * 48271) % 2147483647


@contextlib.contextmanager
def cpu_hog(enabled: bool, seconds: float) -> Iterator[int | None]:
    """A busy loop on the last core this process may use, for the ``with`` block.

    Args:
        enabled: False yields None and starts nothing.
        seconds: Upper bound on the hog's life, seconds (> 0): it also ends when this process goes.

    Yields:
        The core the hog is pinned to, or None.
    """
    if not enabled:
        yield None
        return
    core = max(os.sched_getaffinity(0))
    proc = multiprocessing.get_context("fork").Process(target=_hog_loop, args=(core, seconds, os.getpid()), daemon=True)
    proc.start()
    try:
        yield core
    finally:
        proc.terminate()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()


# --- the search, through autotune's CLI only -----------------------------------------------------


def _autotune(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m autotune ARGS`` with this checkout's ``autotune`` first on the path (not an installed one)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, env=env, capture_output=True, text=True)


def search(folder: Path, name: str, model: Path, trials: int | None, extra: list[str]) -> dict:
    """One ``autotune search`` at default settings; returns its wall time, export and trials.

    Raises:
        RuntimeError: the search or ``autotune show`` exited non-zero (the message has their output's tail).
    """
    storage = f"sqlite:///{folder / name}.db"
    out = folder / f"{name}.yaml"
    cmd = ["search", str(model), "--storage", storage, "--study-name", name, "--out", str(out), "--quiet", *extra]
    if trials is not None:
        cmd += ["--trials", str(trials)]
    start = time.monotonic()
    proc = _autotune(cmd, folder)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"autotune search exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    shown = _autotune(["show", name, "--storage", storage, "--format", "json"], folder)
    if shown.returncode != 0:
        raise RuntimeError(f"autotune show exited {shown.returncode}: {shown.stderr[-1500:]}")
    return {"storage": storage, "yaml": out, "seconds": seconds, "rows": json.loads(shown.stdout), "summary": proc.stdout[-3000:]}


def tuner_speedup(header: str, rows: list[dict]) -> tuple[float | None, str]:
    """The tuner's own speed-up of its recommendation over the baseline, and where it was read.

    Args:
        header: The export's comment lines.
        rows: ``autotune show --format json`` of the study.

    Returns:
        ``(speed-up, source)``: from the header's ``measured:`` line (``... speedup 1.23x``), else the
        recommended trial's samples/s over the baseline trial's; ``(None, "none")`` without either.
    """
    lines = [line for line in header.splitlines() if line.startswith("#")]
    for line in lines:  # paired: "measured: the config of trial 7 is 1.62x faster [...]" or "measured: 1.00x: ..."
        match = re.match(r"# measured: (?:the config of trial \d+ is )?([0-9]+(?:\.[0-9]+)?)x", line)
        if match:
            return float(match.group(1)), "export header"
    for line in sorted(lines, key=lambda line: not line.startswith("# measured")):
        match = re.search(r"speed-?up\D{0,12}?([0-9]+(?:\.[0-9]+)?)x", line, re.IGNORECASE)
        if match:
            return float(match.group(1)), "export header"
    recommended = next((r for r in rows if "recommended" in (r.get("note") or "")), None)
    baseline = _baseline_row(rows)
    if recommended and baseline and baseline.get("samples_per_sec"):
        return recommended["samples_per_sec"] / baseline["samples_per_sec"], "show: recommended over baseline trial"
    return None, "none"


def _baseline_row(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r.get("user_attrs", {}).get("baseline")), None)


def confirmation_share(storage: str, name: str, search_seconds: float) -> dict:
    """Wall seconds of the study's confirmation runs (user attribute ``confirm_of``) and their share of the search's.

    Read with Optuna itself (``datetime_start``/``datetime_complete`` of each finished trial).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=name, storage=storage)
    spans = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in study.trials
        if "confirm_of" in t.user_attrs and t.datetime_start and t.datetime_complete
    ]
    return {"runs": len(spans), "seconds": sum(spans), "share": sum(spans) / search_seconds if search_seconds > 0 else None}


def baseline_yaml(export: dict, baseline_config: dict) -> dict:
    """The export with the baseline trial's knob values: the same YAML paths, nothing the tuner added.

    Args:
        export: The exported LightningCLI config (``trainer:``, ``model:``, ``data:``).
        baseline_config: The baseline trial's user attribute ``config`` (knob name -> value).

    Returns:
        A new config: in ``trainer:`` only the baseline's ``_TRAINER_KEYS``; in the other sections every
        key the baseline config names set to its value, every other leaf dropped (the zoo's searches
        take no ``--config``, so the model's own defaults apply).
    """

    def reset(node):
        if not isinstance(node, dict):
            return node
        kept = {}
        for key, value in node.items():
            if key in ("class_path", "init_args") or isinstance(value, dict):
                kept[key] = reset(value)
            elif key in baseline_config:
                kept[key] = baseline_config[key]
        return kept

    config = {k: reset(v) for k, v in export.items() if k != "trainer"}
    config["trainer"] = {k: baseline_config[k] for k in _TRAINER_KEYS if k in baseline_config}
    return config


# --- the standalone check ------------------------------------------------------------------------


def _standalone(folder: Path, model: Path, config: Path, samples: int, target: float | None = None, window: float | None = None) -> dict:
    try:
        return standalone(folder, model, str(config), samples, target, window)
    except SystemExit as e:  # fidelity's runner exits with the failed command's output
        return {"error": str(e)[-1500:]}


def paired_check(
    folder: Path,
    model: Path,
    base: Path,
    rec: Path,
    samples: int,
    repeats: int,
    margin: float,
    same: bool,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict:
    """Seconds to the baseline's loss, baseline vs recommendation, in ``repeats`` alternating pairs.

    Args:
        folder: Working folder of the runs.
        model: The model file.
        base: The baseline's YAML.
        rec: The recommendation's YAML.
        samples: The baseline's reference budget, training samples; runs stop at 4x this.
        repeats: Pairs (>= 1).
        margin: Smallest slow-down counted as a wrong call, a fraction (0 <= margin < 1).
        same: The recommendation is the baseline's config (an A/A test: never a wrong call).
        tolerance: The target is the reference run's final moving-average loss plus this fraction of it.

    Returns:
        The target, every run, the per-pair speed-ups, their median (1.0 for an A/A test, whose
        measured median is ``measured_speedup``) and the verdict.
    """
    window = samples / 10
    reference = _standalone(folder, model, base, samples)
    tail = reference.get("loss_curve_tail")
    result: dict = {"samples": samples, "reference": reference, "target_loss": None, "tolerance": tolerance, "pairs": []}
    if tail is None or tail != tail:  # an error, or no loss (NaN)
        result.update(speedup=None, wrong_call=None, verdict="no target: the baseline's reference run failed")
        return result
    target = result["target_loss"] = tail + tolerance * abs(tail)
    for i in range(repeats):
        order = ("baseline", "recommended") if i % 2 == 0 else ("recommended", "baseline")
        runs = {which: _standalone(folder, model, base if which == "baseline" else rec, 4 * samples, target, window) for which in order}
        b, r = runs["baseline"].get("seconds_to_target"), runs["recommended"].get("seconds_to_target")
        result["pairs"].append({"first": order[0], **runs, "speedup": b / r if b and r else None})
    ratios = [p["speedup"] for p in result["pairs"] if p["speedup"] is not None]
    base_reached = [p for p in result["pairs"] if p["baseline"].get("seconds_to_target")]
    rec_missed = [p for p in base_reached if not p["recommended"].get("seconds_to_target")]
    slower = [x for x in ratios if x < 1.0]
    result["speedup"] = statistics.median(ratios) if ratios else None
    result["speedup_range"] = [min(ratios), max(ratios)] if ratios else None
    if same:  # the user's training is unchanged: 1.00x by definition, and the pairs measured the noise
        result.update(measured_speedup=result["speedup"], speedup=1.0, wrong_call=False, verdict="A/A: recommended the baseline's config")
    elif base_reached and 2 * len(rec_missed) > len(base_reached):
        result.update(wrong_call=True, verdict=f"worse loss: missed the target in {len(rec_missed)} of {len(base_reached)} runs")
    elif result["speedup"] is not None and result["speedup"] < 1 - margin and 2 * len(slower) > len(ratios):
        result.update(wrong_call=True, verdict=f"slower: {len(slower)} of {len(ratios)} pairs")
    elif not ratios:
        result.update(wrong_call=None, verdict="no pair reached the target")
    else:
        result.update(wrong_call=False, verdict="ok")
    return result


# --- one model, the table, the run ---------------------------------------------------------------


def bench_model(
    folder: Path, name: str, trials: int | None, extra: list[str], repeats: int, margin: float, tolerance: float = DEFAULT_TOLERANCE
) -> dict:
    """Search one zoo model and check its recommendation standalone; a failure is recorded, not raised."""
    model = ZOO[name]
    entry: dict = {"model": name, "file": str(model.relative_to(ROOT)), "load_before": os.getloadavg()}
    try:
        found = search(folder, name, model, trials, extra)
    except RuntimeError as e:
        entry.update(error=str(e), load_after=os.getloadavg())
        return entry
    rows = found["rows"]
    header = "\n".join(line for line in found["yaml"].read_text().splitlines() if line.startswith("#"))
    speedup, source = tuner_speedup(header, rows)
    baseline = _baseline_row(rows)
    recommended = next((r for r in rows if "recommended" in (r.get("note") or "")), baseline)
    base_config = baseline["user_attrs"]["config"] if baseline else {}
    rec_config = recommended["user_attrs"]["config"] if recommended else {}
    changed = {k: [base_config.get(k), v] for k, v in rec_config.items() if base_config.get(k) != v}
    entry.update(
        search_seconds=found["seconds"],
        trials=len(rows),
        tuner_speedup=speedup,
        tuner_speedup_source=source,
        confirmation=confirmation_share(found["storage"], name, found["seconds"]),
        baseline_config=base_config,
        recommended_trial=recommended["number"] if recommended else None,
        recommended_config=rec_config,
        changed=changed,
        export_header=header,
    )
    base_path = folder / f"{name}.baseline.yaml"
    base_path.write_text(yaml.safe_dump(baseline_yaml(yaml.safe_load(found["yaml"].read_text()), base_config), sort_keys=False))
    budget = max((r["user_attrs"].get("confirm_samples") or 0 for r in rows), default=0) or 2 * DEFAULT_SAMPLES
    start = time.monotonic()
    entry["standalone"] = paired_check(
        folder, model, base_path, found["yaml"], budget, repeats, margin, same=not changed, tolerance=tolerance
    )
    entry["standalone_seconds"] = time.monotonic() - start
    entry["load_after"] = os.getloadavg()
    return entry


def _fmt(value, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def print_table(results: list[dict]) -> None:
    """The zoo table: one row per model, then the medians and counts of the run."""
    header = (
        f"{'model':18} {'tuner':>6} {'standalone':>10} {'pairs':>11} {'wrong call':44} {'changed':34} {'search s':>8} "
        f"{'confirm':>7} {'load before->after':>18}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        load = f"{r['load_before'][0]:.1f}->{r['load_after'][0]:.1f}"
        if "error" in r:
            print(f"{r['model']:18} error: {r['error'][:150]!r} {load:>18}")
            continue
        s = r["standalone"]
        pairs = "-" if not s.get("speedup_range") else f"{s['speedup_range'][0]:.2f}-{s['speedup_range'][1]:.2f}"
        wrong = {True: "WRONG: ", False: "no: ", None: "? "}[s["wrong_call"]] + s["verdict"]
        changed = ", ".join(f"{k}={v[1]}" for k, v in r["changed"].items()) or "(baseline)"
        share = r["confirmation"]["share"]
        print(
            f"{r['model']:18} {_fmt(r['tuner_speedup'], '.2f'):>5}x {_fmt(s['speedup'], '.2f'):>9}x {pairs:>11} {wrong[:44]:44} "
            f"{changed[:34]:34} {r['search_seconds']:>8.0f} {_fmt(share, '.0%'):>7} {load:>18}"
        )
    done = [r for r in results if "error" not in r]
    speedups = [r["standalone"]["speedup"] for r in done if r["standalone"]["speedup"] is not None]
    shares = [r["confirmation"]["share"] for r in done if r["confirmation"]["share"] is not None]
    print(
        f"median standalone speed-up {_fmt(statistics.median(speedups) if speedups else None, '.2f')}x over {len(speedups)} model(s); "
        f"wrong calls {sum(bool(r['standalone']['wrong_call']) for r in done)} of {len(done)}; "
        f"confirmation share max {_fmt(max(shares) if shares else None, '.0%')}; failed {len(results) - len(done)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO), help=f"comma-separated, of: {', '.join(ZOO)}")
    parser.add_argument("--trials", type=int, default=None, help="trials per search (default: autotune's own default)")
    parser.add_argument("--quick", action="store_true", help=f"models {', '.join(QUICK_MODELS)}, {QUICK_TRIALS} trials each")
    parser.add_argument("--repeats", type=int, default=3, help="standalone pairs per model (default 3)")
    parser.add_argument("--margin", type=float, default=0.10, help="slow-down counted as a wrong call, a fraction (default 0.10)")
    parser.add_argument(
        "--loss-tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="the standalone target is the baseline's final loss plus this fraction (default 0.05, the search's)",
    )
    parser.add_argument("--hog", action="store_true", help="run beside a CPU hog pinned to one core")
    parser.add_argument("--hog-seconds", type=float, default=6 * 3600, help="the hog's longest life, seconds (default 6 h)")
    parser.add_argument("--search-args", default="", help='more options for every autotune search, one string ("--devices 1")')
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/zoo.json, zoo_hog.json with --hog)")
    args = parser.parse_args()

    models = list(QUICK_MODELS) if args.quick else [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in ZOO]
    bad = [
        f"unknown model(s) {unknown!r} in --models; choose from: {', '.join(ZOO)}" if unknown else "",
        f"--repeats {args.repeats!r} is below 1; give 1 or more pairs" if args.repeats < 1 else "",
        f"--margin {args.margin!r} is outside [0, 1); give a fraction such as 0.1" if not 0 <= args.margin < 1 else "",
        f"--loss-tolerance {args.loss_tolerance!r} is outside [0, 1); give a fraction such as 0.05"
        if not 0 <= args.loss_tolerance < 1
        else "",
        f"--trials {args.trials!r} is below 1; give 1 or more, or leave it out for autotune's default"
        if args.trials is not None and args.trials < 1
        else "",
        f"--hog-seconds {args.hog_seconds!r} is not positive; give the hog's longest life in seconds" if args.hog_seconds <= 0 else "",
    ]
    if any(bad):
        sys.exit(f"zoo.py: error: {next(b for b in bad if b)}")  # one line, exit code 1
    trials = QUICK_TRIALS if args.quick and args.trials is None else args.trials
    extra = shlex.split(args.search_args)
    out = args.out or ROOT / "benchmarks" / "results" / ("zoo_hog.json" if args.hog else "zoo.json")

    results = []
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()
    start = time.monotonic()
    with cpu_hog(args.hog, args.hog_seconds) as core, tempfile.TemporaryDirectory(prefix="autotune-zoo-") as tmp:
        if core is not None:
            print(f"CPU hog pinned to core {core} for the whole run", flush=True)
        for name in models:
            print(f"[{name}] autotune search{'' if trials is None else f' --trials {trials}'} ...", flush=True)
            entry = bench_model(Path(tmp), name, trials, extra, args.repeats, args.margin, args.loss_tolerance)
            if "error" in entry:
                print(f"[{name}] failed: {entry['error'][:300]}", flush=True)
            else:
                s = entry["standalone"]
                print(
                    f"[{name}] search {entry['search_seconds']:.0f} s, tuner {_fmt(entry['tuner_speedup'], '.2f')}x, "
                    f"standalone {_fmt(s['speedup'], '.2f')}x ({s['verdict']})",
                    flush=True,
                )
            results.append(entry)
    print_table(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    run = {
        "started": started,
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "hog": args.hog,
        "trials": trials,
        "search_args": extra,
        "repeats": args.repeats,
        "margin": args.margin,
        "loss_tolerance": args.loss_tolerance,
        "wall_seconds": time.monotonic() - start,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "results": results,
    }
    out.write_text(json.dumps(run, indent=2, default=str))
    print(f"written to {out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
