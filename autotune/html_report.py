"""``autotune report``: one self-contained HTML page of plotly figures about a study (and PNGs).

Figures (each a ``plotly.graph_objects.Figure``; Optuna's ``optuna.visualization`` builds the ones
it has):

=====================  ========================================================================
``history``            optimisation history of samples/s (``plot_optimization_history``), short
                       screening runs with a mark of their own
``batch_throughput``   samples/s against per-device batch size (ticks at the batch sizes run), a
                       legend group per precision, a mark per kind of trial (:data:`MARKS`)
``pareto``             samples/s against the final loss of the full-budget trials:
                       ``plot_pareto_front`` for a Pareto study, otherwise a scatter with the Pareto
                       front drawn; the recommendation and the baseline are marked (named as the
                       terminal summary names them), and the loss tolerance is a dashed line
``importances``        parameter importances for samples/s (``plot_param_importances``, PED-ANOVA)
                       over the full-budget trials (:func:`autotune.study.full_budget_trials`), as
                       ``autotune dashboard``'s importance panel computes them
``loss_curves``        training loss against samples seen for the five fastest feasible trials
                       and the baseline (each trial's ``loss_curve``)
``failures``           failed trials counted by failure kind, with their reasons on hover
=====================  ========================================================================

Above :data:`autotune.figure_sample.MAX_DRAWN` trials, the figures with a point per trial
(``history``, ``batch_throughput``, ``pareto``) draw the baseline, the recommended trial, the fastest
feasible trial (and the Pareto front) and a random sample of the others, with a fixed seed, and their
subtitle says how many of how many are drawn; the importances are computed over a sample likewise
(:data:`autotune.importance.MAX_TRIALS`). The study is read once for every figure, as digests
(:func:`report_trials`: the few attributes the figures read of every trial), and the trials whose
loss curves are drawn are then read in full.

A figure that cannot be drawn (too few complete trials, no failure) is replaced by a sentence that
says why. The page embeds plotly.js, so it opens with no network access; the same figures as PNG
files: :func:`autotune.report_png.write_pngs`.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import UsageError

if TYPE_CHECKING:
    from autotune.study.settings import StudySettings

__all__ = ["FIGURE_TITLES", "REPORT_KEYS", "build_figures", "report_trials", "write_report"]

FIGURE_TITLES = {
    "history": "Optimisation history: samples/s per trial",
    "batch_throughput": "Throughput against per-device batch size, by precision",
    "pareto": "Throughput against final loss (Pareto front)",
    "importances": "Parameter importances for throughput",
    "loss_curves": "Training loss against samples seen: fastest feasible trials and the baseline",
    "failures": "Failed trials by reason",
}
#: Loss curves drawn besides the baseline's.
CURVES = 5
#: The marker of each kind of trial, the same in every figure: a full-budget trial within the loss
#: tolerance, one above it, and a short stage-1 screening run of ``--search staged`` (its loss, after
#: fewer samples, is not judged against the tolerance).
MARKS = {"feasible": "circle", "infeasible": "x", "short": "triangle-up-open"}
#: The legend name of each kind of trial.
KINDS = {
    "feasible": "feasible",
    "infeasible": "infeasible (loss above the tolerance)",
    "short": "short screening run (loss not judged)",
}


#: The user attributes the report reads of every trial (:func:`report_trials`); of the recommended
#: trial and the baseline, and of the trials whose loss curves it draws, it reads every attribute.
REPORT_KEYS = frozenset({"feasible", "fail_reason"})


def report_trials(study) -> list:
    """Every trial of ``study`` as the report reads it: digests (:mod:`autotune.study.digest`) with
    :data:`REPORT_KEYS` besides the digest's own, and the constraints Optuna judges feasibility by.

    Raises:
        autotune.errors.StorageUnreachableError: The database stayed unreachable past ``$AUTOTUNE_STORAGE_RETRY``.
    """
    from autotune.optuna_compat import CONSTRAINTS_KEY
    from autotune.study.digest import DIGEST_KEYS, digest_trials

    return digest_trials(study, DIGEST_KEYS | REPORT_KEYS, frozenset({CONSTRAINTS_KEY}))


def _complete(trials) -> list:
    return [t for t in trials if t.state.name == "COMPLETE" and _finite(t.user_attrs.get("samples_per_sec"))]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _sps_target(t) -> float:
    return float(t.user_attrs.get("samples_per_sec", float("nan")))


def _short(t) -> bool:
    """A short stage-1 screening run (``trial_samples``): fewer samples than the study's budget."""
    return "trial_samples" in t.user_attrs


def _kind(t) -> str:
    """The key of :data:`MARKS` of a complete trial."""
    return "short" if _short(t) else "feasible" if t.user_attrs.get("feasible") else "infeasible"


def build_figures(study, settings: StudySettings, recommended=None, baseline=None, trials: list | None = None) -> dict[str, Any]:
    """The report's figures: name -> plotly Figure, or name -> str (why it is missing).

    Args:
        recommended, baseline: Full frozen trials.
        trials: A snapshot of every trial (:func:`report_trials`, or full trials), else one is read.
    """
    every = report_trials(study) if trials is None else trials
    figures: dict[str, Any] = {}
    for name, build in (
        ("history", _history),
        ("batch_throughput", _batch_throughput),
        ("pareto", _pareto),
        ("importances", _importances),
        ("loss_curves", _loss_curves),
        ("failures", _failures),
    ):
        try:
            figures[name] = build(study, settings, recommended, baseline, every)
        except _Missing as e:
            figures[name] = str(e)
        if not isinstance(figures[name], str):
            figures[name].update_layout(title_text=FIGURE_TITLES[name], template="plotly_white")
    return figures


class _Missing(Exception):
    """A figure that has nothing to show; the message says why."""


#: What the figures with a point per trial draw whatever the sample (:func:`_always`).
_KEPT = "the baseline, the recommended trial, the fastest feasible trial"


def _always(trials: list, recommended, baseline) -> set[int]:
    """Numbers of the trials a figure draws whatever its sample: the baseline, the recommended trial
    and the fastest feasible full-budget trial among ``trials``."""
    feasible = [t for t in trials if t.user_attrs.get("feasible") and not _short(t)]
    best = max(feasible, key=_sps_target, default=None)
    return {t.number for t in (baseline, recommended, best) if t is not None}


def _subtitle(fig, note: str | None) -> None:
    if note:
        fig.update_layout(title_subtitle_text=note)


def _history(study, settings, recommended, baseline, every):
    import optuna

    from autotune.figure_sample import drawn_note, drawn_trials, light_study

    complete = _complete(every)
    if not complete:
        raise _Missing("No trial has completed yet.")
    drawn = drawn_trials(complete, _always(complete, recommended, baseline))
    # Optuna's figure of light copies of the trials drawn (it deep-copies every trial it reads), which
    # it numbers 0, 1, ...: the x axis is given back their own numbers
    copy = light_study(drawn.trials, study.directions, ("samples_per_sec",), params=False)
    fig = optuna.visualization.plot_optimization_history(copy, target=_sps_target, target_name=KINDS["feasible"])
    own = [t.number for t in drawn.trials]
    for trace in fig.data:
        trace.update(x=[own[int(i)] for i in trace.x])
    # Optuna draws a short run as infeasible (it is told a failing constraint): it gets its own mark, and
    # the infeasible trials the cross they have in every figure
    short = [t for t in drawn.trials if _short(t)]
    numbers = {t.number for t in short}
    for trace in fig.data:
        keep = [i for i, x in enumerate(trace.x) if x not in numbers]
        trace.update(x=[trace.x[i] for i in keep], y=[trace.y[i] for i in keep])
        if trace.name == "Infeasible Trial":
            trace.update(name=KINDS["infeasible"], showlegend=True, marker={"symbol": MARKS["infeasible"], "size": 8})
    if short:
        fig.add_trace(_kind_trace(short, "short", [t.number for t in short], {"color": "#7f7f7f"}))
    fig.update_yaxes(title="samples/s (global)")
    _subtitle(fig, drawn_note(drawn, _KEPT))
    return fig


def _kind_trace(trials: list, kind: str, x: list, marker: dict, **kwargs):
    """A scatter of ``trials`` of one kind (:data:`MARKS`), named by :data:`KINDS`, samples/s on y."""
    import plotly.graph_objects as go

    return go.Scatter(
        x=x,
        y=[t.user_attrs["samples_per_sec"] for t in trials],
        mode="markers",
        name=KINDS[kind],
        text=[_label(t) for t in trials],
        hovertemplate="%{text}<extra></extra>",
        marker={"symbol": MARKS[kind], "size": 10, **({"line": {"width": 2}} if kind == "short" else {}), **marker},
        **kwargs,
    )


def _batch_throughput(study, settings, recommended, baseline, every):
    import plotly.colors
    import plotly.graph_objects as go

    from autotune.figure_sample import drawn_note, drawn_trials

    complete = _complete(every)
    if not complete:
        raise _Missing("No trial has completed yet.")
    drawn = drawn_trials(complete, _always(complete, recommended, baseline))
    trials = drawn.trials
    fig = go.Figure()
    palette = plotly.colors.qualitative.Plotly
    for i, precision in enumerate(sorted({t.user_attrs["config"]["precision"] for t in trials})):
        for kind in MARKS:  # a legend group per precision (its colour), a trace per kind of trial (its mark)
            group = sorted(
                (t for t in trials if t.user_attrs["config"]["precision"] == precision and _kind(t) == kind),
                key=lambda t: t.user_attrs["config"]["batch_size"],
            )
            if group:
                fig.add_trace(
                    _kind_trace(
                        group,
                        kind,
                        [t.user_attrs["config"]["batch_size"] for t in group],
                        {"color": palette[i % len(palette)]},
                        legendgroup=precision,
                        legendgrouptitle_text=precision,
                    )
                )
    # a log axis labels its decades ("2 3 4 ... 9 100"): the ticks are the batch sizes that ran
    sizes = sorted({t.user_attrs["config"]["batch_size"] for t in trials})
    fig.update_xaxes(title="per-device batch size", type="log", tickvals=sizes, ticktext=[str(b) for b in sizes])
    fig.update_yaxes(title="samples/s (global)")
    _subtitle(fig, drawn_note(drawn, _KEPT))
    return fig


def _label(t) -> str:
    c = t.user_attrs.get("config", {})
    loss = t.user_attrs.get("loss")
    parts = [
        f"trial {t.number}",
        f"batch {c.get('batch_size')}",
        str(c.get("precision")),
        f"accum {c.get('accumulate_grad_batches')}",
        f"workers {c.get('num_workers')}",
        f"lr {c.get('lr'):.3g}" if isinstance(c.get("lr"), float) else "",
        f"{t.user_attrs.get('samples_per_sec', float('nan')):,.0f} samples/s",
        f"loss {loss:.4g}" if _finite(loss) else "",
        f"short screening run ({t.user_attrs['trial_samples']} samples): loss not judged" if _short(t) else "",
    ]
    return "<br>".join(p for p in parts if p)


def _pareto(study, settings, recommended, baseline, every):
    import optuna
    import plotly.graph_objects as go

    from autotune.figure_sample import drawn_note, drawn_trials
    from autotune.objective import pareto_front
    from autotune.study import records_of

    # a short screening run's loss (after fewer samples) is not comparable with the tolerance: left out
    candidates = [t for t in _complete(every) if _finite(t.user_attrs.get("loss")) and not _short(t)]
    if not candidates:
        raise _Missing("No full-budget trial has completed with a finite loss yet.")
    monitor = settings.monitor
    numbers = {t.number for t in candidates}
    front = {r.number for r in pareto_front([r for r in records_of(study, candidates) if r.number in numbers], settings.mode)}
    drawn = drawn_trials(candidates, _always(candidates, recommended, baseline), prefer=front)
    trials = drawn.trials
    if len(study.directions) == 2 and len(trials) == len(candidates):
        fig = optuna.visualization.plot_pareto_front(study, target_names=["samples/s", monitor])
    else:  # (a Pareto study of more trials than drawn gets this figure too: Optuna's draws every trial)
        fig = go.Figure()
        for name, group, symbol in (
            ("Pareto front", [t for t in trials if t.number in front], "diamond"),
            ("other trials", [t for t in trials if t.number not in front], "circle"),
        ):
            group = sorted(group, key=lambda t: t.user_attrs["samples_per_sec"])
            fig.add_trace(
                go.Scatter(
                    x=[t.user_attrs["samples_per_sec"] for t in group],
                    y=[t.user_attrs["loss"] for t in group],
                    mode="markers+lines" if name == "Pareto front" else "markers",
                    name=name,
                    text=[_label(t) for t in group],
                    hovertemplate="%{text}<extra></extra>",
                    marker={"symbol": symbol, "size": 10},
                )
            )
        fig.update_xaxes(title="samples/s (global)")
        fig.update_yaxes(title=f"final {monitor}")
    _subtitle(fig, drawn_note(drawn, _KEPT + ", the Pareto front", "the Pareto front"))
    base = study.user_attrs.get("baseline")
    if base and _finite(base.get("loss")):
        tol = settings.loss_tolerance
        bound = base["loss"] * (1 + tol) if settings.mode == "min" else base["loss"] * (1 - tol)
        fig.add_hline(y=bound, line_dash="dash", annotation_text=f"loss tolerance ({tol:.0%} vs baseline)")
    names = _named(study, settings, recommended, baseline, every)
    for trial, name, symbol in ((baseline, "baseline", "square"), (recommended, "recommended", "star")):
        if trial is not None and _finite(trial.user_attrs.get("loss")):
            fig.add_trace(
                go.Scatter(
                    x=[trial.user_attrs["samples_per_sec"]],
                    y=[trial.user_attrs["loss"]],
                    mode="markers",
                    name=f"{name} ({names[name]})",
                    marker={"symbol": symbol, "size": 18, "line": {"width": 2}},
                    text=[_label(trial)],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    return fig


def _named(study, settings, recommended, baseline, every) -> dict[str, str]:
    """How the legend names the recommendation and the baseline, as the terminal summary does: a
    search trial by its number; a config confirmed by its runs (the point drawn is the run closest to
    their median). The baseline is the study's baseline trial, the recommendation the run it names."""
    from autotune.study import confirmation

    confirmed = confirmation(study, settings, every)
    names = {}
    for role, trial in (("baseline", baseline), ("recommended", recommended)):
        if trial is None:
            continue
        of = trial.user_attrs.get("confirm_of") if confirmed is not None and "pair_of" in trial.user_attrs else None
        if of is None:
            names[role] = f"trial {trial.number}"
        elif role == "baseline" or of == confirmed.baseline:
            names[role] = f"trial {of}; its median paired run {trial.number}"
        else:
            names[role] = f"trial {trial.number}, the config of trial {of}; its median paired run"
    return names


#: Below this many full-budget trials, PED-ANOVA's top 10% is a single trial and its ranking is rough.
ROUGH_IMPORTANCES = 10


def _importances(study, settings, recommended, baseline, every):
    from autotune.importance import importance_figure, importance_inputs

    # the same inputs as autotune dashboard's importance panel (autotune.importance): the full-budget trials
    inputs = importance_inputs(every, _sps_target, True)
    n = len(inputs.trials)
    if n < 3 or not inputs.params:
        raise _Missing(
            f"Parameter importances need at least 3 full-budget trials that differ in some parameter ({n} so far; "
            "short screening runs, confirmation runs and duplicates do not count)."
        )
    try:
        fig = importance_figure(inputs, "samples/s")
    except (ValueError, RuntimeError, ZeroDivisionError) as e:
        raise _Missing(f"Parameter importances could not be computed: {e}") from None
    covered = f"over {n:,} full-budget trials (short screening runs, confirmation runs and duplicates left out)"
    if inputs.total > n:
        covered = (
            f"over {n:,} of {inputs.total:,} full-budget trials, a random sample (seed {inputs.seed}; "
            "short screening runs, confirmation runs and duplicates left out)"
        )
    if n < ROUGH_IMPORTANCES:
        covered += f"; under {ROUGH_IMPORTANCES} the ranking is rough"
    fig.update_layout(title_subtitle_text=covered)
    return fig


def _loss_curves(study, settings, recommended, baseline, every):
    import plotly.graph_objects as go

    from autotune.study.digest import full_trials

    feasible = sorted((t for t in _complete(every) if t.user_attrs.get("feasible")), key=lambda t: -t.user_attrs["samples_per_sec"])
    chosen: list = []
    start, step = 0, 2 * CURVES  # the fastest read in full, more while some have no curve
    while len(chosen) < CURVES and start < len(feasible):
        chosen += [t for t in full_trials(study, feasible[start : start + step]) if t.user_attrs.get("loss_curve")]
        start, step = start + step, 2 * step
    chosen = chosen[:CURVES]
    if baseline is not None and baseline.user_attrs.get("loss_curve") and baseline.number not in {t.number for t in chosen}:
        chosen.append(baseline)
    names = _named(study, settings, recommended, baseline, every)
    if not chosen:
        if not feasible:
            raise _Missing("No feasible trial has completed yet.")
        from autotune.callback import _NOT_PER_BATCH

        monitor = getattr(settings, "monitor", None) or "val_loss"
        raise _Missing(
            "No feasible trial recorded a training-loss curve: it is the loss training_step returns, or, when it returns "
            f"none (manual optimization), the --monitor metric logged each training step ({monitor} is not: "
            f"{'a validation metric, never read per step' if monitor.startswith(_NOT_PER_BATCH) else 'not logged per step'}). "
            "Return the loss from training_step, or log a training loss each step and pass --monitor with its name."
        )
    fig = go.Figure()
    for t in chosen:
        curve = t.user_attrs["loss_curve"]
        name = f"trial {t.number}"
        if baseline is not None and t.number == baseline.number:
            name += " (baseline)" if names["baseline"] == f"trial {t.number}" else f" (baseline: {names['baseline']})"
        name += " (recommended)" if recommended is not None and t.number == recommended.number else ""
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in curve],
                y=[p[1] for p in curve],
                mode="lines",
                name=name,
                line={"dash": "dash"} if "baseline" in name else {},
            )
        )
    fig.update_xaxes(title="training samples seen (global)")
    fig.update_yaxes(title="training loss", type="log")
    return fig


def _failures(study, settings, recommended, baseline, every):
    import plotly.graph_objects as go

    failed = [t for t in every if t.state.name == "FAIL"]
    if not failed:
        raise _Missing("No trial failed.")
    kinds: dict[str, list] = {}
    study_attrs = study.user_attrs  # (read once: each read is a query)
    for t in failed:
        kinds.setdefault(t.user_attrs.get("fail_kind") or ("stale" if f"stale_trial_{t.number}" in study_attrs else "unknown"), []).append(
            t
        )
    names = sorted(kinds, key=lambda k: -len(kinds[k]))
    reasons = [
        "<br>".join(f"trial {t.number}: {html.escape(str(t.user_attrs.get('fail_reason', ''))[:120])}" for t in kinds[k][:8]) for k in names
    ]
    fig = go.Figure(
        go.Bar(x=names, y=[len(kinds[k]) for k in names], text=[len(kinds[k]) for k in names], hovertext=reasons, name="failed trials")
    )
    fig.update_xaxes(title="failure kind")
    fig.update_yaxes(title="trials")
    return fig


def write_report(
    study, settings: StudySettings, out: Path, recommended=None, baseline=None, storage_label: str = "", trials: list | None = None
) -> dict[str, Any]:
    """Write the HTML report to ``out`` (plotly.js inline); returns the figures.

    Args:
        recommended, baseline: Full frozen trials (:func:`autotune.study.recommendation`).
        trials: Every trial of the study (:func:`report_trials`), else they are read.

    Raises:
        UsageError: ``out`` is a folder or its folder does not exist.
    """
    import plotly
    import plotly.io as pio

    out = Path(out)
    if out.is_dir():
        raise UsageError(f"report path {str(out)!r} is a folder; give a file path such as {str(out / 'report.html')!r}")
    if not out.parent.is_dir():
        raise UsageError(f"report path {str(out)!r}: folder {str(out.parent)!r} does not exist; create it first")
    trials = report_trials(study) if trials is None else trials
    figures = build_figures(study, settings, recommended, baseline, trials)
    counts = {s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "FAIL", "PRUNED", "RUNNING", "WAITING")}
    summary = [f"{len(trials):,} trials: " + ", ".join(f"{n:,} {s.lower()}" for s, n in counts.items() if n)]
    from autotune.study import confirmation, confirmed_speed

    if recommended is not None and baseline is not None:
        names = _named(study, settings, recommended, baseline, trials)
        speed = confirmed_speed(study, settings, trials)
        if speed is not None:  # as the terminal summary says it: the paired ratio
            from autotune.summary import ratio_text

            said = (
                f"Recommended: trial {recommended.number} (the config of trial {speed['trial']}, confirmed): "
                + ratio_text(
                    speed["ratio"],
                    speed["low"],
                    speed["high"],
                    speed["pairs"],
                    settings.objective,
                    f"the baseline ({names['baseline']})",
                    races=speed.get("races", 1),
                )
                if speed["won"]
                else f"Recommended: the baseline ({names['baseline']}): no candidate was shown better in paired runs (1.00x)"
            )
        else:
            sps, b_sps = recommended.user_attrs["samples_per_sec"], baseline.user_attrs["samples_per_sec"]
            said = f"Recommended: trial {recommended.number}, {sps:,.0f} samples/s = {sps / b_sps:.2f}x the baseline ({names['baseline']}, {b_sps:,.0f} samples/s)"
        summary.append(f"{html.escape(said)}; config {html.escape(json.dumps(recommended.user_attrs.get('config', {})))}")
    from autotune.summary import (
        confirmation_lines,
        flops_line,
        input_bound_line,
        quality_line,
    )

    if recommended is not None and baseline is not None:
        extra = [flops_line(recommended), quality_line(recommended, baseline), input_bound_line(recommended, settings, trials)]
        summary.extend(
            html.escape(line) for line in (*extra, *confirmation_lines(confirmation(study, settings, trials), settings.objective)) if line
        )
    summary.append(
        f"Objective {settings.objective}, loss tolerance {settings.loss_tolerance:.0%} on {settings.monitor}, "
        f"{settings.samples} training samples per trial."
    )
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>autotune report: {html.escape(study.study_name)}</title>",
        f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222} .missing{color:#777;font-style:italic}</style>",
        "</head><body>",
        f"<h1>autotune report: study {html.escape(study.study_name)}</h1>",
        f"<p>{html.escape(storage_label)}</p>" if storage_label else "",
        *(f"<p>{line}</p>" for line in summary),
    ]
    for name, figure in figures.items():
        parts.append(f"<h2 id='{name}'>{html.escape(FIGURE_TITLES[name])}</h2>")
        if isinstance(figure, str):
            parts.append(f"<p class='missing' data-figure='{name}'>{html.escape(figure)}</p>")
        else:
            parts.append(pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=f"figure-{name}"))
    parts.append("</body></html>")
    try:
        from autotune.export import write_private

        write_private(out, "\n".join(parts))
    except OSError as e:
        raise UsageError(f"cannot write the report to {str(out)!r}: {e.strerror or e}; give another --out") from None
    return figures
