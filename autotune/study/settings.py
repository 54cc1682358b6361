"""A study's settings: what the model inspection, the baseline and the resolved space say, stored as the
study's user attribute ``autotune`` when it is created, and loaded (and checked) when it is resumed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune import __version__
from autotune.config import TrialConfig
from autotune.errors import StorageError, StudyMismatchError, StudyNotFoundError, UsageError
from autotune.hardware import Hardware, unsupported_precisions
from autotune.jobs import ENV_OVERSUBSCRIBE, ahead, machine_slots, usable_cpus
from autotune.lightning_cli import cli_scripts, find_cli_class, imports_model
from autotune.loader import read_user_config
from autotune.runner import inspect_process
from autotune.space import (
    EXTENDED_KNOBS,
    KNOB_TYPES,
    Space,
    baseline_for_space,
    find_space,
    load_space,
    resolve_space,
)
from autotune.storage import mask_url, open_storage
from autotune.study.options import DEFAULTS, SearchOptions, check_monitor_mode, monitor_mode_warning
from autotune.study.probe import _probe_memory
from autotune.ui import UI

#: Study user attribute holding the settings.
SETTINGS_ATTR = "autotune"


#: Study user attribute holding the baseline's figures.
BASELINE_ATTR = "baseline"


#: Names of the values told to Optuna, per objective (``pareto`` adds the monitored metric).
_METRIC_NAMES = {"throughput": ["samples_per_sec"], "time-to-quality": ["time_to_target_seconds"], "goodput": ["goodput"]}


#: Settings that must not change when a study is resumed.
_FIXED_ON_RESUME = (
    "objective",
    "samples",
    "devices",
    "num_nodes",
    "monitor",
    "mode",
    "loss_tolerance",
    "space_file",
    "model_class",
    "data_class",
    "config_file",
    "seed",
)


@dataclass(frozen=True)
class StudySettings:
    """What a study was created with, stored as its user attribute :data:`SETTINGS_ATTR` (``autotune``).

    Everything a later command needs (resume, ``worker``, ``show``, ``export``, ``report``) comes
    from here and the storage: nothing is read from the machine or the model file again, except while
    the study has no baseline (the model is then inspected again). JSON-ready through
    :meth:`to_dict` and :meth:`from_dict`, as :class:`autotune.config.TrialConfig` is.

    Attributes:
        study_name: The study's name.
        model_file: Absolute path of the user's model file (the same path on every worker).
        model_class, data_class: The LightningModule and LightningDataModule classes (``data_class``
            ``None`` when the module builds its own DataLoaders).
        config_file: Absolute path of ``--config`` (a LightningCLI YAML), or ``None``.
        user_config: A snapshot of that config's ``trainer``/``model``/``data`` values (every trial
            and the export use these, not the file).
        space_file, space_explicit: The search space YAML, and whether the user chose it.
        space: The resolved space (knob name to ``{"choices": [...]}`` or ``{"low", "high", "log"}``).
        targets: Where each knob is set in the user's code (:class:`autotune.knob_targets.KnobTarget` fields).
        model_info: What inspection found for the extended space and constructor arguments.
        baseline_config: The baseline :class:`~autotune.config.TrialConfig` as a dict.
        hardware: The :class:`~autotune.hardware.Hardware` the study runs on, as a dict.
        autotune_version: The version that created the study.
        devices, num_nodes: Devices per node (>= 1) and nodes (>= 1) of every trial.
        objective: ``throughput``, ``time-to-quality``, ``goodput`` or ``pareto``.
        loss_tolerance: Largest relative loss increase over the baseline that is feasible, 0 <= x < 1.
        monitor, monitor_explicit: The judged metric, and whether ``--monitor`` named it.
        mode: ``min`` or ``max`` (of ``monitor``).
        samples: Training samples per trial (>= 1).
        trial_timeout: Wall-clock cap of one trial, s (> 0).
        seed: Seed of the sampler and of every trial's ``seed_everything`` (0 <= seed < 2**32).
        memory_model: Per precision, the memory model's fit (``fixed_gib``, ``per_sample_gib``,
            ``max_batch``, ``probes``), or ``None`` without ``--memory-limit`` (or a GPU).
        memory_limit_gib, memory_model_margin: The memory limit (GiB) and the share kept free (0 <= x < 1).
        train_samples: Size of the training set (samples per epoch), when inspection could read it.
        cli: The user's ``LightningCLI`` subclass every trial parses the config with
            (:class:`autotune.lightning_cli.CliClass` as a dict), or ``None`` for Lightning's own.
    """

    study_name: str
    model_file: str
    model_class: str
    data_class: str | None
    config_file: str | None
    user_config: dict[str, Any] | None
    space_file: str
    space_explicit: bool
    space: dict[str, dict[str, Any]]
    targets: dict[str, dict[str, Any]]
    model_info: dict[str, Any]
    baseline_config: dict[str, Any]
    hardware: dict[str, Any]
    autotune_version: str
    devices: int
    num_nodes: int
    monitor_explicit: bool
    objective: str
    loss_tolerance: float
    monitor: str
    mode: str
    samples: int
    trial_timeout: float
    seed: int
    memory_model: dict[str, Any] | None = None
    memory_limit_gib: float | None = None
    memory_model_margin: float = 0.1
    cli: dict[str, Any] | None = None
    train_samples: int | None = None

    @property
    def baseline(self) -> TrialConfig:
        """The baseline config (the model's own values)."""
        return TrialConfig.from_dict(self.baseline_config)

    def to_dict(self) -> dict[str, Any]:
        """Plain ``dict`` of the fields, for the study's user attribute."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> StudySettings:
        """Build from a study's stored settings.

        Raises:
            StudyMismatchError: A key is not a field (a newer autotune made the study), or a field
                without a default is missing (an older one did); the message names them.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        missing = sorted(name for name, f in fields.items() if name not in values and f.default is dataclasses.MISSING)
        if unknown or missing:
            raise StudyMismatchError(
                f"study {values.get('study_name')!r} has settings this autotune does not read (unknown {unknown}, missing {missing}); "
                f"it was made by autotune {values.get('autotune_version')!r}: use that version, or start a new study with --study-name"
            )
        return cls(**values)

    def replace(self, **changes: Any) -> StudySettings:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def settings_of(study) -> StudySettings | None:
    """The study's :class:`StudySettings`, or ``None`` for a study autotune did not make.

    ``study_name`` is the study's own name: a study copied under another name
    (``optuna.copy_study``) keeps the stored settings of the original, under the name it has now.
    """
    values = study.user_attrs.get(SETTINGS_ATTR)
    if values is None:
        return None
    settings = StudySettings.from_dict(values)
    return settings if settings.study_name == study.study_name else settings.replace(study_name=study.study_name)


def _study_names(storage) -> list[str]:
    """Names of the studies in ``storage`` (one query of the studies table: no trial is read)."""
    return [s.study_name for s in storage.get_all_studies()]


def load_study(study_name: str | None, storage_url: str):
    """Load an existing study and its settings.

    Args:
        study_name: Study name; ``None`` when the storage holds exactly one study.
        storage_url: Storage URL.

    Returns:
        ``(study, settings)``.

    Raises:
        StorageError: The storage cannot be opened.
        StudyNotFoundError: The storage (or SQLite file) holds no such autotune study yet (the message lists those there).
    """

    storage = open_storage(storage_url, create=False)
    names = _study_names(storage)
    if study_name is None:
        if not names:
            raise StudyNotFoundError(f"{mask_url(storage_url)} holds no study; run `autotune search` first")
        if len(names) != 1:
            raise StorageError(f"{mask_url(storage_url)} holds {len(names)} studies {names}; name one: autotune show NAME --storage URL")
        study_name = names[0]
    if study_name not in names:
        raise StudyNotFoundError(f"no study {study_name!r} in {mask_url(storage_url)}; studies there: {names or 'none'}")
    study = optuna.load_study(study_name=study_name, storage=storage)
    settings = settings_of(study)
    if settings is None:
        raise StudyNotFoundError(f"study {study_name!r} was not made by autotune (it has no {SETTINGS_ATTR!r} settings)")
    return study, settings


#: Settings that stay fixed even while no trial has completed: they set the study's directions
#: (``mode`` only for ``pareto``, see :func:`autotune.objective.directions`).
_FIXED_FROM_CREATION = ("objective", "mode")


def _check_resume(settings: StudySettings, opts: SearchOptions, model_file: Path, correctable: bool = False) -> None:
    """Check that a resumed study is given the settings it was created with.

    Args:
        settings: The study's settings.
        opts: This command's options.
        model_file: This command's model file (absolute).
        correctable: No trial of the study has completed: nothing was measured under the old
            settings, so every flag may correct them (a mistyped ``--monitor``, a missing
            ``--monitor`` for a module that logs no ``val_loss``), except those that set the study's
            directions (:data:`_FIXED_FROM_CREATION`).

    Raises:
        StudyMismatchError: Another model file, or a flag that differs from the study's setting.
    """
    if Path(settings.model_file) != model_file:
        raise StudyMismatchError(
            f"study {settings.study_name!r} was made for {settings.model_file!r}, not {str(model_file)!r}; "
            "give another --study-name for a new study"
        )
    fixed = [k for k in _FIXED_FROM_CREATION if k != "mode" or settings.objective == "pareto"] if correctable else _FIXED_ON_RESUME
    differ = []  # every flag that differs, in one message: a user fixing one at a time would meet the next on each try
    for key in fixed:
        given = getattr(opts, key, None)
        if key == "space_file" and given is not None:
            given = str(find_space(given).resolve())
        if key == "config_file" and given is not None:
            if not Path(given).is_file():  # a mistyped path: say so, not that it differs from the study's
                raise UsageError(f"config file {given!r} does not exist")
            given = str(Path(given).resolve())
        if given is not None and given != getattr(settings, key):
            differ.append(f"{key}={getattr(settings, key)!r}, not {given!r}")
    stored_script = (settings.cli or {}).get("file")
    if opts.cli_script is not None and not correctable and str(Path(opts.cli_script).resolve()) != stored_script:
        differ.append(f"cli_script={stored_script!r}, not {str(Path(opts.cli_script).resolve())!r}")
    if differ:
        flags = "the flags" if len(differ) > 1 else "the flag"
        raise StudyMismatchError(
            f"study {settings.study_name!r} was created with {'; '.join(differ)}; "
            f"drop {flags} to resume it, or give another --study-name for a new study"
            + ("" if correctable else " (a study's settings can be corrected only while none of its trials has completed)")
        )


def config_changed_line(settings: StudySettings) -> str | None:
    """The warning a resumed study gets when its ``--config`` file was edited since the study was made, or ``None``.

    A study keeps a snapshot of its LightningCLI config (``user_config``): every trial, the baseline
    and the export use the values it had when the study was created, so that the trials stay
    comparable. An edit in place is therefore not searched; this line says so instead of ignoring it.
    A config file that is gone or no longer parses gets no line (the snapshot is what the study uses).

    Args:
        settings: The resumed study's settings.
    """
    if not settings.config_file or not isinstance(settings.user_config, Mapping):
        return None
    try:
        now = read_user_config(settings.config_file, strict=False).get("document")
    except UsageError:
        return None
    then = settings.user_config.get("document")
    if then is None or json.dumps(now, sort_keys=True, default=str) == json.dumps(then, sort_keys=True, default=str):
        return None
    return (
        f"config file {settings.config_file!r} changed since study {settings.study_name!r} was created: its trials and export "
        "keep the values it had then; give another --study-name to search with the new values"
    )


def _with_study_values(opts: SearchOptions, settings: StudySettings) -> SearchOptions:
    """``opts`` with every unset option taken from a study's settings (to inspect the model again)."""

    values = {}
    for key in (
        "model_class",
        "data_class",
        "config_file",
        "objective",
        "loss_tolerance",
        "monitor",
        "mode",
        "samples",
        "trial_timeout",
        "devices",
        "num_nodes",
        "seed",
    ):
        if getattr(opts, key) is None:
            values[key] = getattr(settings, key)
    if opts.cli_script is None and settings.cli and Path(settings.cli["file"]).is_file():
        values["cli_script"] = settings.cli["file"]
    if opts.space_file is None and settings.space_explicit:
        values["space_file"] = settings.space_file
    if opts.monitor is None and not settings.monitor_explicit:
        values["monitor"] = None
    return dataclasses.replace(opts, **values)


def _create_settings(opts: SearchOptions, model_file: Path, study_name: str, ui: UI) -> StudySettings:

    check_monitor_mode(opts.monitor, opts.mode)  # a new study's mode is fixed: say it before any trial
    if warning := monitor_mode_warning(opts.monitor, opts.mode):
        ui.warn(warning)
    space_path = find_space(opts.space_file or "default").resolve()
    space = load_space(space_path)  # validate before the slow inspection
    config_file = str(Path(opts.config_file).resolve()) if opts.config_file else None
    if config_file and not Path(config_file).is_file():
        raise UsageError(f"config file {opts.config_file!r} does not exist")
    if config_file:
        # its YAML, sections and top-level keys, before the slow inspection (whose LightningCLI parser
        # then checks every key against the classes, right after importing the model file)
        read_user_config(config_file, strict=find_cli_class(model_file, opts.cli_script) is None)
    elif opts.cli_script:
        find_cli_class(model_file, opts.cli_script)  # a wrong --cli-script: say so before the slow inspection
    ui.info(f"inspecting {model_file.name} in a trial process ...")
    report = inspect_process(
        {
            "model_file": str(model_file),
            "model_class": opts.model_class,
            "data_class": opts.data_class,
            "config_file": config_file,
            "cli_script": opts.cli_script,
        },
        pool=ahead(model_file),  # the run's warm process, spawned ahead: no second import of torch
    )
    if report.get("cli") and report["cli"]["name"] != "LightningCLI":
        ui.info(f"trials parse the config with {report['cli']['name']} from {Path(report['cli']['file']).name} (its links and defaults)")
    if opts.cli_script and not imports_model(opts.cli_script, model_file):
        ui.warn(
            f"--cli-script {opts.cli_script} does not import {model_file.name} from its folder: the export's run line through it "
            f"may train another model than the one searched; name a script beside {model_file.name} that imports it"
        )
    others = [Path(c.file).name for c in cli_scripts(model_file) if report.get("cli") and c.file != report["cli"]["file"]]
    if others and not opts.cli_script:
        ui.info(
            f"the export's run line uses {Path(report['cli']['file']).name}; {', '.join(others)} also run(s) a LightningCLI "
            "on this model: --cli-script names the one to use"
        )
    theirs = (report.get("cli") or {}).get("model")
    if theirs and theirs != report["model_class"]:
        ui.warn(
            f"{Path(report['cli']['file']).name} hands {report['cli']['name']} the class {theirs}, but the search trains "
            f"{report['model_class']}: the export's run line through that script would train {theirs}"
        )
    rebuilt = [knob for knob, t in report["targets"].items() if t["how"] == "loader"]
    if rebuilt:
        ui.info(
            f"{' and '.join(rebuilt)}: no argument or attribute sets them, so each trial rebuilds the DataLoader that "
            "train_dataloader() returns with the trial's values (docs/model.md)"
        )
    hardware = Hardware.from_dict(report["hardware"])
    devices = _trial_devices(opts, hardware, ui)
    num_nodes = opts.num_nodes or 1
    baseline = _baseline_config(report["baseline"], hardware, devices, ui, num_nodes)

    resolved, baseline, model_info = _resolve_for_model(space, space_path, opts, report, hardware, baseline, devices * num_nodes, ui)
    limit = opts.memory_limit if opts.memory_limit is not None else (hardware.device_memory_gib if hardware.accelerator == "gpu" else None)
    memory_model = None
    if limit and "batch_size" not in resolved:  # the memory model caps batch sizes: none to cap
        ui.info(f"no memory model ({limit:g} GiB): the batch size is not searched")
    elif limit:
        memory_model = _probe_memory(model_file, opts, report, resolved, baseline, limit, opts.memory_margin, ui)
    settings = {
        "study_name": study_name,
        "model_file": str(model_file),
        "model_class": report["model_class"],
        "data_class": report["data_class"],
        "config_file": config_file,
        "user_config": report["user_config"],  # a snapshot: every trial and the export use these values
        "space_file": str(space_path),
        "space_explicit": opts.space_file is not None,
        "space": resolved,
        "targets": report["targets"],
        "model_info": model_info,
        "baseline_config": baseline.to_dict(),
        "hardware": hardware.to_dict(),
        "autotune_version": __version__,
        "devices": devices,
        "num_nodes": num_nodes,
        "monitor_explicit": opts.monitor is not None,
        "memory_model": memory_model,
        "memory_limit_gib": limit,
        "memory_model_margin": opts.memory_margin,
        "cli": report.get("cli"),
        "train_samples": report.get("train_samples"),
    }
    for key, default in DEFAULTS.items():
        value = getattr(opts, key)
        settings[key] = default if value is None else value
    return StudySettings(**settings)


def _trial_devices(opts: SearchOptions, hardware: Hardware, ui: UI) -> int:
    """Devices per node of every trial: ``--devices``, else every GPU (one device on a CPU machine),
    checked with ``--jobs`` against the machine (:func:`autotune.jobs.machine_slots`: ``jobs x devices``
    processes need as many GPUs, or on a CPU-only machine as many cores unless ``$AUTOTUNE_OVERSUBSCRIBE``).

    Raises:
        UsageError: Fewer than one device, more GPUs than this machine has, or more processes than
            it runs at once.
    """
    devices = opts.devices if opts.devices is not None else (hardware.device_count if hardware.accelerator == "gpu" else 1)
    if devices < 1:
        raise UsageError(f"--devices must be >= 1, got {devices}")
    if hardware.accelerator == "gpu" and devices > hardware.device_count:
        raise UsageError(f"--devices {devices}: this machine has {hardware.device_count} GPU(s)")
    machine_slots(hardware, devices, opts.jobs)
    cores = len(usable_cpus())
    if hardware.accelerator == "cpu" and devices * opts.jobs > cores:  # allowed by $AUTOTUNE_OVERSUBSCRIBE
        ui.warn(
            f"--jobs {opts.jobs} with --devices {devices} runs {devices * opts.jobs} processes on {cores} CPU core(s) "
            f"(${ENV_OVERSUBSCRIBE}): they contend, and their figures measure that"
        )
    return devices


def _resolve_for_model(
    space: Space,
    space_path: Path,
    opts: SearchOptions,
    report: Mapping[str, Any],
    hardware: Hardware,
    baseline: TrialConfig,
    world_size: int,
    ui: UI,
) -> tuple[dict[str, dict[str, Any]], TrialConfig, dict[str, Any]]:
    """The space resolved for the inspected model on this machine (:func:`resolve_space`), its notes
    shown as warnings.

    Args:
        world_size: Devices of a trial over all its nodes (``strategy`` is dropped at 1 unless
            ``devices`` is searched).

    Returns:
        ``(resolved, baseline, model_info)``: the resolved space, the baseline with the values of
        the knobs the space adds, and the inspection's ``model_info`` with ``knob_args``.

    Raises:
        SpaceError: See :func:`resolve_space`.
    """
    applicable = {
        name: name in report["targets"] or name in ("precision", "accumulate_grad_batches", *EXTENDED_KNOBS) for name in KNOB_TYPES
    }
    model_info = dict(report.get("model_info") or {})
    # constructor arguments autotune sets itself through its own knobs (batch_size, lr, ...)
    model_info["knob_args"] = {
        section: {t["name"]: knob for knob, t in report["targets"].items() if t["owner"] == section and t["how"] == "init"}
        for section in ("model", "data")
    }
    if "strategy" in space and "devices" not in space and world_size == 1:
        ui.warn("dropped 'strategy': every trial runs on one device (search devices too, or give --devices N)")
        space = type(space)({k: v for k, v in space.items() if k != "strategy"})
        space.lr_scaling = getattr(load_space(space_path), "lr_scaling", "none")
    resolved, notes = resolve_space(
        space,
        baseline=baseline,
        hardware=hardware,
        applicable=applicable,
        explicit=opts.space_file is not None,
        source=str(space_path),
        train_samples=report.get("train_samples"),
        model_info=model_info,
    )
    baseline = baseline_for_space(baseline, resolved, model_info)
    for note in notes:
        ui.warn(note)
    return resolved, baseline, model_info


def _baseline_config(base: Mapping[str, Any], hardware, devices: int, ui: UI, num_nodes: int = 1) -> TrialConfig:
    """The baseline (the model's own values) as a TrialConfig.

    A precision this machine does not run natively is replaced by what Lightning runs instead
    ("16-mixed" on CPU runs as "bf16-mixed"), with a warning; bfloat16 on a CPU without bfloat16
    instructions stays (it runs, emulated), with a warning; any other is an error.

    Raises:
        UsageError: A value of the model or its ``--config`` has the wrong type or range.
    """

    precision = base["precision"]
    removed = unsupported_precisions(hardware)
    if precision in removed:
        if hardware.accelerator == "cpu" and precision == "16-mixed":
            ui.warn("the baseline's precision '16-mixed' runs as 'bf16-mixed' on CPU; the baseline uses 'bf16-mixed'")
            precision = "bf16-mixed"
        if hardware.accelerator == "cpu" and precision in removed:  # bf16 on a CPU without bf16 instructions
            ui.warn(f"the baseline keeps its precision {precision!r}, though {removed[precision]}")
        elif precision in removed:
            raise UsageError(
                f"the baseline's precision {precision!r} cannot run here ({removed[precision]}); set trainer.precision in --config"
            )
    try:
        return TrialConfig(
            batch_size=int(base["batch_size"]),
            precision=precision,
            accumulate_grad_batches=int(base["accumulate_grad_batches"]),
            num_workers=int(base.get("num_workers") or 0),
            lr=float(base["lr"]) if base.get("lr") is not None else None,
            accelerator=hardware.accelerator,
            devices=devices,
            num_nodes=num_nodes,
            strategy="ddp" if devices * num_nodes > 1 else "auto",
        )
    except (TypeError, ValueError) as e:
        values = {k: base.get(k) for k in ("batch_size", "accumulate_grad_batches", "num_workers", "lr")}
        raise UsageError(f"the model's own values {values} are not all numbers ({e}); fix them in the model or in --config") from None
