"""What a search publishes: the LightningCLI YAML of the recommendation, and its note in optuna-dashboard."""

from __future__ import annotations

import copy
import importlib.metadata as md
import keyword
import os
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config import TrialConfig
from autotune.contention import busy_run_line
from autotune.export import (
    early_stopping_line,
    lightning_cli_config,
    one_line,
    render_yaml,
    scale_schedules,
    scale_training_length,
    scale_val_check_interval,
    step_length_lines,
    training_length_line,
    write_private,
)
from autotune.hardware import Hardware
from autotune.loader import read_user_config
from autotune.storage import mask_url, storage_file
from autotune.study.options import check_out_path, file_stem
from autotune.study.records import _budget, confirmation, speed_of
from autotune.study.settings import StudySettings
from autotune.summary import (
    LONGER_FROM,
    confirmation_lines,
    flops_line,
    input_bound_line,
    longer_line,
    quality_line,
    samples_ratio,
    speedup_line,
    steps_line,
)
from autotune.ui import UI


def default_export_path(storage_url: str, study_name: str) -> Path:
    """``<folder of the SQLite or journal file>/<name>.best.yaml``, or ``studies/<name>.best.yaml`` for a
    server (a database, a gRPC proxy); the name made safe as a file name by :func:`autotune.study.options.file_stem`."""
    path = storage_file(storage_url)
    folder = path.parent if path is not None else Path("studies")
    return folder / f"{file_stem(study_name)}.best.yaml"


def tolerance_phrase(trial, settings: StudySettings) -> str:
    """The loss limit ``trial`` was judged against: ``"tolerance 5%"``, or for a config of the baseline's
    math (``math: preserving``) the sanity check's wider limit, ``"limit +15%: the baseline's math, so only
    rounding and data order differ; 5% for other math"`` (:func:`autotune.study.math_class.sanity_tolerance`)."""
    from autotune.study.math_class import PRESERVING, sanity_tolerance

    if trial.user_attrs.get("math") != PRESERVING or trial.user_attrs.get("baseline"):
        return f"tolerance {settings.loss_tolerance:.0%}"
    return (
        f"limit +{sanity_tolerance(settings.loss_tolerance):.0%}: the baseline's math, so only rounding and data order "
        f"differ; {settings.loss_tolerance:.0%} for other math"
    )


def _versions() -> str:

    parts = []
    for name in ("torch", "lightning", "optuna", "autotune"):
        try:
            parts.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            continue
    return ", ".join(parts)


def run_hint(
    cli: Mapping[str, Any] | None,
    out: Path,
    model_class: str | None = None,
    data_class: str | None = None,
    model_file: str | None = None,
) -> str:
    """The command that trains with the export: the user's LightningCLI script when autotune found
    it (``fit`` only when the script runs the CLI with subcommands); else, for a plain model file, a
    ``python -c`` that imports its classes and hands them to ``LightningCLI`` (the file's folder on
    ``PYTHONPATH`` when it is not the current one: ``python -c`` imports from there), which is what
    the export is written for; a placeholder script name when the file cannot be imported by name.

    When the script hands its CLI another LightningModule class than the searched ``model_class``
    (``--model``), the line says so: that command would train the script's class, not the one measured.
    """
    if not cli:
        module = Path(model_file).stem if model_file else ""
        if not (module.isidentifier() and not keyword.iskeyword(module) and model_class and model_class.isidentifier()):
            return f"python YOUR_LIGHTNING_CLI_SCRIPT.py fit --config {out}"
        classes = ", ".join([model_class, *([data_class] if data_class else [])])
        parent = str(Path(str(model_file)).parent)
        folder = os.path.relpath(parent)
        folder = parent if folder.startswith("..") else folder
        path = "" if folder == "." else f"PYTHONPATH={shlex.quote(folder)} "
        code = f"from lightning.pytorch.cli import LightningCLI; from {module} import {classes}; LightningCLI({classes})"
        return f'{path}python -c "{code}" fit --config {shlex.quote(str(out))}'
    script = os.path.relpath(cli["file"])
    script = cli["file"] if script.startswith("..") else script
    line = f"python {script}{' fit' if cli.get('subcommands', True) else ''} --config {out}"
    theirs = cli.get("model")
    if theirs and model_class and theirs != model_class:
        line += (
            f" (warning: {Path(script).name} hands {cli['name']} the class {theirs}, not the searched {model_class}: "
            f"as written it trains {theirs}; pass {model_class} there, or subclass_mode_model=True with model.class_path)"
        )
    return line


def export_study(study, settings: StudySettings, trial, baseline, out: Path, storage_url: str, trials: list | None = None) -> Path:
    """Write the LightningCLI YAML of ``trial`` to ``out`` (its folder is created). Returns ``out``.

    Args:
        trial, baseline: The recommended trial and the baseline, full frozen trials.
        trials: A snapshot of ``study.get_trials()`` (digests will do, :mod:`autotune.study.digest`),
            else a fresh one is read: the header's trial count, confirmation figures and input-bound advice.
    """
    every = study.get_trials(deepcopy=False) if trials is None else trials

    config = TrialConfig.from_dict(trial.user_attrs["config"])
    user_config = settings.user_config or read_user_config(None)
    doc, notes = lightning_cli_config(
        config,
        settings.targets,
        user_config,
        has_datamodule=settings.data_class is not None,
        model_info=settings.model_info,
        baseline=TrialConfig.from_dict(settings.baseline_config),
        training_length=(settings.model_info or {}).get("training_length"),
    )
    doc = {**copy.deepcopy(user_config.get("extra", {})), **doc}  # (scale_schedules changes it in place)
    confirmed = confirmation(study, settings, every)
    ratio = samples_ratio(confirmed, every)
    base_config = TrialConfig.from_dict(settings.baseline_config)
    base_batch = base_config.effective_batch_size
    changes = scale_training_length(
        doc["trainer"], base_batch, config.effective_batch_size, ratio if ratio is not None and ratio >= LONGER_FROM else None
    )  # it needs more samples for the same loss, or another effective batch takes them in other steps
    schedule_lines = scale_schedules(doc, changes, manual=(settings.model_info or {}).get("automatic_optimization") is False)
    per_batch = (base_config.batch_size * base_config.world_size, config.batch_size * config.world_size)
    schedule_lines += [line] if (line := scale_val_check_interval(doc["trainer"], *per_batch)) else []
    schedule_lines += step_length_lines(doc, (settings.model_info or {}).get("signature") or {}, base_batch, config.effective_batch_size)
    longer = longer_line(confirmed.chosen, ratio, changes, (base_batch, config.effective_batch_size)) if confirmed is not None else None
    if longer and changes:
        length_lines = [longer]
    elif steps := steps_line(changes, base_batch, config.effective_batch_size):
        length_lines = [steps]
    else:
        user_length = training_length_line((settings.model_info or {}).get("training_length"), user_config.get("trainer") or {})
        length_lines = [user_length, *([longer] if longer else [])]
    judged, b_judged = _whole_runs(trial, baseline, every)
    loss, b_loss = judged.user_attrs["loss"], b_judged.user_attrs["loss"]
    source = trial.user_attrs.get("loss_source", settings.monitor)
    measured = speedup_line(speed_of(confirmed), trial, baseline, settings.objective)
    header = [
        "autotune recommendation (LightningCLI config)",
        f"study: {settings.study_name} ({mask_url(storage_url)}), trial {trial.number} of {len(every)}",
        measured,
        f"{source}: {loss:.4g} vs baseline {b_loss:.4g} ({tolerance_phrase(trial, settings)}), after {_trained(judged, settings)}"
        + (
            ""
            if judged is trial and b_judged is baseline
            else f" (search trials {judged.number} and {b_judged.number}: a paired run stopped at the baseline's training loss)"
        ),
        *confirmation_lines(confirmed, settings.objective),
        f"effective batch size: {config.effective_batch_size}; objective: {settings.objective}",
        *([flops] if (flops := flops_line(trial)) else []),
        *([quality] if (quality := quality_line(trial, baseline)) else []),
        *([advice] if (advice := input_bound_line(trial, settings, every)) else []),
        *([busy] if (busy := busy_run_line(every)) else []),
        f"hardware: {Hardware.from_dict(settings.hardware).describe()}, devices={config.devices}"
        + (f" x {config.num_nodes} nodes" if config.num_nodes > 1 else "")
        + _cores_note(trial, settings),
        f"versions: {_versions()}",
        *length_lines,
        *schedule_lines,
        *([stopping] if (stopping := _early_stopping(config, settings, user_config)) else []),
        f"run: {run_hint(settings.cli, out, settings.model_class, settings.data_class, settings.model_file)}",
        "",
    ]
    check_out_path(out)
    write_private(out, render_yaml(doc, header, notes))
    return out


def _early_stopping(config: TrialConfig, settings: StudySettings, user_config: Mapping[str, Any]) -> str | None:
    """:func:`autotune.export.early_stopping_line` for the recommended ``config``."""
    from autotune.study.math_class import is_preserving

    preserving = is_preserving(config, TrialConfig.from_dict(settings.baseline_config))
    return early_stopping_line((user_config.get("trainer") or {}).get("callbacks"), changes_math=not preserving)


def _whole_runs(trial, baseline, every) -> tuple[Any, Any]:
    """The two runs whose losses the header compares: ``trial`` and ``baseline``, or, when either is a
    paired run stopped at the baseline's training loss (:func:`autotune.study.racing.stop_target`),
    the search trials of their configs (``confirm_of``), each at the whole budget: a stopped run's
    loss is that of a shorter run (a regression MLP's header read ``val_loss 0.00312 vs baseline
    0.003537``, the baseline's run stopped at 15,360 of 16,384 samples; its search trial had 0.003252)."""
    if not any(t.user_attrs.get("stopped_at_target") for t in (trial, baseline)):
        return trial, baseline
    by_number = {t.number: t for t in every}
    a = by_number.get(trial.user_attrs.get("confirm_of", trial.number), trial)
    b = by_number.get(baseline.user_attrs.get("confirm_of", baseline.number), baseline)
    if a.user_attrs.get("loss") is None or b.user_attrs.get("loss") is None or a.user_attrs.get("feasible") is False:
        # a longer-training candidate (records.longer_candidates) missed the loss at the search's budget: its
        # paired run, stopped at the baseline's training loss, is the one to compare
        return trial, baseline
    return a, b


def _trained(trial, settings) -> str:
    """``"2048 training samples"``, or for a paired run stopped at the loss target (:func:`autotune.study.racing.stop_target`)
    the samples it trained before it stopped: its loss is that of a shorter run than its budget."""
    if trial.user_attrs.get("stopped_at_target") and trial.user_attrs.get("samples_seen"):
        return f"{int(trial.user_attrs['samples_seen'])} training samples (its paired run stopped at the baseline's training loss)"
    return f"{_budget(trial.user_attrs, settings)} training samples"


def _cores_note(trial, settings) -> str:
    """``"; measured on 1 of 2 cores ..."`` when the trial left out cores other work kept busy (:mod:`autotune.jobs`)."""
    applied = trial.user_attrs.get("applied") or {}
    cores, total = applied.get("cpu_cores"), (settings.hardware or {}).get("cpu_count")
    if not cores or not total or cores >= total or trial.user_attrs.get("shared_host"):  # --jobs splits the cores itself
        return ""
    return (
        f"; measured on {cores} of {total} cores ({applied.get('torch_threads')} torch thread(s)): the others were busy with "
        "other work when the search started; training on every core of a busy machine can be much slower"
    )


def _save_note(study, settings, trial, baseline, export_path: Path, ui: UI) -> None:
    """Save the recommendation as the study's note in optuna-dashboard (best effort)."""
    try:
        from optuna_dashboard import save_note
    except ImportError:  # pragma: no cover - optuna-dashboard is a dependency
        return

    config = trial.user_attrs["config"]
    sps, b_sps = trial.user_attrs["samples_per_sec"], baseline.user_attrs["samples_per_sec"]
    rows = "\n".join(f"| `{one_line(k)}` | `{one_line(v).replace('|', '&#124;')}` |" for k, v in config.items())
    note = (
        f"## autotune recommendation: trial {trial.number}\n\n"
        f"**{sps:,.0f} samples/s**, {sps / b_sps:.2f}x the baseline (trial {baseline.number}, {b_sps:,.0f} samples/s); "
        f"{one_line(trial.user_attrs.get('loss_source'))} {trial.user_attrs['loss']:.4g} vs baseline {baseline.user_attrs['loss']:.4g} "
        f"({tolerance_phrase(trial, settings)}).\n\n| knob | value |\n|---|---|\n{rows}\n\n"
        f"Exported to `{one_line(export_path)}` (updated {time.strftime('%Y-%m-%d %H:%M:%S')}).\n"
    )
    for line in (quality_line(trial, baseline), input_bound_line(trial, settings, study.get_trials(deepcopy=False))):
        if line:
            note += f"\n{line}\n"
    try:
        save_note(study, note)
    except Exception as e:  # the note is a convenience; the export already succeeded
        ui.warn(f"could not save the dashboard note: {e}")
