"""Benchmark: autotune's own cost as a study grows to 10,000 trials, and 32 workers on one study.

Part 1, per storage (SQLite, and PostgreSQL when one answers on 127.0.0.1:5432): a real study of the
tiny test model (6 trials), grown to 10, 1,000 and 10,000 completed trials with exact in-database
copies of its own trials (``benchmarks/synthetic.py``). On each size it resumes the search for
``--add`` more real trials and reads from the trials' own ``launch_time``/``exit_time``:

- **per trial**: wall time outside the trial process between one trial's end and the next one's
  start (telling Optuna, the study's records, the sampler, claiming the next trial): the median gap;
- **of which the sampler**: Optuna's TPE sampling one config on the same study, timed apart (it
  reads every trial: Optuna's cost, not autotune's); **autotune's own** is the rest;
- **start-up**: command start to the first trial's launch (opening the study, inspection results,
  warm pool); **end**: last trial's end to the command's end (the summary, the export).

then times ``show``, ``export`` and ``report`` (median of 2). The sizes are measured in interleaved
rounds (``--rounds``, each size once per round): the per-trial ratio to the smallest size is taken
within a round (paired), since this shared machine's load moves between minutes.

Part 2: ``--workers N`` (default 32) ``autotune worker`` processes on PostgreSQL (and through
Optuna's gRPC storage proxy when ``autotune storage-proxy`` exists) share a study whose ``search``
queues ``--queued`` very short trials: trials per second, lost (queued, never finished), duplicated
(trial processes run beyond the finished trials), stuck (RUNNING at the end), and the most database
connections held at once (``pg_stat_activity``).

Usage::

    python benchmarks/scale.py                    # both parts; table, and benchmarks/results/scale.json
    python benchmarks/scale.py --part sizes --sizes 10 10000 --rounds 3   # part 1 only, these sizes
    python benchmarks/scale.py --part workers --workers 32

Targets (issue 18): per-trial time at 10,000 trials within 1.5x of that at 10 on both storages;
``show`` and ``export`` under 3 s and ``report`` under 10 s at 10,000; 32 workers: 0 lost, 0
duplicated, 0 stuck.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "models" / "tiny.py"
POSTGRES = "postgresql+psycopg://root@127.0.0.1:5432/test"
sys.path.insert(0, str(ROOT / "benchmarks"))

from synthetic import grow  # noqa: E402


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def autotune(args: list[str], cwd: Path, timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``python -m autotune ARGS``; returns (wall seconds, the process). Raises on a non-zero exit."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"autotune {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc


def _search_args(url: str, name: str, trials: int, folder: Path, samples: int = 256) -> list[str]:
    return [
        "search", str(MODEL), "--trials", str(trials), "--samples", str(samples), "--storage", url, "--study-name", name,
        "--confirm", "0", "--out", str(folder / f"{name}.yaml"), "--quiet",
    ]  # fmt: skip


def _load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def measure_size(url: str, name: str, folder: Path, add: int) -> dict:
    """Resume ``name`` for ``add`` trials and time the read commands; returns the row's figures."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    size = len(optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False))
    load_before = _load_avg()
    command_start = time.time()
    wall, _ = autotune(_search_args(url, name, add, folder), folder)
    command_end = time.time()
    new = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)[size:]
    launches = [t.user_attrs["launch_time"] for t in new if "launch_time" in t.user_attrs]
    exits = [t.user_attrs["exit_time"] for t in new if "exit_time" in t.user_attrs]
    gaps = [b - a for a, b in zip(exits, launches[1:])]
    reads = {}
    for command in ("show", "export", "report"):
        extra = ["--out", str(folder / f"{name}.{command}.out")] if command in ("export", "report") else []
        reads[command] = statistics.median(autotune([command, name, "--storage", url, *extra], folder)[0] for _ in range(2))
    sampler = _sampler_seconds(url, name)
    per_trial = statistics.median(gaps) if gaps else None
    return {
        "trials_before": size,
        "sampler_s": sampler,
        "own_per_trial_s": None if per_trial is None else per_trial - sampler,
        "added": len(new),
        "per_trial_s": per_trial,
        "gaps_s": gaps,
        "startup_s": min(launches) - command_start if launches else None,
        "end_s": command_end - max(exits) if exits else None,
        "search_wall_s": wall,
        **{f"{k}_s": v for k, v in reads.items()},
        "load_avg": f"{load_before} -> {_load_avg()}",
    }


def _sampler_seconds(url: str, name: str, repeats: int = 5) -> float:
    """Median seconds Optuna's sampler (the study's default, multivariate TPE) takes to sample one
    config of the study's space: ``study.ask()`` and autotune's ``suggest_config``, in this process
    (the trials it asks are failed at once; the study is thrown away after this)."""
    import optuna

    from autotune.config import TrialConfig
    from autotune.space_params import suggest_config
    from autotune.storage import open_storage
    from autotune.study.search import _make_sampler
    from autotune.study.settings import settings_of

    study = optuna.load_study(study_name=name, storage=open_storage(url, create=False))
    settings = settings_of(study)
    assert settings is not None
    study.sampler = _make_sampler(settings, 0)
    baseline = TrialConfig.from_dict(settings.baseline_config)
    study.get_trials(deepcopy=False)  # the one full read, as a search run has made before its trials
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        trial = study.ask()
        suggest_config(trial, settings.space, baseline)
        times.append(time.perf_counter() - started)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return statistics.median(times[1:])  # the first call builds the sampler's caches


def part_sizes(sizes: list[int], storages: list[str], add: int, rounds: int = 2) -> list[dict]:
    """Each storage's studies of every size are built first, then measured in ``rounds`` interleaved
    rounds (every size once per round, in turn): on a shared machine the load moves by minutes, so
    a size's figures are compared with the smallest size's *of the same round* (``ratio``), and each
    column is the median over rounds."""
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="autotune-scale-"))
    try:
        for backend in storages:
            base_name = f"scale-{uuid.uuid4().hex[:6]}"
            studies = []
            if backend == "sqlite":
                base = folder / "base.db"
                autotune(_search_args(f"sqlite:///{base}", base_name, 6, folder), folder)
            for size in sizes:
                if backend == "sqlite":
                    db = folder / f"s{size}.db"
                    shutil.copy(base, db)
                    url, name = f"sqlite:///{db}", base_name
                else:  # a study of its own per size, in the shared database
                    url, name = POSTGRES, f"{base_name}-{size}"
                    autotune(_search_args(url, name, 6, folder), folder)
                if size > 6:
                    grow(url, name, size)
                studies.append((size, url, name))
            measured: dict[int, list[dict]] = {size: [] for size in sizes}
            for _ in range(rounds):
                for size, url, name in studies:
                    measured[size].append(measure_size(url, name, folder, add))
            smallest = measured[sizes[0]]
            for size in sizes:
                row = {"storage": backend, "size": size, "rounds": measured[size]}
                for key in measured[size][0]:
                    got = [m[key] for m in measured[size] if isinstance(m.get(key), (int, float))]
                    row[key] = statistics.median(got) if got else measured[size][-1][key]
                ratios = [
                    m["per_trial_s"] / s["per_trial_s"] for m, s in zip(measured[size], smallest) if m["per_trial_s"] and s["per_trial_s"]
                ]
                row["ratio"] = statistics.median(ratios) if ratios else None
                row["load_avg"] = " / ".join(m["load_avg"] for m in measured[size])
                rows.append(row)
                print(_row_line(row), flush=True)
            if backend == "postgresql":
                import optuna

                for _size, url, name in studies:
                    optuna.delete_study(study_name=name, storage=url)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _row_line(row: dict) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    return (
        f"| {row['storage']} | {row['size']:,} | {fmt(row['per_trial_s'])} | {fmt(row.get('ratio'))}x | {fmt(row['sampler_s'])} | {fmt(row['own_per_trial_s'])} | "
        f"{fmt(row['startup_s'])} | {fmt(row['end_s'])} | {fmt(row['show_s'])} | {fmt(row['export_s'])} | {fmt(row['report_s'])} | {row['load_avg']} |"
    )


def _connections() -> int:
    import psycopg

    with psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=root", connect_timeout=3) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'test' AND pid <> pg_backend_pid()").fetchone()[0])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def part_workers(workers: int, queued: int, via: str) -> dict:
    """``workers`` workers and one search on one PostgreSQL study (``via`` "postgresql" or "grpc")."""
    import optuna

    folder = Path(tempfile.mkdtemp(prefix="autotune-workers-"))
    name = f"workers-{uuid.uuid4().hex[:6]}"
    proxy = None
    url = POSTGRES
    if via == "grpc":
        port = _free_port()
        proxy = subprocess.Popen(
            [sys.executable, "-m", "autotune", "storage-proxy", "--storage", POSTGRES, "--host", "127.0.0.1", "--port", str(port)],
            cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        url = f"grpc://127.0.0.1:{port}"
        time.sleep(5)
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _connections())
            except Exception:
                pass
            done.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.time()
    search = subprocess.Popen(
        [sys.executable, "-m", "autotune", *_search_args(url, name, queued, folder, samples=64)],
        cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    worker = [sys.executable, "-m", "autotune", "worker", "--study-name", name, "--storage", url]
    pool = [
        subprocess.Popen(worker, cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(workers)
    ]
    outputs = [p.communicate(timeout=3600)[0] for p in [search, *pool]]
    ended = time.time()
    done.set()
    if proxy is not None:
        proxy.terminate()
        proxy.wait(timeout=30)
    codes = [p.returncode for p in [search, *pool]]
    ran = sum(int(m.group(1)) for text in outputs for m in re.finditer(r"worker ran (\d+) trial", text))
    this_run = re.search(r"this run: (\d+) trial", outputs[0])
    ran += int(this_run.group(1)) if this_run else 0
    trials = optuna.load_study(study_name=name, storage=POSTGRES).get_trials(deepcopy=False)
    states = [t.state.name for t in trials]
    finished = [t for t in trials if t.state.is_finished()]
    launches = [t.user_attrs["launch_time"] for t in finished if "launch_time" in t.user_attrs]
    exits = [t.user_attrs["exit_time"] for t in finished if "exit_time" in t.user_attrs]
    row = {
        "via": via,
        "workers": workers,
        "queued": queued,
        "trials": len(trials),
        "complete": states.count("COMPLETE"),
        "trials_per_s": len(exits) / (max(exits) - min(launches)) if exits else 0.0,
        "lost": states.count("WAITING")
        + sum(1 for t in trials if t.state.name == "FAIL" and "stale" in str(t.user_attrs.get("fail_kind", ""))),
        "duplicated": max(0, ran - len(finished)),
        "stuck": states.count("RUNNING"),
        "peak_connections": peak[0],
        "wall_s": ended - started,
        "exit_codes": sorted(set(codes)),
        # the end of what each process that did not exit 0 printed (search first, then the workers)
        "failed_outputs": [
            f"[{'search' if i == 0 else f'worker {i}'} exit {code}] {text[-600:]}"
            for i, (code, text) in enumerate(zip(codes, outputs))
            if code
        ],
        "load_avg": _load_avg(),
    }
    optuna.delete_study(study_name=name, storage=POSTGRES)
    shutil.rmtree(folder, ignore_errors=True)
    return row


def _postgres_answers() -> bool:
    try:
        _connections()
        return True
    except Exception:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["all", "sizes", "workers"], default="all")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--storages", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--add", type=int, default=6, help="real trials added to each size (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the sizes (default 2; medians, paired ratios)")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--queued", type=int, default=96, help="trials the search queues for the workers (default 96)")
    parser.add_argument("--via", nargs="+", default=["postgresql", "grpc"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.json")
    args = parser.parse_args()
    storages = [s for s in args.storages if s != "postgresql" or _postgres_answers()]
    result: dict = {"cpus": os.cpu_count(), "load_avg_start": _load_avg()}
    if args.part in ("all", "sizes"):
        print(
            "| storage | trials | per trial (s) | vs the smallest, same round | of which Optuna's sampler (s) | autotune's own (s) | start-up (s) | end (s) "
            "| show (s) | export (s) | report (s) | load avg per round (before -> after) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        result["sizes"] = part_sizes(args.sizes, storages, args.add, args.rounds)
    if args.part in ("all", "workers") and _postgres_answers():
        print("\n| via | workers | queued | complete | trials/s | lost | duplicated | stuck | peak DB connections | wall (s) | load avg |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        result["workers"] = []
        for via in args.via:
            if via == "grpc" and "storage-proxy" not in autotune(["--help"], ROOT)[1].stdout:
                print("| grpc | (no `autotune storage-proxy` command: skipped) |")
                continue
            row = part_workers(args.workers, args.queued, via)
            result["workers"].append(row)
            print(
                f"| {row['via']} | {row['workers']} | {row['queued']} | {row['complete']} | {row['trials_per_s']:.2f} | {row['lost']} | "
                f"{row['duplicated']} | {row['stuck']} | {row['peak_connections']} | {row['wall_s']:.0f} | {row['load_avg']} |",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
