"""Terminal output: per-trial lines while a search runs, and trial tables (rich)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import FailKind
from autotune.summary import (
    confirmation_lines,
    flops_line,
    frontier_lines,
    input_bound_line,
    longer_line,
    mfu_text,
    quality_line,
    samples_ratio,
)
from autotune.table_fit import TableColumn, fitted_table, terminal_console

if TYPE_CHECKING:
    from autotune.study.settings import StudySettings


def _escape(text: str) -> str:
    """``text`` with rich's markup escaped (a reason may quote brackets, as gloo's ``[file.cc:553]``)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


__all__ = ["ConsoleUI", "make_ui", "render_rows", "short_run", "sort_key", "trial_rows"]

#: The trial table's columns in the order shown: (row key, header, rank). A table too wide for the
#: terminal leaves out the highest rank first (see :func:`autotune.table_fit.fitted_table`), so the priority, most kept
#: first, is: #, state, samples/s, to target, batch, precision, loss, feasible, note, lr, accum, MFU,
#: eff. batch, workers, other knobs.
_COLUMNS = (
    ("number", "#", 0),
    ("state", "state", 1),
    ("batch_size", "batch", 4),
    ("precision", "precision", 5),
    ("accumulate_grad_batches", "accum", 10),
    ("num_workers", "workers", 13),
    ("lr", "lr", 9),
    ("effective_batch_size", "eff. batch", 12),
    ("samples_per_sec", "samples/s", 2),
    ("mfu", "MFU", 11),
    ("loss", "loss", 6),
    ("to_target", "to target", 3),
    ("feasible", "feasible", 7),
    ("other", "other knobs", 14),
    ("note", "note", 8),
)
#: The config's columns: one whose value is the same in every row of a table of several is left out
#: first when the table is too wide (helper-28's 120-column terminal lost the searched workers column
#: while a precision of 32-true in every row stayed).
_KNOB_COLUMNS = frozenset({"batch_size", "precision", "accumulate_grad_batches", "num_workers", "lr", "effective_batch_size"})
#: Columns of free text (wrapped at spaces); the others are one value each, kept on one line whole.
_TEXT_COLUMNS = frozenset({"note", "other", "status"})


def change_and_limit(change: float, limit: float) -> tuple[str, str]:
    """A relative change and its limit as signed percentages, with as many decimals (0 to 3) as tell
    them apart: ``(0.1504, 0.15)`` is ``("+15.04%", "+15.00%")``, not ``+15%`` against ``+15%``, which
    read as a pass (helper-28's failed loss sanity check)."""
    said = (f"{change:+.0%}", f"{limit:+.0%}")
    for decimals in range(1, 4):
        if said[0] != said[1]:
            break
        said = (f"{change:+.{decimals}%}", f"{limit:+.{decimals}%}")
    return said


def _loss_change(attrs: Mapping[str, Any], study_attrs: Mapping[str, Any]) -> str:
    """Why an infeasible trial is: ``"loss +46% vs the baseline's (limit +15%)"`` (the limit a config of
    the baseline's math is held to is the sanity check's wider one; under ``--mode max`` the metric's
    name: ``"val_acc -15% vs the baseline's (limit -5%)"``), or ``""`` when not known."""
    from autotune.study.math_class import PRESERVING, sanity_tolerance
    from autotune.study.settings import BASELINE_ATTR, SETTINGS_ATTR

    base, settings = (study_attrs.get(BASELINE_ATTR) or {}).get("loss"), study_attrs.get(SETTINGS_ATTR) or {}
    loss, tolerance = attrs.get("loss"), settings.get("loss_tolerance")
    if loss is None or not base or tolerance is None or not (math.isfinite(float(loss)) and math.isfinite(float(base))):
        return ""
    if attrs.get("math") == PRESERVING:
        tolerance = sanity_tolerance(tolerance)
    sign = -1 if settings.get("mode") == "max" else 1
    change, limit = change_and_limit(float(loss) / float(base) - 1, sign * tolerance)
    name = "loss" if sign > 0 else attrs.get("loss_source") or "score"  # a score under --mode max (helper-29: val_acc)
    return f"{name} {change} vs the baseline's (limit {limit})"


def trial_rows(study, recommended_number: int | None = None, full: bool = False, trials=None) -> list[dict[str, Any]]:
    """One plain dict per trial: config, figures, state and failure reason (for tables, JSON, YAML).

    With ``full``, every user attribute of the trial is included too (loss curve, rank configs,
    timings, ``log_tail`` of a failed trial, ...), but its output (``log``, long). ``trials`` (frozen trials) replaces the study's.
    """
    from autotune.study.races import uncounted_runs
    from autotune.study.settings import SETTINGS_ATTR

    rows = []
    study_attrs: dict[str, Any] | None = None  # read once, if a failed trial has no reason of its own
    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    uncounted = uncounted_runs(trials)
    for t in trials:
        attrs = t.user_attrs
        config = attrs.get("config", {})
        reason = attrs.get("fail_reason")
        if reason is None and t.state.name == "FAIL" and study is not None:
            # a trial failed as stale has its reason on the study (its process was gone)
            study_attrs = study.user_attrs if study_attrs is None else study_attrs
            reason = study_attrs.get(f"stale_trial_{t.number}")
        note = reason or ""
        if attrs.get("baseline"):
            note = ("baseline " + note).strip()
        if "confirm_of" in attrs:
            pair = f" (pair {attrs['pair_index']} of #{attrs['pair_of']})" if "pair_index" in attrs else ""
            if study is not None and attrs.get("confirm_samples") is not None:
                # a shorter paired run than the search's (a same-math race): its loss is not the search trials' loss
                study_attrs = study.user_attrs if study_attrs is None else study_attrs
                if int(attrs["confirm_samples"]) != int((study_attrs.get(SETTINGS_ATTR) or {}).get("samples") or 0):
                    pair = (
                        f"{pair[:-1]}, {int(attrs['confirm_samples']):,} samples)"
                        if pair
                        else f" ({int(attrs['confirm_samples']):,} samples)"
                    )
            if t.number in uncounted:
                pair = f"{pair[:-1]}; not counted: the pair's other run ran in a later search run)" if pair else pair
            note = (f"confirms #{attrs['confirm_of']}{pair} " + note).strip()
        if attrs.get("stopped_at_target") and attrs.get("samples_seen"):  # its loss is a shorter run's
            note = f"{note} stopped at the loss target ({int(attrs['samples_seen']):,} samples)".strip()
        if "duplicate_of" in attrs:
            note = f"duplicate of #{attrs['duplicate_of']} (not run) " + note
        if attrs.get("stage") == "system" and attrs.get("feasible") is None and "trial_samples" in attrs:
            note = (f"short ({attrs['trial_samples']} samples) " + note).strip()
        if attrs.get("math") == "preserving" and not attrs.get("baseline"):
            note = ("same math " + note).strip()
        sanity = attrs.get("loss_sanity") or {}
        if sanity.get("ok") is False:
            change, limit = change_and_limit(sanity["change"], sanity["tolerance"])
            if attrs.get("feasible") is not None:
                # a run judged at full budget: its monitored metric decided, the training-loss check only informs
                note = (
                    f"{note} training loss {change} vs the baseline's at {sanity['samples']} samples (sanity limit "
                    f"{limit}; a full-budget run is judged on {attrs.get('loss_source') or 'its --monitor'})"
                ).strip()
            else:
                note = f"{note} loss sanity failed: {change} against the baseline's at {sanity['samples']} samples (limit {limit})".strip()
        if attrs.get("feasible") is False and t.state.name == "COMPLETE" and study is not None:
            study_attrs = study.user_attrs if study_attrs is None else study_attrs
            note = (f"{note} {_loss_change(attrs, study_attrs)}").strip()
        if "seeded_from" in attrs:
            note = ("--enqueue " + note).strip()
        if t.number == recommended_number:  # a race's winner: its paired run closest to its median, not its fastest
            note = ("recommended " + ("(its median paired run) " if "pair_of" in attrs else "") + note).strip()
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                **{k: config.get(k) for k in ("batch_size", "precision", "accumulate_grad_batches", "num_workers", "lr", "devices")},
                "effective_batch_size": attrs.get("effective_batch_size"),
                "samples_per_sec": attrs.get("samples_per_sec"),
                "device/samples_per_sec": attrs.get("device/samples_per_sec"),
                "step_time_median": attrs.get("step_time_median"),
                "data_wait_fraction": attrs.get("data_wait_fraction"),
                "peak_memory_gib": attrs.get("peak_memory_gib"),
                # unknown when the peak was raised to this trial's own FLOP/s (see autotune.measure.merge_ranks)
                "mfu": attrs.get("mfu") if attrs.get("peak_flops_source") != "achieved" else None,
                "model_flops_per_sec": attrs.get("model_flops_per_sec"),
                "goodput": attrs.get("goodput"),
                "gradient_noise_scale": attrs.get("gradient_noise_scale"),
                "loss": attrs.get("loss"),
                "loss_source": attrs.get("loss_source"),
                "time_to_target": attrs.get("time_to_target"),
                "target_reached": attrs.get("target_reached"),
                "to_target": _to_target(attrs),
                "feasible": attrs.get("feasible"),
                "fail_kind": attrs.get("fail_kind"),
                "fail_reason": reason,
                "other": other_knobs(config),
                "applied": attrs.get("applied"),
                "stage": attrs.get("stage"),
                "math": attrs.get("math"),
                "loss_sanity": attrs.get("loss_sanity"),
                "note": note,
            }
        )
        if full:
            # (the trial's output is left out: `autotune show STUDY N --log` prints it)
            rows[-1] = {**rows[-1], "params": dict(t.params), "user_attrs": {k: v for k, v in attrs.items() if k != "log"}}
    return rows


def other_knobs(config: Mapping[str, Any]) -> str | None:
    """The extended space's knobs a config sets, compactly: ``"2 dev ddp, compile=default, model.hidden=16"``."""
    parts = []
    if int(config.get("devices", 1)) > 1 or config.get("strategy") not in (None, "auto"):
        parts.append(f"{config.get('devices', 1)} dev {config.get('strategy', 'auto')}")
    for key in ("pin_memory", "prefetch_factor", "compile", "channels_last", "float32_matmul_precision"):
        if config.get(key) is not None and not (key in ("compile", "channels_last") and config[key] is False):
            parts.append(f"{key}={config[key]}")
    for section in ("model", "data"):
        for name, value in (config.get(f"{section}_args") or {}).items():
            parts.append(f"{section}.{name}={value:.4g}" if isinstance(value, float) else f"{section}.{name}={value}")
    return ", ".join(parts) or None


def _to_target(attrs: Mapping[str, Any]) -> str | None:
    """Time to the baseline's loss for tables: ``"4.9 s"``, ``"~14 s"`` (extrapolated), ``"never"``, or
    ``"no curve"`` when there was no target: the baseline had no training loss curve (its
    ``training_step`` returned no loss, and its ``--monitor`` metric was not logged per batch)."""
    if "target_reached" not in attrs:
        return None
    seconds = attrs.get("time_to_target")
    if seconds is None and attrs.get("loss_target") is None:
        return "no curve"
    if seconds is None or seconds > 1e6:
        return "never"
    return f"{'' if attrs['target_reached'] else '~'}{seconds:.3g} s"


def short_run(row: Mapping[str, Any]) -> bool:
    """Whether a row (or a trial's user attributes) is a short screening run of ``--search staged``
    (stage 1: fewer samples, its loss not judged, never recommended)."""
    return row.get("stage") == "system" and row.get("feasible") is None


def sort_key(objective: str):
    """Key ordering trial rows best first under ``objective`` (failed and unmeasured rows last; short
    screening runs after every full-budget run, their loss not judged; among full-budget runs, those
    that failed the loss tolerance after the others: "best" is what could be recommended, and a new
    user's table of a vision transformer was headed by ten infeasible larger batches above its baseline)."""
    if objective == "time-to-quality":

        def inner(row):
            seconds = row.get("time_to_target")
            return (not row.get("target_reached"), seconds if seconds is not None else math.inf)

    else:
        figure = "goodput" if objective == "goodput" else "samples_per_sec"

        def inner(row):
            return -(row.get(figure) or 0)

    return lambda row: (short_run(row), row.get("feasible") is False, inner(row))


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if key == "lr":
            return f"{value:.3g}"
        if key == "samples_per_sec":
            return f"{value:,.0f}"
        if key == "mfu":  # a table cell: below 0.01% only its order (the summary line gives two digits)
            return "<0.01%" if 0 < value < 1e-4 else mfu_text(value)
        return f"{value:.4g}"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value)


def _cell(key: str, row: Mapping[str, Any]) -> str:
    """A table cell: the samples/s of a trial that did not complete (what it measured before it failed
    or was stopped) in parentheses, since it is no result."""
    text = _fmt(key, row.get(key))
    return f"({text})" if key == "samples_per_sec" and text and row.get("state") != "COMPLETE" else text


def render_rows(rows: Sequence[Mapping[str, Any]], fmt: str, console=None, title: str | None = None) -> str | None:
    """Print rows as a rich table (``fmt="table"``), or return them as JSON or YAML text."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2, default=str)
    if fmt == "yaml":
        import yaml

        class _NoAliases(yaml.SafeDumper):  # a dict shared by two fields is written out twice, not as &id001/*id001
            def ignore_aliases(self, data):
                return True

        return yaml.dump(list(map(dict, rows)), Dumper=_NoAliases, sort_keys=False)
    console = console or terminal_console()
    # the loss column is named after what it holds when every row's figure is the same metric (val_acc under --monitor val_acc)
    sources = {row.get("loss_source") for row in rows if row.get("loss") is not None}
    loss_label = str(sources.pop()) if len(sources) == 1 and None not in sources else "loss"
    loss_label = "train_loss" if loss_label == "autotune/train_loss" else loss_label  # the loss training_step returned
    same = {key for key in _KNOB_COLUMNS if len(rows) > 1 and len({_cell(key, row) for row in rows}) == 1}
    columns = [
        TableColumn(
            key,
            loss_label if key == "loss" else label,
            rank + 20 if key in same else rank,
            text=key in _TEXT_COLUMNS,
            right=key not in ("state", "precision", "note", "other"),
        )
        for key, label, rank in _COLUMNS
    ]
    cells = [
        (
            [_cell(c.key, row) for c in columns],
            "bold green" if "recommended" in (row.get("note") or "") else ("dim" if row["state"] != "COMPLETE" else None),
        )
        for row in rows
    ]
    console.print(fitted_table(columns, cells, console.width, title=title, more="autotune show --format json"), soft_wrap=False)
    return None


class ConsoleUI:
    """Messages of a running search: one line per trial start and end, warnings, the summary.

    Args:
        quiet: Print only warnings and the final summary.
    """

    def __init__(self, quiet: bool = False):
        self.console = terminal_console()
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {_escape(message)}", soft_wrap=True)  # one line, however long

    def search_started(self, settings: StudySettings, trials: int) -> None:
        def fmt(value: Any) -> str:
            return f"{value:.3g}" if isinstance(value, float) else str(value)

        def knob(k: str, v: Mapping[str, Any]) -> str:
            text = (
                f"{k}=[{', '.join(fmt(c) for c in v['choices'])}]"
                if "choices" in v
                else f"{k}={fmt(v['low'])}..{fmt(v['high'])}{' (log)' if v.get('log') else ''}"
            )
            if "scaling" in v:
                text = text.replace("lr=", "lr_multiplier=", 1) + f" (x baseline lr scaled by effective batch, {v['scaling']})"
            return text

        space = ", ".join(knob(k, v) for k, v in settings.space.items())
        self.info(
            f"objective {settings.objective} (loss tolerance {settings.loss_tolerance:.0%}, monitor {settings.monitor}), "
            f"{settings.samples} training samples per trial, devices={settings.devices}"
            f"{' x ' + str(settings.num_nodes) + ' nodes' if settings.num_nodes > 1 else ''}, {trials} trial(s)"
        )
        self.info(f"space: {space}")

    def trial_started(self, number: int, config, is_baseline: bool) -> None:
        label = " (baseline)" if is_baseline else ""
        lr = f"{config.lr:.3g}" if config.lr is not None else "-"
        self.info(
            f"trial {number}{label}: batch_size={config.batch_size} precision={config.precision} "
            f"accumulate_grad_batches={config.accumulate_grad_batches} num_workers={config.num_workers} lr={lr}"
            + (f" ({other})" if (other := other_knobs(config.to_dict())) else "")
        )

    def trial_progress(self, number: int, path: str) -> None:
        """Where the running trial ``number`` writes its progress preview (the live view reads it)."""

    def stage(self, message: str, trials: int) -> None:
        """A new stage of the run (the confirmation runs) adds ``trials`` trials."""
        self.info(message)

    def stop(self) -> None:
        """End any live display (before the summary or an error message)."""

    def trial_finished(self, trial) -> None:
        attrs = trial.user_attrs
        if trial.state.name == "COMPLETE":
            feasible = "" if attrs.get("feasible", True) else " [infeasible: beyond the loss tolerance]"
            if attrs.get("feasible", True) is None:
                feasible = " [short run: loss not judged]"
            if "pair_of" in attrs:  # its own budget: its loss is judged against its pair's, in the race
                feasible = " [paired run]"
            if "duplicate_of" in attrs:  # nothing ran: the figures are the earlier trial's
                feasible = f" [not run: trial {attrs['duplicate_of']}'s figures, the same config]"
            self.info(
                f"  -> {attrs['samples_per_sec']:,.0f} samples/s, {attrs.get('loss_source')} {attrs['loss']:.4g}, "
                f"step {attrs['step_time_median'] * 1000:.1f} ms, data wait {attrs['data_wait_fraction']:.0%}{feasible}"
            )
        else:
            # a reason quotes the user's exception, whose brackets are no markup; --quiet printed no
            # "trial N:" line before it, so the line names its trial
            head = f"trial {trial.number} " if self.quiet else "  "
            self.console.print(
                f"{head}-> [red]{trial.state.name}[/red]: {_escape(str(attrs.get('fail_reason')))}",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
        self._busy(trial)

    def _busy(self, trial) -> None:
        """One line when ``trial`` ran on a busy machine (:mod:`autotune.contention`); none with ``--quiet``:
        the summary's one busy-machine line (:func:`autotune.contention.busy_run_line`) names the busiest
        trial and how many were busy (helper-34: eight of these lines on a busy machine was not quiet)."""
        from autotune.contention import busy_trial_line

        if self.quiet:
            return
        if line := busy_trial_line(trial):
            self.warn(line)

    def summary(self, study, settings, recommended, baseline, export_path) -> None:
        from autotune.study import BASELINE_ATTR, confirmation, oom_frontier
        from autotune.study.records import speed_of

        every = study.get_trials(deepcopy=False)  # one read for every line below (a server database: one round trip)
        rows = trial_rows(study, recommended.number if recommended else None, trials=every)
        complete = sorted((r for r in rows if r["state"] == "COMPLETE"), key=sort_key(settings.objective))
        # the recommended trial and the baseline always, below the ten best (as `autotune show` keeps them)
        keep = {t.number for t in (recommended, baseline) if t is not None}  # (baseline: its median paired run, when raced)
        keep.add((study.user_attrs.get(BASELINE_ATTR) or {}).get("trial"))  # and the baseline trial itself
        shown = complete[:10] + [r for r in complete[10:] if r["number"] in keep]
        title = f"study {settings.study_name}: best complete trials ({settings.objective})"
        if len(shown) > 10:
            title += ", then the recommended trial and the baseline"
        render_rows(shown, "table", self.console, title=title)
        # (a batch larger than an epoch is not run, and its one line was printed when the bound was found)
        # a pruned trial (stopped early, or not run: a duplicate, a predicted OOM, a failed class) did not fail
        from autotune.study.records import run_again

        again = run_again(every)  # a failed try queued again (interrupted, or a race's paired run): not a measurement lost
        for state, what in (("FAIL", "failed"), ("PRUNED", "pruned or not run")):
            ended = [r for r in rows if r["state"] == state and r["fail_kind"] != FailKind.BATCH_ABOVE_EPOCH]
            if ended:
                self.console.print(
                    f"{len(ended)} trial(s) {what}: "
                    + "; ".join(
                        f"#{r['number']} {r['fail_reason']}" + (f" (run again as #{again[r['number']]})" if r["number"] in again else "")
                        for r in ended[-5:]
                    ),
                    markup=False,
                )
        for line in frontier_lines(oom_frontier(study, every)):
            self.console.print(line, markup=False)
        runs = study.user_attrs.get("runs") or []
        # this process's own run (its run id starts with its pid), not a worker's that finished later
        mine = [r for r in runs if str(r.get("run_id") or "").startswith(f"{os.getpid()}-")]
        if mine:  # its records last, so the line below describes them
            own = mine[-1]["run_id"]
            runs = [r for r in runs if r.get("run_id") != own] + [r for r in runs if r.get("run_id") == own]
        own_trials: set[int] = set()  # this run's trials, where its records list them
        if runs and runs[-1].get("overhead_fraction") is not None:
            run = dict(runs[-1])
            # this run = every record of its run id (a staged search's rounds, its confirmation)
            parts = (
                [r for r in runs if r.get("run_id") == run["run_id"]]
                if run.get("run_id")
                else (runs[-2:] if run.get("stage") == "confirm" and len(runs) > 1 else [run])
            )
            if len(parts) > 1:
                run["trials"] = sum(r["trials"] for r in parts)
                run["wall_seconds"] = sum(r["wall_seconds"] for r in parts)
                training = sum(r["training_seconds"] for r in parts)
                run["overhead_fraction"] = 1.0 - training / (run["wall_seconds"] * run["jobs"]) if run["wall_seconds"] > 0 else 0.0
            own_trials = {int(n) for r in parts for n in r.get("numbers") or ()}
            confirmed = sum(int(r.get("trials") or 0) for r in parts if r.get("stage") == "confirm")
            included = f"its {confirmed} confirmation run(s) included" if confirmed else "no confirmation run"
            self.console.print(
                f"this run: {run['trials']} trial(s) in {run['wall_seconds']:.1f} s of trials, {included} (its start-up and "
                f"model inspection not counted; {run['launch']} trial processes, {run['jobs']} job(s)); "
                f"{run['overhead_fraction']:.0%} of it outside training steps",
                markup=False,
            )
        from autotune.contention import busy_run_line

        if busy := busy_run_line([t for t in every if t.number in own_trials] if own_trials else every, "this run's" if own_trials else ""):
            self.warn(busy)
        from autotune.summary import no_curve_line

        if curve := no_curve_line(every, settings.monitor):
            self.console.print(curve, markup=False)
        if recommended is None:
            for line in confirmation_lines(confirmation(study, settings, every), settings.objective):
                self.console.print(line, markup=False)
            self.console.print("no feasible trial yet: nothing to recommend")
            return
        confirmed = confirmation(study, settings, every)  # read once: the speed, its lines and the training length
        speed = speed_of(confirmed)
        if speed is not None:
            from autotune.summary import ratio_text, timed_caveat

            said = (
                f"(the config of trial {speed['trial']}, confirmed): [bold]"
                + ratio_text(speed["ratio"], speed["low"], speed["high"], speed["pairs"], settings.objective, races=speed.get("races", 1))
                + "[/bold]"
                + timed_caveat(speed)
                if speed["won"]
                else "(the baseline: no candidate was shown better in paired runs): [bold]1.00x[/bold]"
            )
            self.console.print(f"[bold]recommended: trial {recommended.number}[/bold] {said}")
        else:
            from rich.markup import escape

            from autotune.summary import unpaired_text

            if baseline is not None and recommended.number == baseline.number:  # worded as when a confirmation kept it
                self.console.print(
                    f"[bold]recommended: trial {recommended.number}[/bold] (the baseline: no other trial was feasible and faster): [bold]1.00x[/bold]"
                )
            else:
                self.console.print(f"[bold]recommended: trial {recommended.number}[/bold]: {escape(unpaired_text(recommended, baseline))}")
        for maybe_line in (  # str | None (the loop above binds line: str)
            flops_line(recommended),
            quality_line(recommended, baseline),
            *confirmation_lines(confirmed, settings.objective),
            longer_line(confirmed.chosen, samples_ratio(confirmed, every)) if confirmed is not None else None,
        ):
            if maybe_line:
                self.console.print(maybe_line, markup=False)
        advice = input_bound_line(recommended, settings, every)
        if advice:
            self.console.print(f"[yellow]{advice}[/yellow]", highlight=False)
        if export_path is not None:
            self.console.print(f"config written to {export_path}", markup=False)


def make_ui(quiet: bool = False) -> ConsoleUI:
    """:class:`autotune.live.LiveUI` on a terminal, else (pipes, CI logs, ``--quiet``) the line-by-line :class:`ConsoleUI`."""
    console = terminal_console()
    if console.is_terminal and not quiet:
        from autotune.live import LiveUI

        return LiveUI(console)
    ui = ConsoleUI(quiet=quiet)
    ui.console = console
    return ui
