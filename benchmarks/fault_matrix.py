"""Benchmark: the fault matrix. Every injected fault x storage (SQLite, PostgreSQL), nothing lost.

Each cell runs a real study of ``tests/models/tiny.py`` (trials of about 2 s) with a budget of
``--trials`` trials through the CLI, injects one fault, lets the tool recover the way a user would
(running the printed resume command, or a worker), and then reads the study back:

==================  ===========================================================================
cell                how the fault is injected (search ``flat`` unless marked staged)
==================  ===========================================================================
worker_sigkill      an ``autotune worker`` started with the search is killed with SIGKILL mid-trial; its
                    trial must go stale and be retried by the search
trial_sigkill       the running trial's process group is killed with SIGKILL from outside
trial_hang          the trial sleeps in ``training_step`` past ``--trial-timeout 10``
oom                 ``training_step`` raises ``torch.cuda.OutOfMemoryError``
nan                 the loss turns NaN
exception           ``training_step`` raises ``ValueError``; confirmation runs on (``--confirm 1``):
                    they are not budget trials and must not count
ctrl_c              SIGINT to ``autotune search`` mid-trial, then the printed resume command
ctrl_c_staged       the same in a staged search (the trial cut is a stage-1 screening run)
sigterm             SIGTERM to ``autotune search`` mid-trial, then the printed resume command
db_outage           the database unreachable for 8 s (within ``$AUTOTUNE_STORAGE_RETRY``):
                    PostgreSQL through a TCP proxy that cuts every connection and refuses new
                    ones; SQLite held under an exclusive lock
db_outage_long      unreachable for 15 s with ``AUTOTUNE_STORAGE_RETRY=4``: the search stops at the
                    limit (exit 1); a worker started afterwards retries its stale trial and runs
                    the rest; on SQLite the lock is held past the limit (SQLite's lock timeout
                    is at most ``$AUTOTUNE_STORAGE_RETRY``, so the limit is reached there too)
worker_first        ``autotune worker`` started before the study exists (it waits), then the search
swarm_staged        1 staged search + 3 workers started with it, budget ``--trials`` + 2
==================  ===========================================================================

Counting (:func:`count_budget`): the budget is the trials the cell asked for. A budget trial is any
trial that is not a confirmation run (``confirm_of``); a trial failed as stale and its retry (Optuna's
``failed_trial``) are one budget trial, judged by the retry. A budget trial is finished when it ended
COMPLETE, PRUNED or FAIL with its own reason; one stored as ``interrupted`` (Ctrl-C, SIGTERM) is not
finished: it measured nothing, and the tool must run it again. ``lost`` is budget minus finished (below
0: more trials ran than asked), ``duplicated`` the budget trials that ended with a result more than
once (must be 0). Every cell also checks that its fault arrived (the signal was delivered while the
trial ran, the trial failed with the injected kind, the database was cut while the
trial ran, an outage past the retry limit stopped the search at the limit); a cell whose fault
did not arrive proves nothing and fails the run like a lost trial. ``recover s``: from the injection
(for faults inside a trial: that trial's start) until the next trial completed (for a trial failed as
stale: until its retry completed).

Usage::

    python benchmarks/fault_matrix.py                 # prints the table, writes benchmarks/results/fault_matrix.json
    python benchmarks/fault_matrix.py --storage sqlite --cells nan,oom

Exit code 0 when every cell lost nothing, ran nothing twice and had its fault arrive; else 1.
PostgreSQL rows need a server on 127.0.0.1:5432 (trust auth, database ``test``) and are skipped with a
note when none answers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
MODEL = ROOT / "tests" / "models" / "tiny.py"
ADMIN = "host=127.0.0.1 port=5432 dbname=test user=root"
FAULTY_TRIAL = 2  # trial 0 is the baseline; trial 2 gets the fault
# short heartbeats, and trials of about 2 s (2 ms per training sample), so faults land mid-trial
ENV = {"AUTOTUNE_HEARTBEAT_INTERVAL": "1", "AUTOTUNE_HEARTBEAT_GRACE": "6", "TINY_SAMPLE_SLEEP": "0.002"}
# the cell decides these with flags; a value in the caller's environment must not change a cell
_CLEARED = ("AUTOTUNE_STORAGE", "AUTOTUNE_CONFIRM", "AUTOTUNE_SEARCH", "AUTOTUNE_PRUNER", "AUTOTUNE_STORAGE_RETRY", "TINY_FAULTS")
TERMINAL = ("COMPLETE", "PRUNED", "FAIL")
SHORT_OUTAGE, LONG_OUTAGE, LONG_RETRY = 8.0, 15.0, 4


@dataclass(frozen=True)
class Cell:
    """One fault of the matrix: how its study runs, and what is injected."""

    name: str
    search: str = "flat"
    confirm: int = 0
    tiny: str | None = None  # the fault tests/models/tiny.py raises in FAULTY_TRIAL
    fail_kind: str | None = None  # the fail_kind the faulty trial must store
    extra_trials: int = 0
    trial_timeout: int = 20


CELLS = {
    c.name: c
    for c in [
        Cell("worker_sigkill"),
        Cell("trial_sigkill"),
        Cell("trial_hang", tiny="hang", fail_kind="timeout", trial_timeout=10),
        Cell("oom", tiny="oom", fail_kind="oom"),
        Cell("nan", tiny="nan", fail_kind="nonfinite_loss"),
        Cell("exception", tiny="raise", fail_kind="exception", confirm=1),
        Cell("ctrl_c"),
        Cell("ctrl_c_staged", search="staged"),
        Cell("sigterm"),
        Cell("db_outage"),
        Cell("db_outage_long"),
        Cell("worker_first"),
        Cell("swarm_staged", search="staged", extra_trials=2),
    ]
}


def count_budget(trials: Iterable[Any], budget: int) -> dict[str, Any]:
    """Count a study's budget trials (see the module docstring).

    Args:
        trials: The study's frozen trials (anything with ``number``, ``state.name``, ``user_attrs``
            and ``system_attrs``).
        budget: Trials the cell asked for (>= 0).

    Returns:
        ``finished``, ``lost`` (budget - finished; negative when more ran), ``duplicated``, and for
        the notes: ``interrupted``, ``retried`` (stale trials retried), ``confirmation`` (runs not
        counted), ``unfinished`` (budget trials still WAITING or RUNNING) and ``fail_kinds`` (of the
        finished budget trials that failed; ``stale`` for a stale trial not retried).
    """
    chains: dict[int, list[Any]] = {}
    confirmation = 0
    for t in trials:
        if "confirm_of" in t.user_attrs:
            confirmation += 1
            continue
        chains.setdefault(t.system_attrs.get("failed_trial", t.number), []).append(t)
    finished = duplicated = interrupted = retried = unfinished = 0
    kinds: set[str] = set()
    for chain in chains.values():
        chain.sort(key=lambda t: t.number)
        last = chain[-1]
        retried += len(chain) > 1
        # a result: an end of the trial's own (a stale failure is the tool's, and is retried)
        results = [t for t in chain if t.state.name in ("COMPLETE", "PRUNED") or t.user_attrs.get("fail_kind")]
        duplicated += len([t for t in results if t.user_attrs.get("fail_kind") != "interrupted"]) > 1
        if last.state.name not in TERMINAL:
            unfinished += 1
        elif last.user_attrs.get("fail_kind") == "interrupted":
            interrupted += 1
        else:
            finished += 1
            if last.state.name == "FAIL":
                kinds.add(last.user_attrs.get("fail_kind", "stale"))
    return {
        "finished": finished,
        "lost": budget - finished,
        "duplicated": duplicated,
        "interrupted": interrupted,
        "retried": retried,
        "confirmation": confirmation,
        "unfinished": unfinished,
        "fail_kinds": sorted(kinds),
    }


def _postgres_answers() -> bool:
    try:
        import psycopg

        psycopg.connect(ADMIN, connect_timeout=3).close()
        return True
    except Exception:
        return False


def _new_database(kind: str, folder: Path) -> tuple[str, Callable[[], None]]:
    if kind == "sqlite":
        return f"sqlite:///{folder / 'study.db'}", lambda: None
    import psycopg

    name = f"autotune_faults_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return f"postgresql+psycopg://root@127.0.0.1:5432/{name}", drop


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descends(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` (a trial's group leader) descends from ``ancestor`` (maybe via a warm process)."""
    current: int | None = pid
    for _ in range(6):
        current = _parent_of(current) if current else None
        if current is None:
            return False
        if current == ancestor:
            return True
    return False


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


@dataclass
class _Proc:
    """One ``autotune`` process of a cell, its output in a file."""

    who: str
    popen: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait(self, timeout: float = 600.0) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.popen.wait()
            return self.popen.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # its own session: the process and what it started
        except ProcessLookupError:
            pass


@dataclass
class _Run:
    """The state of one cell while it runs: its database, processes, notes."""

    cell: Cell
    kind: str
    url: str
    folder: Path
    budget: int
    procs: list[_Proc] = field(default_factory=list)
    codes: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    arrived: bool | None = None  # None: nothing to arrive (worker_first, swarm_staged)
    injected: float | None = None
    _storage: Any = None

    def trials(self) -> list[Any]:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            if self._storage is None:
                if not self._study_exists():
                    return []  # opening the storage first would create its tables, racing the search
                self._storage = optuna.storages.RDBStorage(self.url)
            return optuna.load_study(study_name="faults", storage=self._storage).trials
        except Exception:
            return []

    def _study_exists(self) -> bool:
        query = "SELECT 1 FROM studies WHERE study_name = 'faults'"
        try:
            if self.kind == "sqlite":
                path = self.folder / "study.db"
                if not path.exists():
                    return False
                with sqlite3.connect(path, timeout=5) as conn:
                    return conn.execute(query).fetchone() is not None
            import psycopg

            with psycopg.connect(f"host=127.0.0.1 port=5432 user=root dbname={self.url.rsplit('/', 1)[1]}", connect_timeout=3) as conn:
                return conn.execute(query).fetchone() is not None
        except Exception:
            return False

    def close(self) -> None:
        if self._storage is not None:
            self._storage.engine.dispose()
            self._storage = None

    def spawn(self, who: str, args: list[Any], env: dict[str, str] | None = None) -> _Proc:
        full = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        full.update(ENV)
        if self.cell.tiny:
            full["TINY_FAULTS"] = f"{FAULTY_TRIAL}:{self.cell.tiny}"
        full.update(env or {})
        log = self.folder / f"{who}-{len(self.procs)}.log"
        with log.open("w") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "autotune", *map(str, args)],
                cwd=self.folder,
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        proc = _Proc(who, popen, log)
        self.procs.append(proc)
        return proc

    def search_args(self, url: str | None = None) -> list[Any]:
        c = self.cell
        return [
            "search",
            MODEL,
            "--trials",
            self.budget,
            "--samples",
            _SAMPLES[0],
            "--storage",
            url or self.url,
            "--study-name",
            "faults",
            "--out",
            self.folder / "best.yaml",
            "--trial-timeout",
            c.trial_timeout,
            "--search",
            c.search,
            "--confirm",
            c.confirm,
            "--confirm-repeats",
            1,
            "--pruner",
            "none",
        ]

    def worker_args(self, url: str | None = None) -> list[Any]:
        return ["worker", "--storage", url or self.url, "--study-name", "faults"]

    def finish(self, proc: _Proc, timeout: float = 600.0) -> int:
        code = proc.wait(timeout)
        self.codes.append((proc.who, code))
        return code

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = 240.0, every: float = 0.3) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = predicate()
            if value:
                return value
            if self.procs and all(p.popen.poll() is not None for p in self.procs):
                break  # every process ended: it will never come
            time.sleep(every)
        raise TimeoutError(f"never saw {what}")

    def running(self, number: int | None = FAULTY_TRIAL, under: int | None = None) -> Any:
        """A RUNNING trial (``number``, if given; started by process ``under``, if given) whose process group is stored."""
        for t in self.trials():
            pgid = t.user_attrs.get("process_group")
            if t.state.name != "RUNNING" or not pgid or (number is not None and t.number != number):
                continue
            if under is None or _descends(pgid, under):
                return t
        return None

    def trial_state(self, number: int) -> tuple[str, str | None]:
        every = self.trials()
        if number >= len(every):
            return "absent", None
        t = every[number]
        return t.state.name, t.user_attrs.get("fail_kind")


_SAMPLES = [1024]  # set by main (--samples)


def _resume(run: _Run, text: str) -> None:
    """Run the resume command the interrupted process printed (as a user would); note when it printed none."""
    match = re.search(r"Resume with:\n\s+(.+)", text)
    if not match:
        run.notes.append("no resume line printed")
        return
    args = shlex.split(match.group(1))
    if args[:1] == ["autotune"]:
        args = args[1:]
    if "--storage" in args:  # printed masked; the same database
        args[args.index("--storage") + 1] = run.url
    run.notes.append(f"resumed: autotune {args[0]}")
    run.finish(run.spawn("resume", args))


def _signal_cell(run: _Run, signum: int, expected_code: int) -> None:
    search = run.spawn("search", run.search_args())
    run.wait_for(f"trial {FAULTY_TRIAL} running", run.running)
    time.sleep(0.3)
    run.injected = time.time()
    in_time = run.running() is not None  # the trial still ran when the signal was sent
    search.popen.send_signal(signum)
    code = run.finish(search)
    state, kind = run.trial_state(FAULTY_TRIAL)
    run.arrived = in_time and code == expected_code and kind == "interrupted"
    if not run.arrived:
        run.notes.append(f"signal not delivered mid-trial (exit {code}, trial {FAULTY_TRIAL} {state} {kind or ''})".replace(" )", ")"))
    _resume(run, search.text())


def _cell_worker_sigkill(run: _Run) -> None:
    search = run.spawn("search", run.search_args())
    worker = run.spawn("worker", run.worker_args())  # it waits for the study, then for the baseline
    victim = run.wait_for("a trial of the worker", lambda: run.running(None, under=worker.popen.pid))
    time.sleep(0.5)
    run.injected = time.time()
    worker.popen.kill()
    run.finish(worker)
    run.finish(search)
    stale = [t for t in run.trials() if t.system_attrs.get("failed_trial") == victim.number]
    run.arrived = worker.popen.returncode == -signal.SIGKILL and bool(stale)
    if not run.arrived:
        run.notes.append(f"trial {victim.number} of the killed worker was not retried")


def _cell_trial_sigkill(run: _Run) -> None:
    search = run.spawn("search", run.search_args())
    victim = run.wait_for(f"trial {FAULTY_TRIAL} running", run.running)
    time.sleep(0.5)
    run.injected = time.time()
    in_time = run.running() is not None
    try:
        os.killpg(victim.user_attrs["process_group"], signal.SIGKILL)
    except ProcessLookupError:
        in_time = False
    run.finish(search)
    state, kind = run.trial_state(FAULTY_TRIAL)
    run.arrived = in_time and state == "FAIL"
    if not run.arrived:
        run.notes.append(f"trial {FAULTY_TRIAL} not killed mid-run ({state} {kind})")


def _cell_trial_fault(run: _Run) -> None:
    search = run.spawn("search", run.search_args())
    run.finish(search)
    state, kind = run.trial_state(FAULTY_TRIAL)
    run.arrived = kind == run.cell.fail_kind
    if not run.arrived:
        run.notes.append(f"trial {FAULTY_TRIAL} {state} {kind}, not {run.cell.fail_kind}")


def _outage(run: _Run, seconds: float, proxy: Any) -> None:
    """Make the database unreachable for ``seconds`` (blocks that long)."""
    if proxy is not None:
        proxy.outage(seconds)
        return
    with sqlite3.connect(run.folder / "study.db", timeout=60) as conn:
        conn.execute("BEGIN EXCLUSIVE")
        time.sleep(seconds)
        conn.rollback()


def _cell_db_outage(run: _Run, long: bool = False) -> None:
    proxy = None
    url = run.url
    if run.kind == "postgresql":
        from tcp_proxy import OutageProxy

        proxy = OutageProxy(("127.0.0.1", 5432))
        url = run.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    try:
        env = {"AUTOTUNE_STORAGE_RETRY": str(LONG_RETRY)} if long else {}
        search = run.spawn("search", run.search_args(url), env)
        run.wait_for(f"trial {FAULTY_TRIAL} running", run.running)
        run.close()  # the benchmark's own connection must not hold the SQLite lock, nor see the outage
        in_time = run.running() is not None
        run.close()
        run.injected = time.time()
        cut = threading.Thread(target=_outage, args=(run, LONG_OUTAGE if long else SHORT_OUTAGE, proxy))
        cut.start()
        cut.join()
        if not long:
            run.finish(search)
            # SQLite waits out a lock inside each call (60 s lock timeout): no error, nothing to report
            run.arrived = in_time
            run.notes.append("the search reported the outage" if "is unreachable" in search.text() else "the search waited silently")
            if not in_time:
                run.notes.append(f"trial {FAULTY_TRIAL} no longer ran when the outage began")
            return
        code = run.finish(search, timeout=120)
        run.arrived = code == 1 and "was unreachable for" in search.text()
        if not run.arrived:
            run.notes.append(f"the search did not stop at the retry limit (exit {code})")
        run.notes.append("then a worker")
        run.finish(run.spawn("worker", run.worker_args()))
    finally:
        if proxy is not None:
            proxy.close()


def _cell_worker_first(run: _Run) -> None:
    worker = run.spawn("worker", run.worker_args())
    run.wait_for("the worker waiting", lambda: "waiting up to" in worker.text(), timeout=120)
    search = run.spawn("search", run.search_args())
    run.arrived = True  # the worker waited for a study that did not exist yet
    run.finish(search)
    run.finish(worker)


def _cell_swarm(run: _Run) -> None:
    search = run.spawn("search", run.search_args())
    workers = [run.spawn("worker", run.worker_args()) for _ in range(3)]
    run.finish(search)
    for w in workers:
        run.finish(w)


def _inject(run: _Run) -> None:
    name = run.cell.name
    if name == "worker_sigkill":
        _cell_worker_sigkill(run)
    elif name == "trial_sigkill":
        _cell_trial_sigkill(run)
    elif run.cell.tiny:
        _cell_trial_fault(run)
    elif name in ("ctrl_c", "ctrl_c_staged"):
        _signal_cell(run, signal.SIGINT, 130)
    elif name == "sigterm":
        _signal_cell(run, signal.SIGTERM, 143)
    elif name in ("db_outage", "db_outage_long"):
        _cell_db_outage(run, long=name == "db_outage_long")
    elif name == "worker_first":
        _cell_worker_first(run)
    elif name == "swarm_staged":
        _cell_swarm(run)
    else:
        raise ValueError(f"unknown cell {name!r}")


def run_cell(cell: Cell, kind: str, trials: int) -> dict[str, Any]:
    """Run one study with one injected fault; return its row of the matrix."""
    with tempfile.TemporaryDirectory(prefix="autotune-faults-") as tmp:
        folder = Path(tmp)
        url, drop = _new_database(kind, folder)
        run = _Run(cell, kind, url, folder, trials + cell.extra_trials)
        start = time.monotonic()
        try:
            _inject(run)
        except Exception as e:  # a cell that breaks is a row with its error, not the end of the matrix
            run.notes.append(f"cell error: {e}")
            run.arrived = False if run.arrived is None else run.arrived
        finally:
            for p in run.procs:
                if p.popen.poll() is None:
                    run.notes.append(f"{p.who} still running at the end: killed")
                    p.kill()
                    p.popen.wait()
        study_trials = run.trials()
        groups = {t.number: t.user_attrs["process_group"] for t in study_trials if t.user_attrs.get("process_group")}
        end = time.monotonic() + 3.0  # a trial process killed just now may still be ending
        while any(_alive(g) for g in groups.values()) and time.monotonic() < end:
            time.sleep(0.2)
        leaked = [n for n, g in groups.items() if _alive(g)]
        for t in study_trials:
            if t.number in leaked:
                os.killpg(t.user_attrs["process_group"], signal.SIGKILL)
        if leaked:
            run.notes.append(f"trial process(es) {leaked} outlived autotune: killed")
        run.close()
        try:
            drop()
        except Exception as e:
            run.notes.append(f"drop failed: {e}")
        counted = count_budget(study_trials, run.budget)
        failed_at = [t.datetime_start.timestamp() for t in study_trials if t.state.name == "FAIL" and t.datetime_start]
        injected = run.injected if run.injected is not None else (min(failed_at) if failed_at else None)
        retries = [t for t in study_trials if t.system_attrs.get("failed_trial") is not None]
        after = [
            t.datetime_complete.timestamp()
            for t in (retries or study_trials)  # a trial failed as stale: until its retry completed
            if t.state.name == "COMPLETE" and injected is not None and t.datetime_complete.timestamp() > injected
        ]
        broken = any(n.startswith("cell error") for n in run.notes)
        tails = {f"{p.who}-{i}": p.text()[-600:] for i, p in enumerate(run.procs) if broken or p.popen.returncode not in (0, None)}
        notes = list(run.notes)
        for key, label in (("interrupted", "interrupted"), ("retried", "retried"), ("confirmation", "confirmation runs (not counted)")):
            if counted[key]:
                notes.append(f"{counted[key]} {label}")
        if counted["unfinished"]:
            notes.append(f"{counted['unfinished']} still queued or running")
        return {
            "cell": cell.name,
            "storage": kind,
            "search": cell.search,
            "budget": run.budget,
            **counted,
            "arrived": run.arrived,
            "recover_seconds": round(min(after) - injected, 1) if after and injected is not None else None,
            "exit_codes": run.codes,
            "notes": notes,
            "cell_seconds": round(time.monotonic() - start, 1),
            "output_tails": tails,
        }


def passed(row: dict[str, Any]) -> bool:
    """A row is good when nothing was lost or run twice, and its fault arrived (or it injects none)."""
    return row["lost"] == 0 and row["duplicated"] == 0 and row["arrived"] is not False


def _line(row: dict[str, Any]) -> str:
    arrived = {True: "yes", False: "NO", None: "-"}[row["arrived"]]
    recover = "-" if row["recover_seconds"] is None else f"{row['recover_seconds']:.1f}"
    codes = ",".join(f"{who}={code}" for who, code in row["exit_codes"])
    kinds = ",".join(row["fail_kinds"]) or "-"
    notes = "; ".join(row["notes"]) or "-"
    return (
        f"{row['cell']:<15} {row['storage']:<10} {row['budget']:>6} {row['finished']:>8} {row['lost']:>4} {row['duplicated']:>4} "
        f"{arrived:>7} {recover:>9} {row['cell_seconds']:>6.0f}  {codes:<34} {kinds:<22} {notes}"
    )


HEADER = (
    f"{'cell':<15} {'storage':<10} {'budget':>6} {'finished':>8} {'lost':>4} {'dup':>4} {'arrived':>7} {'recover s':>9} {'cell s':>6}  "
    f"{'exit codes':<34} {'fail kinds':<22} notes"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated subset of {list(CELLS)}")
    parser.add_argument("--storage", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--trials", type=int, default=4, help="budget per study (default 4; swarm_staged gets 2 more)")
    parser.add_argument("--samples", type=int, default=1024, help="training samples per trial (default 1024, about 2 s)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fault_matrix.json"))
    args = parser.parse_args()
    names = [c for c in args.cells.split(",") if c]
    unknown = [c for c in names if c not in CELLS]
    if unknown:
        parser.error(f"unknown cell(s) {unknown}; choose from {list(CELLS)}")
    _SAMPLES[0] = args.samples
    kinds = ["sqlite", "postgresql"] if args.storage == "both" else [args.storage]
    skipped = []
    if "postgresql" in kinds and not _postgres_answers():
        kinds.remove("postgresql")
        skipped.append("postgresql: no server answers on 127.0.0.1:5432")
    load_start = os.getloadavg()
    started = time.monotonic()
    print(
        f"fault matrix: {len(names)} cell(s) x {kinds}, budget {args.trials}, {args.samples} samples per trial; "
        f"{os.cpu_count()} CPU(s), load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} (1/5/15 min) at the start"
    )
    print(HEADER)
    print("-" * len(HEADER))
    rows = []
    for name in names:
        for kind in kinds:
            row = run_cell(CELLS[name], kind, args.trials)
            rows.append(row)
            print(_line(row), flush=True)
    load_end = os.getloadavg()
    total = time.monotonic() - started
    print(f"load average {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f} (1/5/15 min) at the end; {total:.0f} s in all")
    for note in skipped:
        print(f"skipped {note}")
    bad = [f"{r['cell']}/{r['storage']}" for r in rows if not passed(r)]
    print(f"{len(rows) - len(bad)} of {len(rows)} cells lost nothing" + (f"; not: {', '.join(bad)}" if bad else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average_start": load_start,
                "load_average_end": load_end,
                "seconds": round(total, 1),
                "trials": args.trials,
                "samples": args.samples,
                "rows": rows,
                "skipped": skipped,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
