"""The live view of a running search on a terminal (rich): progress, running trials, finished trials."""

from __future__ import annotations

from typing import Any

from autotune.progress import read_progress
from autotune.report import ConsoleUI, _fmt, sort_key, trial_rows
from autotune.table_fit import TableColumn, fitted_table

__all__ = ["LiveUI"]


class LiveUI(ConsoleUI):
    """A live view of a running search (rich): a progress bar over the run's trials with elapsed time
    and ETA, each running trial's config with its samples/s so far (read from the trial's progress
    preview, after its warm-up), and a table of finished trials with the fastest feasible one in bold
    green. Messages print above it; :meth:`stop` leaves the final frame on screen.
    """

    #: Finished trials shown in the table (the most recent ones).
    ROWS = 15

    def __init__(self, console=None):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        super().__init__(quiet=False)
        if console is not None:
            self.console = console
        self.progress = Progress(
            TextColumn("trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            auto_refresh=False,
        )
        self.task = None
        self.running: dict[int, dict[str, Any]] = {}
        self.finished: list[dict[str, Any]] = []
        self.live = None
        self.objective = "throughput"

    def search_started(self, settings, trials: int) -> None:
        from rich.live import Live

        super().search_started(settings, trials)
        self.objective = settings.objective
        self.task = self.progress.add_task("trials", total=trials)
        self.live = Live(self, console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def trial_started(self, number: int, config, is_baseline: bool) -> None:
        self.running[number] = {"config": config, "baseline": is_baseline, "path": None}
        if self.live is None:  # no live view (autotune worker): lines
            super().trial_started(number, config, is_baseline)

    def trial_progress(self, number: int, path: str) -> None:
        self.running.setdefault(number, {"config": None, "baseline": False})["path"] = path

    def stage(self, message: str, trials: int) -> None:
        self.info(message)
        if self.task is not None:
            task = self.progress.tasks[0]
            self.progress.update(self.task, total=(task.total or 0) + trials)

    def trial_finished(self, trial) -> None:
        self.running.pop(trial.number, None)
        row = {
            **trial_rows(None, trials=[trial])[0],
            "baseline": bool(trial.user_attrs.get("baseline")),
            "pair_of": trial.user_attrs.get("pair_of"),
        }
        self.finished.append(row)
        if self.task is not None:
            self.progress.advance(self.task)
        if self.live is None:
            super().trial_finished(trial)
        else:
            self._busy(trial)  # printed above the live view

    def stop(self) -> None:
        if self.live is not None:
            self.live.refresh()
            self.live.stop()
            self.live = None

    def summary(self, study, settings, recommended, baseline, export_path) -> None:
        self.stop()
        super().summary(study, settings, recommended, baseline, export_path)

    def _running_lines(self):
        from rich.text import Text

        lines = []
        for number, info in sorted(self.running.items()):
            config = info.get("config")
            label = f"trial {number}{' (baseline)' if info.get('baseline') else ''}: "
            if config is not None:
                lr = f"{config.lr:.3g}" if config.lr is not None else "-"
                label += (
                    f"batch_size={config.batch_size} precision={config.precision} "
                    f"accumulate_grad_batches={config.accumulate_grad_batches} num_workers={config.num_workers} lr={lr}"
                )
            preview = read_progress(info.get("path"))
            if preview is None:
                status = "starting"
            elif preview.get("samples_per_sec"):
                status = f"{preview['samples_per_sec']:,.0f} samples/s so far, batch {preview['batches']}/{preview['planned']}"
            else:
                status = f"warming up, batch {preview['batches']}/{preview['planned']}"
            lines.append(Text.assemble(("running ", "cyan"), label, " | ", (status, "bold")))
        return lines

    #: The finished trials' columns in the order shown: (row key, header, rank). When the table is too
    #: wide for the terminal, the highest rank is left out first (:func:`autotune.table_fit.fitted_table`):
    #: kept longest are #, samples/s, status, batch, precision, loss, lr, accum, workers.
    COLUMNS = (
        ("number", "#", 0),
        ("batch_size", "batch", 3),
        ("precision", "precision", 4),
        ("accumulate_grad_batches", "accum", 7),
        ("num_workers", "workers", 8),
        ("lr", "lr", 6),
        ("samples_per_sec", "samples/s", 1),
        ("loss", "loss", 5),
        ("status", "status", 2),
    )

    def _table(self):
        columns = [
            TableColumn(key, label, rank, text=key == "status", right=key not in ("precision", "status"))
            for key, label, rank in self.COLUMNS
        ]
        feasible = [r for r in self.finished if r["state"] == "COMPLETE" and r.get("feasible")]
        best = min(feasible, key=sort_key(self.objective))["number"] if feasible else None
        rows = []
        for row in self.finished[-self.ROWS :]:
            if row["state"] == "COMPLETE":
                status = (
                    ("best so far" if row["number"] == best else "ok")
                    if row.get("feasible")
                    else (
                        "short run"
                        if row.get("feasible") is None and row.get("stage") == "system"
                        else "infeasible: beyond the loss tolerance"
                    )
                )
                if row.get("pair_of") is not None:  # its loss is judged against its pair's, in the race
                    status = "paired run"
                if row.get("baseline"):
                    status += " (baseline)"
            else:
                status = f"{row['state']}: {row.get('fail_reason') or ''}"
            style = "bold green" if row["number"] == best else ("red" if row["state"] != "COMPLETE" else None)
            rows.append(([status if c.key == "status" else _fmt(c.key, row.get(c.key)) for c in columns], style))
        table = fitted_table(columns, rows, self.console.width, title="finished trials")
        table.title_justify = "left"
        return table

    def __rich__(self):
        from rich.console import Group

        parts = [self.progress.make_tasks_table(self.progress.tasks), *self._running_lines()]
        if self.finished:
            parts.append(self._table())
        return Group(*parts)
