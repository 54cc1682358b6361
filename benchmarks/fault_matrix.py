"""Benchmark: the fault matrix. Every injected fault x storage (SQLite, PostgreSQL), nothing lost.

Each cell runs a real study of ``tests/models/tiny.py`` with a budget of ``--trials`` trials through
the CLI, injects one fault, lets the tool recover (resuming with the printed command where the fault
stops the process), and then reads the study back:

===================  ==========================================================================
fault                how it is injected
===================  ==========================================================================
worker SIGKILL       a second process (``autotune worker``) is killed with SIGKILL mid-trial;
                     its trial must go stale and be retried by the ``search`` process
trial SIGKILL        the running trial's process group is killed with SIGKILL from outside
trial hang           the trial sleeps in ``training_step`` past ``--trial-timeout 20``
OOM                  ``training_step`` raises ``torch.cuda.OutOfMemoryError``
NaN                  the loss turns NaN
exception            ``training_step`` raises ``ValueError``
Ctrl-C               SIGINT to ``autotune search`` mid-trial, then the printed resume command
database outage      8 s with the database unreachable: PostgreSQL through a TCP proxy that cuts
                     every connection and refuses new ones; SQLite held under an exclusive lock
===================  ==========================================================================

Columns: trials expected (the budget), trials finished (COMPLETE or FAIL with a stored reason; a
trial failed as stale and retried counts once, by its retry), failed (of those), lost (expected
minus finished: must be 0), and seconds to recover: from the fault's injection (for faults inside a
trial: that trial's start, an upper bound) until the next trial completed (for a trial failed as
stale: until its retry completed).

Usage::

    python benchmarks/fault_matrix.py                 # prints the table, writes benchmarks/results/fault_matrix.json
    python benchmarks/fault_matrix.py --storage sqlite --faults nan,oom

PostgreSQL rows need a server on 127.0.0.1:5432 (trust auth, database ``test``) and are skipped
with a note when none answers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
MODEL = ROOT / "tests" / "models" / "tiny.py"
ADMIN = "host=127.0.0.1 port=5432 dbname=test user=root"
FAULTS = ["worker_sigkill", "trial_sigkill", "trial_hang", "oom", "nan", "exception", "ctrl_c", "db_outage"]
TINY = {"trial_hang": "hang", "oom": "oom", "nan": "nan", "exception": "raise"}
FAULTY_TRIAL = 2  # trial 0 is the baseline; trial 2 gets the fault
# short heartbeats, and trials of about 4 s (2 ms per training sample), so faults land mid-trial
ENV = {"AUTOTUNE_HEARTBEAT_INTERVAL": "1", "AUTOTUNE_HEARTBEAT_GRACE": "6", "TINY_SAMPLE_SLEEP": "0.002"}


def _spawn(args, cwd, env=None):
    full = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "TINY_FAULTS")}
    full.update(ENV)
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *map(str, args)], cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _postgres_answers() -> bool:
    try:
        import psycopg

        psycopg.connect(ADMIN, connect_timeout=3).close()
        return True
    except Exception:
        return False


def _new_database(kind: str, folder: Path) -> tuple[str, callable]:
    if kind == "sqlite":
        return f"sqlite:///{folder / 'study.db'}", lambda: None
    import psycopg

    name = f"autotune_faults_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")

    def drop():
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return f"postgresql+psycopg://root@127.0.0.1:5432/{name}", drop


def _trials(url: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name="faults", storage=url).trials
    except Exception:
        return []


def _wait(predicate, timeout: float = 300.0, every: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError("the awaited state never came")


def _running(url: str, number: int | None = None, after: float = 0.0):
    """A RUNNING trial (the given one, if any) whose process group is already stored."""
    for t in _trials(url):
        started = t.datetime_start is not None and t.datetime_start.timestamp() >= after
        if t.state.name == "RUNNING" and t.user_attrs.get("process_group") and (number is None or t.number == number) and started:
            return t
    return None


def run_cell(fault: str, kind: str, trials: int, samples: int) -> dict:
    """Run one study with one injected fault; return its row of the matrix."""
    with tempfile.TemporaryDirectory(prefix="autotune-faults-") as tmp:
        folder = Path(tmp)
        url, drop = _new_database(kind, folder)
        try:
            return _run_cell(fault, kind, url, folder, trials, samples)
        finally:
            drop()


def _run_cell(fault: str, kind: str, url: str, folder: Path, trials: int, samples: int) -> dict:
    base = [
        "search",
        MODEL,
        "--trials",
        trials,
        "--samples",
        samples,
        "--storage",
        url,
        "--study-name",
        "faults",
        "--out",
        folder / "best.yaml",
        "--trial-timeout",
        20,
    ]
    env = {"TINY_FAULTS": f"{FAULTY_TRIAL}:{TINY[fault]}"} if fault in TINY else {}
    injected = None
    codes = []
    if fault == "db_outage" and kind == "postgresql":
        from tcp_proxy import OutageProxy

        proxy = OutageProxy(("127.0.0.1", 5432))
        proxied = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        base[base.index(url)] = proxied
    search = _spawn(base, folder, env)
    if fault == "worker_sigkill":
        _wait(lambda: any(t.user_attrs.get("baseline") and t.state.name == "COMPLETE" for t in _trials(url)))
        worker = _spawn(["worker", "--storage", url, "--study-name", "faults"], folder)
        _wait(
            lambda: [
                t
                for t in _trials(url)
                if t.state.name == "RUNNING" and t.user_attrs.get("process_group") and _group_of(worker.pid, t.user_attrs["process_group"])
            ]
        )
        time.sleep(0.5)
        injected = time.time()
        worker.kill()
        worker.communicate()
        codes.append(("worker", worker.returncode))
    elif fault == "trial_sigkill":
        victim = _wait(lambda: _running(url, FAULTY_TRIAL))
        time.sleep(1.0)
        injected = time.time()
        try:
            os.killpg(victim.user_attrs["process_group"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    elif fault == "ctrl_c":
        _wait(lambda: _running(url, FAULTY_TRIAL))
        time.sleep(1.0)
        injected = time.time()
        search.send_signal(signal.SIGINT)
        _, err = search.communicate(timeout=120)
        codes.append(("search", search.returncode))
        match = re.search(r"Resume with:\n\s+(.+)", err)
        resume = match.group(1).split() if match else []
        if resume[:1] == ["autotune"]:
            resume = resume[1:]
        resume = [url if "***" in a else a for a in resume]
        search = _spawn(resume, folder, env)
    elif fault == "db_outage":
        _wait(lambda: _running(url, FAULTY_TRIAL))
        injected = time.time()
        if kind == "postgresql":
            proxy.outage(8.0)
        else:
            with sqlite3.connect(folder / "study.db", timeout=60) as conn:
                conn.execute("BEGIN EXCLUSIVE")
                time.sleep(8.0)
                conn.rollback()
    _out, err = search.communicate(timeout=900)
    codes.append(("search", search.returncode))
    if fault == "db_outage" and kind == "postgresql":
        proxy.close()
    study_trials = _trials(url)
    retried = [
        t for t in study_trials if t.state.name == "FAIL" and any(r.system_attrs.get("failed_trial") == t.number for r in study_trials)
    ]
    terminal = [t for t in study_trials if t.state.name in ("COMPLETE", "FAIL")]
    finished = len(terminal) - len(retried)
    faulty = [t for t in study_trials if t.state.name == "FAIL"]
    if injected is None and faulty:
        injected = faulty[0].datetime_start.timestamp()
    retries = [t for t in study_trials if t.system_attrs.get("failed_trial") is not None and t.state.name == "COMPLETE"]
    after = [
        t.datetime_complete.timestamp()
        for t in (retries or study_trials)  # a retried trial: until its retry completed
        if t.state.name == "COMPLETE" and injected is not None and t.datetime_complete.timestamp() > injected
    ]
    return {
        "fault": fault,
        "storage": kind,
        "expected": trials,
        "finished": finished,
        "failed": len([t for t in terminal if t.state.name == "FAIL"]) - len(retried),
        "lost": trials - finished,
        "recover_seconds": round(min(after) - injected, 1) if after else None,
        "fail_kinds": sorted({t.user_attrs.get("fail_kind", "stale") for t in faulty}),
        "exit_codes": codes,
        "stderr_tail": err[-300:] if search.returncode else "",
    }


def _group_of(pid: int, pgid: int) -> bool:
    """Whether process group ``pgid`` (a trial) descends from ``pid`` (its worker, maybe via a warm process)."""
    current = pgid
    for _ in range(5):
        try:
            current = int(Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if current == pid:
            return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated subset of {FAULTS}")
    parser.add_argument("--storage", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--trials", type=int, default=4, help="budget per study (default 4)")
    parser.add_argument("--samples", type=int, default=2048, help="training samples per trial (default 2048)")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; choose from {FAULTS}")
    kinds = ["sqlite", "postgresql"] if args.storage == "both" else [args.storage]
    rows, skipped = [], []
    if "postgresql" in kinds and not _postgres_answers():
        kinds.remove("postgresql")
        skipped.append("postgresql: no server answers on 127.0.0.1:5432")
    header = (
        f"{'fault':<15} {'storage':<11} {'expected':>8} {'finished':>8} {'failed':>6} {'lost':>4} {'recover s':>9}  fail kinds / exit codes"
    )
    print(header)
    print("-" * len(header))
    for fault in faults:
        for kind in kinds:
            start = time.monotonic()
            row = run_cell(fault, kind, args.trials, args.samples)
            row["cell_seconds"] = round(time.monotonic() - start, 1)
            rows.append(row)
            recover = "-" if row["recover_seconds"] is None else f"{row['recover_seconds']:.1f}"
            codes = ",".join(f"{who}={code}" for who, code in row["exit_codes"])
            print(
                f"{fault:<15} {kind:<11} {row['expected']:>8} {row['finished']:>8} {row['failed']:>6} {row['lost']:>4} {recover:>9}  "
                f"{','.join(row['fail_kinds']) or '-'} / {codes}",
                flush=True,
            )
    for note in skipped:
        print(f"skipped {note}")
    out = ROOT / "benchmarks" / "results" / "fault_matrix.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trials": args.trials, "samples": args.samples, "rows": rows, "skipped": skipped}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0 if all(r["lost"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
