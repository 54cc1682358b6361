"""Command line: ``autotune search | worker | show | export | report | dashboard | storage-proxy``.

User errors print one line and exit with code 2 (a traceback only with ``--debug``); other failures
exit with code 1; Ctrl-C exits with 130 and SIGTERM with 143 after printing the command that resumes the study
(running trials are stored as interrupted), except ``storage-proxy``, a server that they stop with code 0;
output into a pipe whose reader went away (``autotune show STUDY | head``) stops quietly with code 141."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from autotune import __version__
from autotune.errors import AutotuneError, UsageError, reader_gone, stdout_reader_gone

__all__ = ["EXIT_BROKEN_PIPE", "build_parser", "main"]


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _trial_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a trial number (0, 1, ...), got {text!r}")
    return number


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        percent = text.endswith("%") and text[:-1].replace(".", "", 1).isdigit()  # --loss-tolerance 5%: a fraction is meant
        hint = f" (a fraction: {float(text[:-1]) / 100:g} for {text})" if percent else ""
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}{hint}") from None


def _add_storage(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage",
        help="Optuna storage: a database URL, grpc://HOST:PORT or journal:PATH (default: $AUTOTUNE_STORAGE, else sqlite:///studies/<study>.db)",
    )


class _Parser(argparse.ArgumentParser):
    """argparse, with bad flags reported like every other bad input: one line, exit code 2, and a
    "did you mean" for a mistyped flag or command (:func:`difflib.get_close_matches` over this
    parser's option strings and choices; Python 3.14's ``suggest_on_error`` does the same)."""

    def parse_known_args(self, args=None, namespace=None):
        # a sub-command's parser reports its own unknown flags, so that the hint can name its options
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str):
        self.exit(2, f"autotune: error: {message}{self._suggestion(message)} (see `{self.prog} --help`)\n")

    def _suggestion(self, message: str) -> str:
        """``"; did you mean X?"`` for an unrecognized flag or an invalid choice in ``message``, else ``""``."""
        import difflib
        import re

        if message.startswith("unrecognized arguments: "):
            words = [w.split("=", 1)[0] for w in message.split(": ", 1)[1].split() if w.startswith("-")]
            known = [o for action in self._actions for o in action.option_strings]
        else:
            found = re.search(r"invalid choice: '([^']*)'", message)
            words = [found.group(1)] if found else []
            known = [str(c) for action in self._actions if action.choices for c in action.choices]
        hints = [(word, match[0]) for word in words if (match := difflib.get_close_matches(word, known, n=1))]
        if len(hints) > 1:
            return f"; did you mean {' and '.join(f'{hint} (for {word})' for word, hint in hints)}?"
        return f"; did you mean {hints[0][1]}?" if hints else ""


def build_parser() -> argparse.ArgumentParser:
    """The ``autotune`` argument parser: one sub-command per job (defaults from :mod:`autotune.study.options`)."""
    parser = _Parser(prog="autotune", description="Find the fastest good training config for a Lightning model.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_search(sub, common)
    _add_study_commands(sub, common)
    return parser


def _add_search(sub, common: argparse.ArgumentParser) -> None:
    from autotune.study.options import DEFAULTS, option_defaults

    opt = option_defaults()
    s = sub.add_parser("search", parents=[common], help="run (or resume) a study of real training trials and export the best config")
    s.add_argument("model_file", help="Python file defining a LightningModule (and usually a LightningDataModule)")
    s.add_argument(
        "--trials",
        type=_positive_int,
        default=opt["trials"],
        help=f"trials this run adds (default {opt['trials']}; the first of a new study is the baseline)",
    )
    s.add_argument("--model", dest="model_class", help="LightningModule class to use when the file defines several")
    s.add_argument("--data", dest="data_class", help="LightningDataModule class to use when the file defines several")
    s.add_argument("--config", dest="config_file", help="LightningCLI YAML with your own trainer:/model:/data: values (the baseline)")
    s.add_argument(
        "--cli-script",
        help="your LightningCLI script (its subclass's links and defaults, and the export's run line; "
        "default: found beside the model file)",
    )
    s.add_argument("--space", dest="space_file", help="search space YAML (default: search_spaces/default.yaml)")
    s.add_argument("--objective", choices=None, help="throughput (default), time-to-quality, goodput, or pareto (see docs/objectives.md)")
    s.add_argument(
        "--loss-tolerance",
        type=_number,
        help=f"allowed worsening of the final loss vs the baseline, a fraction (default {DEFAULTS['loss_tolerance']})",
    )
    s.add_argument(
        "--monitor", help=f"metric the module logs to judge convergence (default {DEFAULTS['monitor']}; train loss if not logged)"
    )
    s.add_argument("--mode", help="min (default) or max: whether a lower or higher --monitor is better")
    s.add_argument("--samples", type=_positive_int, help=f"training samples per trial, over all devices (default {DEFAULTS['samples']})")
    s.add_argument("--trial-timeout", type=_number, help=f"wall-clock cap per trial in seconds (default {DEFAULTS['trial_timeout']:g})")
    s.add_argument("--devices", type=_positive_int, help="devices per trial (default: every GPU; 1 on a CPU-only machine); >1 runs DDP")
    s.add_argument(
        "--num-nodes", type=_positive_int, help="nodes per trial (Lightning's num_nodes; default 1); see autotune worker --node-rank"
    )
    _add_search_run(s)


def _add_search_run(s: argparse.ArgumentParser) -> None:
    """``autotune search``'s flags for where the study lives and how the search runs."""
    from autotune.study.options import DEFAULT_CONFIRM, DEFAULTS, ENV_CONFIRM, option_defaults

    opt = option_defaults()
    _add_node(s)
    _add_storage(s)
    s.add_argument("--study-name", help="study name (default: the model file's stem, or its folder's name for model.py)")
    s.add_argument("--out", help="path of the exported YAML (default: studies/<study>.best.yaml)")
    s.add_argument("--seed", type=_positive_int, help=f"seed of the sampler and of training (default {DEFAULTS['seed']})")
    s.add_argument(
        "--jobs", type=_positive_int, default=opt["jobs"], help=f"trials at once, each on its own GPUs or CPU cores (default {opt['jobs']})"
    )
    s.add_argument(
        "--memory-limit",
        type=_number,
        help="GiB each trial may use (default: the GPU's memory; on a CPU, give it to fit the memory model against host RAM)",
    )
    s.add_argument(
        "--memory-margin",
        type=_number,
        default=opt["memory_margin"],
        help=f"fraction of --memory-limit kept free (default {opt['memory_margin']})",
    )
    s.add_argument(
        "--pruner",
        help="median (default), percentile or none: stop trials clearly worse than the completed ones at "
        "25/50/75%% of their samples (docs/objectives.md)",
    )
    s.add_argument(
        "--pruner-startup",
        type=_positive_int,
        default=opt["pruner_startup"],
        help=f"completed trials before any pruning (default {opt['pruner_startup']})",
    )
    s.add_argument(
        "--enqueue", action="append", metavar="FILE", help="a known config to try first (LightningCLI YAML, e.g. an export); repeatable"
    )
    s.add_argument(
        "--search",
        help="staged (default for throughput and goodput): short runs of the system knobs, then full runs of "
        "lr and accumulation on the fastest; or flat: every trial samples every knob at full budget (docs/search.md)",
    )
    s.add_argument("--sampler", help="tpe (default, multivariate TPE), gp, cmaes, random or grid (every knob discrete)")
    s.add_argument(
        "--confirm",
        type=_positive_int,
        help="race the K best configs, best first, against the baseline in paired runs before recommending "
        f"(default {DEFAULT_CONFIRM}, or ${ENV_CONFIRM}; 0 turns it off; docs/search.md)",
    )
    s.add_argument(
        "--confirm-pairs",
        "--confirm-repeats",
        dest="confirm_repeats",
        metavar="PAIRS",
        type=_positive_int,
        default=opt["confirm_repeats"],
        help=f"most pairs of runs per race (default {opt['confirm_repeats']}, at least 3)",
    )
    s.add_argument(
        "--confirm-samples",
        type=_positive_int,
        help="training samples per paired run (default: what fits 5 pairs of the best config in --confirm-share)",
    )
    s.add_argument(
        "--confirm-share",
        type=_number,
        default=opt["confirm_share"],
        help=f"most of the run's wall time the paired runs take (default {opt['confirm_share']}: 20%%)",
    )
    s.add_argument("--cold", action="store_true", help="start each trial as a fresh Python process instead of forking a warm one")
    s.add_argument("--quiet", action="store_true", help="print only warnings and the summary")


def _add_study_commands(sub, common: argparse.ArgumentParser) -> None:
    """``show``, ``export``, ``report``, ``worker`` and ``dashboard``."""
    from autotune.study.options import option_defaults

    opt = option_defaults()
    for name, help_text in (
        ("show", "print the trials of a study"),
        ("export", "write the recommended config of a study as LightningCLI YAML"),
    ):
        p = sub.add_parser(name, parents=[common], help=help_text)
        p.add_argument("study", help="study name (with --storage), or a study database path such as studies/digits.db")
        _add_storage(p)
        if name == "show":
            p.add_argument("trial", nargs="?", type=_trial_number, help="a trial number: show only that trial")
            p.add_argument("--format", choices=("table", "json", "yaml"), default="table", help="json and yaml hold every trial in full")
            p.add_argument(
                "--log",
                action="store_true",
                help="print the trial's own output instead (stdout and stderr, its last 32 KiB); needs a trial number",
            )
            rows = p.add_mutually_exclusive_group()
            rows.add_argument(
                "--limit",
                type=_positive_int,
                metavar="N",
                help="rows of the table: the recommended trial, the baseline, then the best by the objective (default 25)",
            )
            rows.add_argument("--all", action="store_true", help="a table row for every trial")
        else:
            p.add_argument("--out", help="path of the YAML (default: studies/<study>.best.yaml)")

    r = sub.add_parser("report", parents=[common], help="write an HTML report of a study with plotly figures (and PNGs)")
    r.add_argument("study", help="study name (with --storage), or a study database path such as studies/digits.db")
    _add_storage(r)
    r.add_argument("--out", help="path of the HTML file (default: studies/<study>.report.html, beside the database)")
    r.add_argument("--png", metavar="DIR", help="also write every figure as DIR/<figure>.png (needs kaleido and Chrome/Chromium)")

    w = sub.add_parser("worker", parents=[common], help="join a study from this machine and run its queued trials (shared budget)")
    _add_storage(w)
    w.add_argument("--study-name", help="the study (needed when the storage holds several)")
    w.add_argument("--timeout", type=_number, help="stop taking new trials after this many seconds")
    w.add_argument("--jobs", type=_positive_int, default=opt["jobs"], help=f"trials at once on this machine (default {opt['jobs']})")
    w.add_argument("--cold", action="store_true", help="start each trial as a fresh Python process")
    _add_node(w)
    w.add_argument("--quiet", action="store_true", help="print only warnings and the summary")

    d = sub.add_parser("dashboard", parents=[common], help="open a study storage in optuna-dashboard on 127.0.0.1")
    d.add_argument(
        "storage_target", nargs="?", metavar="DB_PATH_OR_STORAGE_URL", help="default: $AUTOTUNE_STORAGE or the only studies/*.db"
    )
    d.add_argument("--port", type=_positive_int, default=8080)
    d.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")

    g = sub.add_parser("storage-proxy", parents=[common], help="serve a study database to many workers through Optuna's gRPC proxy")
    g.add_argument("--storage", help="the database to serve (default: $AUTOTUNE_STORAGE); workers then give --storage grpc://HOST:PORT")
    g.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0: every machine that can reach this one)")
    g.add_argument("--port", type=_positive_int, default=13000)


def _add_node(p) -> None:
    p.add_argument("--node-rank", type=int, help="this node's rank in a multi-node trial (default $NODE_RANK, else $SLURM_NODEID, else 0)")
    p.add_argument(
        "--node-group", help="name shared by the nodes that train the same trials (default $AUTOTUNE_NODE_GROUP, else $SLURM_JOB_ID)"
    )


def _study_target(study: str, storage: str | None) -> tuple[str | None, str]:
    """(study name or None, storage URL) from a study argument that may be a name, a storage URL, or the
    path of a SQLite or journal file."""
    from autotune.storage_url import JOURNAL_SCHEME, url_of_file
    from autotune.study import resolve_storage

    if "://" in study or study.startswith(JOURNAL_SCHEME):
        return None, study
    if study.endswith(".db") or "/" in study or os.sep in study:
        if not Path(study).is_file():
            raise UsageError(f"study database {study!r} does not exist")
        return None, url_of_file(Path(study))
    return study, resolve_storage(storage, study)


def _cmd_search(args) -> int:
    from autotune.report import make_ui
    from autotune.study import SearchOptions, run_search

    opts = SearchOptions(**{k: getattr(args, k) for k in SearchOptions.__dataclass_fields__ if hasattr(args, k)})
    ui = make_ui(quiet=args.quiet)
    try:
        result = run_search(opts, ui)
    finally:
        ui.stop()
    from autotune.study import load_study
    from autotune.study.settings import settings_of

    try:
        study, settings = (
            (result.study, settings_of(result.study)) if result.study is not None else load_study(result.study_name, result.storage)
        )
        ui.summary(study, settings, result.recommended, result.baseline, result.export_path)
    except KeyboardInterrupt:  # the search is done: say where its results are, not how to resume it
        raise result.interrupted_summary() from None
    return 0


def _cmd_worker(args) -> int:
    from autotune.report import make_ui
    from autotune.study import ENV_STORAGE, load_study, run_worker

    url = args.storage or os.environ.get(ENV_STORAGE)
    if not url and args.study_name:  # as `search` does: the study's SQLite file under studies/
        from autotune.study.options import default_storage

        url = default_storage(args.study_name)
    if not url:
        raise UsageError(
            f"autotune worker needs the study: give --study-name NAME (storage sqlite:///studies/NAME.db), "
            f"--storage URL, or set ${ENV_STORAGE}"
        )
    ui = make_ui(quiet=args.quiet)
    try:
        result = run_worker(
            url,
            args.study_name,
            ui,
            jobs=args.jobs,
            cold=args.cold,
            timeout=args.timeout,
            node_rank=args.node_rank,
            node_group=args.node_group,
        )
    finally:
        ui.stop()
    study = result.study if result.study is not None else load_study(result.study_name, result.storage)[0]
    ui.info(f"worker ran {result.trials_run} trial(s); the study has {len(study.get_trials(deepcopy=False))}")
    return 0


def _cmd_show(args) -> int:
    from autotune.show import SHOW_LIMIT, check_show_args, show_study
    from autotune.study import load_study

    check_show_args(args)
    name, url = _study_target(args.study, args.storage)
    study, settings = load_study(name, url)
    limit = None if args.all else args.limit or SHOW_LIMIT
    show_study(study, settings, args.trial, args.format, limit, args.log)
    return 0


def _cmd_export(args) -> int:
    from autotune.study import (
        default_export_path,
        export_study,
        load_study,
        recommendation,
    )
    from autotune.study.digest import digest_trials, full_trials

    name, url = _study_target(args.study, args.storage)
    study, settings = load_study(name, url)
    # the queries over every trial read digests; the two trials exported are read in full
    every = digest_trials(study)
    recommended, baseline = recommendation(study, settings, every)
    if recommended is None:
        raise AutotuneError(f"study {study.study_name!r} has no feasible complete trial to export yet")
    out = Path(args.out) if args.out else default_export_path(url, study.study_name)
    recommended, baseline = full_trials(study, [recommended, baseline])
    export_study(study, settings, recommended, baseline, out, url, trials=every)
    print(f"trial {recommended.number} written to {out}")
    return 0


def _cmd_report(args) -> int:
    from autotune.html_report import report_trials, write_report
    from autotune.report_png import write_pngs
    from autotune.study import default_export_path, load_study, mask_url, recommendation
    from autotune.study.digest import full_trials
    from autotune.study.options import file_stem

    if args.out is not None and not args.out.strip():
        raise UsageError("--out is empty; give a file path such as report.html, or leave --out out")
    if args.png is not None and (not args.png.strip() or (Path(args.png).exists() and not Path(args.png).is_dir())):
        raise UsageError(f"--png {args.png!r} is not a folder; give a folder for the PNG files")

    name, url = _study_target(args.study, args.storage)
    study, settings = load_study(name, url)
    # every trial as digests (the figures' few attributes); the recommended trial and the baseline in full
    every = report_trials(study)
    recommended, baseline = full_trials(study, list(recommendation(study, settings, every)))
    out = Path(args.out) if args.out else default_export_path(url, study.study_name).with_name(f"{file_stem(study.study_name)}.report.html")
    figures = write_report(study, settings, out, recommended, baseline, storage_label=f"storage: {mask_url(url)}", trials=every)
    drawn = [n for n, f in figures.items() if not isinstance(f, str)]
    print(f"report of study {study.study_name!r} ({len(drawn)} of {len(figures)} figures) written to {out}")
    if args.png:
        for path in write_pngs(figures, Path(args.png)):
            print(f"  {path}")
    return 0


def _cmd_dashboard(args) -> int:
    from autotune.dashboard import serve, storage_for_dashboard
    from autotune.study import mask_url

    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be in 1..65535, got {args.port}")
    url = storage_for_dashboard(args.storage_target)
    serve(
        url,
        host=args.host,
        port=args.port,
        announce=lambda: print(f"optuna-dashboard for {mask_url(url)} at http://{args.host}:{args.port}/ (Ctrl-C to stop)", flush=True),
    )
    return 0


def _cmd_storage_proxy(args) -> int:
    from autotune.storage_proxy import listening_line, serve_proxy
    from autotune.study import ENV_STORAGE

    url = args.storage or os.environ.get(ENV_STORAGE)
    if not url:
        raise UsageError(f"autotune storage-proxy serves a database: give --storage URL or set ${ENV_STORAGE}")
    serve_proxy(url, host=args.host, port=args.port, announce=lambda: print(listening_line(url, args.host, args.port), flush=True))
    print(f"storage proxy on {args.host}:{args.port} stopped", file=sys.stderr)
    return 0


_COMMANDS = {
    "search": _cmd_search,
    "worker": _cmd_worker,
    "show": _cmd_show,
    "export": _cmd_export,
    "report": _cmd_report,
    "dashboard": _cmd_dashboard,
    "storage-proxy": _cmd_storage_proxy,
}


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` makes a running autotune print every thread's stack to stderr and go on
    (:func:`faulthandler.register`): how to see where a search that does not answer is waiting."""
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


def _print_detail(error: AutotuneError) -> None:
    """``--debug``: the traceback of the child process an error came from, before this process's own."""
    if error.detail:
        print(f"in the child process:\n{error.detail.rstrip()}\n", file=sys.stderr)


#: Exit code when the reader of the output went away (``autotune show | head``): 128 + SIGPIPE, what a
#: shell reports for a tool that SIGPIPE ended (``yes | head``), so ``set -o pipefail`` sees the output cut.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Returns the exit code: 0 ok, 1 failure, 2 bad input, 130 Ctrl-C, 143 SIGTERM, 141
    (:data:`EXIT_BROKEN_PIPE`) when the reader of its standard output went away (``| head``): it stops
    quietly, without a traceback, as a tool that SIGPIPE ends (the recipe of Python's ``signal`` docs,
    "Note on SIGPIPE")."""
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse's --help, --version and bad flags
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # what is still buffered fails here, while the broken pipe can be told apart
        return code
    except BrokenPipeError:
        from autotune.errors import CLOSED_OUTPUT, stopped_by

        # (a search stopped for a closed output has pointed standard output at /dev/null already: its
        # stop message then failed on standard error, the same pipe under `2>&1 | head`)
        if stopped_by() != CLOSED_OUTPUT and not stdout_reader_gone():
            raise  # another pipe (a trial process, a database connection): a real error
        # the interpreter's own flush at exit would fail again and print "Exception ignored ..."
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                if stream is sys.stdout or reader_gone(stream):
                    os.dup2(devnull, stream.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    """:func:`main` without the handling of a closed standard output."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from autotune.errors import CLOSED_OUTPUT, stop_on_closed_output, stop_on_sigterm, stopped_by
    from autotune.study import Interrupted

    _stacks_on_sigusr1()
    if args.command in ("search", "worker", "storage-proxy"):  # trials are stored as interrupted, the proxy says it stopped
        stop_on_sigterm()
    if args.command in ("search", "worker"):
        stop_on_closed_output()
    stop_code = {"Ctrl-C": 130, CLOSED_OUTPUT: EXIT_BROKEN_PIPE}
    try:
        return _COMMANDS[args.command](args)
    except Interrupted as e:
        print(f"\n{e}", file=sys.stderr)
        return stop_code.get(stopped_by(), 143)
    except KeyboardInterrupt:
        print("\ninterrupted" if stopped_by() == "Ctrl-C" else f"\nstopped by {stopped_by()}", file=sys.stderr)
        return stop_code.get(stopped_by(), 143)
    except AutotuneError as e:  # bad input (exit 2) or a failure (exit 1); --debug adds the tracebacks, same exit code
        if args.debug:
            import traceback

            _print_detail(e)
            traceback.print_exc()
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except Exception as e:
        from autotune.storage import PROXY_LOST, is_proxy_unreachable, is_transient

        if not args.debug and is_proxy_unreachable(e):
            print(f"autotune: error: {PROXY_LOST}", file=sys.stderr)
            return 1
        if args.debug or not is_transient(e):
            raise
        print(
            "autotune: error: the study database stayed unreachable longer than $AUTOTUNE_STORAGE_RETRY seconds "
            f"({type(e).__name__}); every finished trial is stored: run the same command again once it is back "
            "(trials that were running go stale and are retried)",
            file=sys.stderr,
        )
        return 1
