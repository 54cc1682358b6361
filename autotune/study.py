"""The study: storage, settings, the baseline, the trial loop, and the recommendation.

The Optuna study is the single source of truth. Its user attribute ``autotune`` holds the settings
the study was created with (model file, classes, space, objective, budget, hardware), so any later
command (``search`` again to resume, ``show``, ``export``, ``dashboard``) needs only the storage
and the study name. Each trial stores its config and measurements as user attributes, and a failed
trial its ``fail_kind`` and ``fail_reason``. Nothing is ever deleted.
"""

from __future__ import annotations

import functools
import math
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from autotune.config import TrialConfig
from autotune.errors import AutotuneError, BaselineFailedError, StorageError, StudyMismatchError, UsageError

__all__ = [
    "SearchOptions",
    "SearchResult",
    "Interrupted",
    "default_study_name",
    "default_storage",
    "mask_url",
    "open_storage",
    "load_study",
    "run_search",
    "run_worker",
    "drain_queue",
    "records_of",
    "recommendation",
    "export_study",
    "ENV_STORAGE",
]

#: Environment variable read when ``--storage`` is not given.
ENV_STORAGE = "AUTOTUNE_STORAGE"
#: Study user attribute holding the settings.
SETTINGS_ATTR = "autotune"
#: Study user attribute holding the baseline's figures.
BASELINE_ATTR = "baseline"
#: Names of the values told to Optuna, per objective (``pareto`` adds the monitored metric).
_METRIC_NAMES = {"throughput": ["samples_per_sec"], "time-to-quality": ["time_to_target_seconds"], "goodput": ["goodput"]}
#: Settings that must not change when a study is resumed.
_FIXED_ON_RESUME = ("objective", "samples", "devices", "num_nodes", "monitor", "mode", "loss_tolerance", "space_file", "model_class", "data_class", "config_file", "seed")


class Interrupted(AutotuneError):
    """The user pressed Ctrl-C; ``resume`` is the command that continues the study."""

    def __init__(self, resume: str):
        super().__init__(f"interrupted; finished trials are kept. Resume with:\n  {resume}" if resume else "interrupted; finished trials are kept")
        self.resume = resume


@dataclass
class SearchOptions:
    """What ``autotune search`` was asked to do; ``None`` means "the study's value, else the default"."""

    model_file: str
    trials: int = 20
    model_class: str | None = None
    data_class: str | None = None
    config_file: str | None = None
    space_file: str | None = None
    objective: str | None = None
    loss_tolerance: float | None = None
    monitor: str | None = None
    mode: str | None = None
    samples: int | None = None
    trial_timeout: float | None = None
    devices: int | None = None
    storage: str | None = None
    study_name: str | None = None
    out: str | None = None
    seed: int | None = None
    jobs: int = 1
    cold: bool = False
    num_nodes: int | None = None
    node_rank: int | None = None
    node_group: str | None = None
    sampler: str | None = None
    memory_limit: float | None = None
    memory_margin: float = 0.1
    pruner: str | None = None
    pruner_startup: int = 5
    enqueue: list[str] | None = None
    confirm: int | None = None
    confirm_repeats: int = 3
    confirm_samples: int | None = None
    search: str | None = None


#: Values of ``--search`` (see :func:`staged_plan`).
SEARCHES = ("staged", "flat")
#: Share of a staged run's sampled trials that are short system-knob runs (stage 1).
SYSTEM_FRACTION = 0.6
#: Optimizer steps a stage-1 run trains at least (enough for the warm-up cut and a steady state).
SYSTEM_STEPS = 32
#: Fastest system configs of stage 1 that stage 2 trains at full budget.
STAGE2_CONFIGS = 3
#: The loss-tolerance constraint a short stage-1 run tells the sampler (> 0: not known to be
#: feasible). Its lr and accumulation are the baseline's, so feasible would steer stage 2's sampler
#: back to them on the strength of runs whose loss was never judged.
SHORT_RUN_CONSTRAINT = 1.0
#: Knobs that decide convergence but hardly the speed: fixed in stage 1, searched in stage 2.
CONVERGENCE_KNOBS = ("lr", "accumulate_grad_batches")


#: Environment variable giving ``--confirm``'s default (else :data:`DEFAULT_CONFIRM`).
ENV_CONFIRM = "AUTOTUNE_CONFIRM"
#: Configs confirmed after the search by default (besides the baseline).
DEFAULT_CONFIRM = 3


DEFAULTS = {
    "objective": "throughput",
    "loss_tolerance": 0.05,
    "monitor": "val_loss",
    "mode": "min",
    "samples": 8192,
    "trial_timeout": 900.0,
    "seed": 0,
}


@dataclass
class SearchResult:
    """What a search run ended with."""

    study_name: str
    storage: str
    trials_run: int
    recommended: Any  # optuna FrozenTrial or None
    baseline: Any
    export_path: Path | None


def check_search_options(opts: SearchOptions) -> None:
    """Validate the numeric and choice flags of a search.

    Raises:
        UsageError: ``--trials`` < 1, ``--samples`` < 1, ``--trial-timeout`` <= 0, ``--devices`` < 1,
            an unknown ``--objective`` or ``--mode``, or ``--loss-tolerance`` outside ``[0, 1)``.
    """
    from autotune.objective import OBJECTIVES, validate_tolerance

    if opts.trials < 1:
        raise UsageError(f"--trials must be >= 1 (the number of trials this run adds), got {opts.trials}")
    if opts.samples is not None and opts.samples < 1:
        raise UsageError(f"--samples must be >= 1 (training samples per trial), got {opts.samples}")
    if opts.trial_timeout is not None and not opts.trial_timeout > 0:
        raise UsageError(f"--trial-timeout must be > 0 seconds, got {opts.trial_timeout}")
    if opts.devices is not None and opts.devices < 1:
        raise UsageError(f"--devices must be >= 1, got {opts.devices}")
    if opts.num_nodes is not None and opts.num_nodes < 1:
        raise UsageError(f"--num-nodes must be >= 1, got {opts.num_nodes}")
    from autotune.samplers import SAMPLERS

    from autotune.pruning import PRUNERS, make_pruner

    if opts.memory_limit is not None and not opts.memory_limit > 0:
        raise UsageError(f"--memory-limit must be > 0 GiB, got {opts.memory_limit}")
    if not 0 <= opts.memory_margin < 1:
        raise UsageError(f"--memory-margin must be a fraction in [0, 1) (0.1 keeps 10% free), got {opts.memory_margin}")
    for file in opts.enqueue or []:
        if not Path(file).is_file():
            raise UsageError(f"--enqueue {file!r} does not exist; give a LightningCLI YAML such as an autotune export")
    if opts.confirm is None:
        _env_confirm()  # a bad $AUTOTUNE_CONFIRM stops the run before any trial
    if opts.pruner is None and os.environ.get(ENV_PRUNER) and os.environ[ENV_PRUNER] not in PRUNERS:
        raise UsageError(f"${ENV_PRUNER}={os.environ[ENV_PRUNER]!r} must be one of {list(PRUNERS)} (the default of --pruner)")
    make_pruner(opts.pruner or _env_pruner(), opts.pruner_startup)  # raises on a bad name or count
    if opts.sampler is not None and opts.sampler not in SAMPLERS:
        raise UsageError(f"unknown --sampler {opts.sampler!r}; choose one of {list(SAMPLERS)}")
    if opts.confirm is not None and opts.confirm < 0:
        raise UsageError(f"--confirm must be >= 0 (configs re-run before recommending; 0 turns it off), got {opts.confirm}")
    if opts.confirm_repeats < 1:
        raise UsageError(f"--confirm-repeats must be >= 1, got {opts.confirm_repeats}")
    if opts.confirm_samples is not None and opts.confirm_samples < 1:
        raise UsageError(f"--confirm-samples must be >= 1 (training samples per confirmation run), got {opts.confirm_samples}")
    if (opts.num_nodes or 1) > 1 and opts.jobs != 1:
        raise UsageError(f"--jobs {opts.jobs} with --num-nodes {opts.num_nodes}: a multi-node trial takes whole nodes; use --jobs 1")
    if opts.objective is not None and opts.objective not in OBJECTIVES:
        raise UsageError(f"--objective {opts.objective!r} is not one of {list(OBJECTIVES)}")
    if opts.mode is not None and opts.mode not in ("min", "max"):
        raise UsageError(f"--mode must be 'min' or 'max', got {opts.mode!r}")
    if opts.loss_tolerance is not None:
        validate_tolerance(opts.loss_tolerance)
    if opts.search is not None and opts.search not in SEARCHES:
        raise UsageError(f"unknown --search {opts.search!r}; choose one of {list(SEARCHES)} (docs/search.md)")
    if opts.search is None and os.environ.get(ENV_SEARCH) and os.environ[ENV_SEARCH] not in SEARCHES:
        raise UsageError(f"${ENV_SEARCH}={os.environ[ENV_SEARCH]!r} must be one of {list(SEARCHES)} (the default of --search)")
    if opts.search == "staged" and opts.objective not in (None, "throughput", "goodput"):
        raise UsageError(f"--search staged ranks stage 1 by samples/s, which does not decide --objective {opts.objective}; "
                         "use --search flat")
    if opts.search == "staged" and opts.sampler == "grid":
        raise UsageError("--search staged with --sampler grid: the grid runs every combination once; use --search flat")
    if opts.search == "staged" and (opts.num_nodes or 1) > 1:
        raise UsageError(f"--search staged with --num-nodes {opts.num_nodes}: a multi-node study runs flat (its nodes follow one "
                         "queue of full-budget trials); use --search flat")


def default_study_name(model_file: str | Path) -> str:
    """The file's stem, or its folder's name for ``model.py`` (``examples/digits/model.py`` -> ``digits``)."""
    path = Path(model_file).resolve()
    return path.parent.name if path.stem == "model" else path.stem


def default_storage(study_name: str) -> str:
    """``sqlite:///studies/<name>.db``, relative to the working directory."""
    return f"sqlite:///studies/{study_name}.db"


def resolve_storage(storage: str | None, study_name: str) -> str:
    """``--storage``, else ``$AUTOTUNE_STORAGE``, else :func:`default_storage`."""
    return storage or os.environ.get(ENV_STORAGE) or default_storage(study_name)


def mask_url(url: str) -> str:
    """The storage URL with any password replaced by ``***``."""
    if "://" not in url or "@" not in url:
        return url
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a SQLAlchemy URL: mask user:password@ by hand
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):])
    return None


#: Seconds between a running trial's heartbeats, and after which a silent trial is stale
#: (environment variables ``AUTOTUNE_HEARTBEAT_INTERVAL`` and ``AUTOTUNE_HEARTBEAT_GRACE``).
HEARTBEAT_INTERVAL = 10
HEARTBEAT_GRACE = 60
#: Seconds a worker waits for the creator of a new study to queue its baseline.
BASELINE_WAIT = 120


def _heartbeat_kwargs() -> dict[str, Any]:
    import optuna

    def stale(study, trial) -> None:
        study.set_user_attr(f"stale_trial_{trial.number}", "stale: its worker stopped sending heartbeats (killed, or its machine lost); retried once")
        optuna.storages.RetryFailedTrialCallback(max_retry=1)(study, trial)

    return {
        "heartbeat_interval": int(os.environ.get("AUTOTUNE_HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL)),
        "grace_period": int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE", HEARTBEAT_GRACE)),
        "heartbeat_stale_trial_callback": stale,
    }


def open_storage(url: str, *, create: bool = True, heartbeat: bool = False):
    """An Optuna RDB storage for ``url``.

    SQLite files get a 60 s lock timeout; the default folder ``studies/`` is created when ``create``
    (any other folder must exist). Calls ride out a database that is briefly unreachable
    (:class:`autotune.storage.ResilientRDBStorage`). With ``heartbeat``, running trials send heartbeats and a trial
    silent for the grace period is failed as stale and retried once (processes that run trials).

    Raises:
        StorageError: Unknown scheme or driver, unreachable server, or (``create=False``) a SQLite
            file that does not exist. The message shows the URL without its password.
    """
    import optuna

    path = _sqlite_path(url)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:") and (path is None or str(path) in ("", ":memory:")):
        raise StorageError(f"storage {url!r} is an in-memory database, which the trial processes and later commands cannot see; give a file, e.g. sqlite:///studies/NAME.db")
    if path is not None:
        if not create and not path.is_file():
            raise StorageError(f"study database {str(path)!r} does not exist; check the path, or run `autotune search` first")
        if path.is_dir():
            raise StorageError(f"storage {url!r}: {str(path)!r} is a folder; give a database file path")
        if create and not path.parent.exists():
            if path.parent != Path("studies"):
                raise StorageError(f"storage {url!r}: folder {str(path.parent)!r} does not exist; create it first")
            path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            raise StorageError(f"storage {url!r}: {str(path.parent)!r} is not a folder")
        engine_kwargs = {"connect_args": {"timeout": 60}}
    elif "://" not in url:
        raise StorageError(f"storage {url!r} is not a database URL; use e.g. sqlite:///studies/NAME.db or postgresql+psycopg://user@host/db")
    import warnings

    masked = mask_url(url)
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                from autotune.storage import ResilientRDBStorage

                return ResilientRDBStorage(url, label=f"storage {masked}", engine_kwargs=engine_kwargs, **(_heartbeat_kwargs() if heartbeat else {}))
        except Exception as e:  # SQLAlchemy raises several types for a bad URL or server
            detail = (str(e).splitlines()[0] if str(e) else type(e).__name__).replace(url, masked)
            if "upgrade" in str(e) and "storage" in str(e):
                raise StorageError(
                    f"the database {masked!r} was made by an older Optuna and needs a schema upgrade; back it up, then run: "
                    f"optuna storage upgrade --storage {masked}"
                ) from None
            racing = type(e).__name__ in ("IntegrityError", "ProgrammingError") or (
                type(e).__name__ == "OperationalError" and ("locked" in detail or "already exists" in detail)
            )
            if attempt < 2 and racing:
                # another process is creating the same tables right now: try again once they exist
                time.sleep(0.5 + attempt)
                continue
            raise StorageError(f"cannot open storage {masked!r}: {detail}") from None
    raise AssertionError("unreachable")


def _study_names(storage) -> list[str]:
    import optuna

    return [s.study_name for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)]


def load_study(study_name: str | None, storage_url: str):
    """Load an existing study and its settings.

    Args:
        study_name: Study name; ``None`` when the storage holds exactly one study.
        storage_url: Storage URL.

    Returns:
        ``(study, settings)``.

    Raises:
        StorageError: The storage cannot be opened, or holds no such study (the message lists them).
    """
    import optuna

    storage = open_storage(storage_url, create=False)
    names = _study_names(storage)
    if study_name is None:
        if not names:
            raise StorageError(f"{mask_url(storage_url)} holds no study; run `autotune search` first")
        if len(names) != 1:
            raise StorageError(f"{mask_url(storage_url)} holds {len(names)} studies {names}; name one: autotune show NAME --storage URL")
        study_name = names[0]
    if study_name not in names:
        raise StorageError(f"no study {study_name!r} in {mask_url(storage_url)}; studies there: {names or 'none'}")
    study = optuna.load_study(study_name=study_name, storage=storage)
    settings = study.user_attrs.get(SETTINGS_ATTR)
    if settings is None:
        raise StorageError(f"study {study_name!r} was not made by autotune (it has no {SETTINGS_ATTR!r} settings)")
    return study, settings


def _make_sampler(settings: Mapping[str, Any], seed_offset: int, name: str | None = None):
    """The run's sampler (:func:`autotune.samplers.make_sampler`; default multivariate TPE, which reads
    each trial's loss constraint, ``Trial.set_constraint``)."""
    from autotune.samplers import make_sampler

    # the grid's point numbering comes from its seed: every run of a study must use the same one
    offset = 0 if name == "grid" else seed_offset
    return make_sampler(name or "tpe", settings["space"], int(settings["seed"]) + offset)


def _check_resume(settings: Mapping[str, Any], opts: SearchOptions, model_file: Path) -> None:
    if Path(settings["model_file"]) != model_file:
        raise StudyMismatchError(
            f"study {settings['study_name']!r} was made for {settings['model_file']!r}, not {str(model_file)!r}; "
            "give another --study-name for a new study"
        )
    for key in _FIXED_ON_RESUME:
        given = getattr(opts, key, None)
        if key == "space_file" and given is not None:
            from autotune.space import find_space

            given = str(find_space(given).resolve())
        if key == "config_file" and given is not None:
            given = str(Path(given).resolve())
        if given is not None and given != settings.get(key):
            raise StudyMismatchError(
                f"study {settings['study_name']!r} was created with {key}={settings.get(key)!r}, not {given!r}; "
                "drop the flag to resume it, or give another --study-name for a new study"
            )


def _with_study_values(opts: SearchOptions, settings: Mapping[str, Any]) -> SearchOptions:
    """``opts`` with every unset option taken from a study's settings (to inspect the model again)."""
    import dataclasses

    values = {}
    for key in ("model_class", "data_class", "config_file", "objective", "loss_tolerance", "monitor", "mode", "samples", "trial_timeout", "devices", "num_nodes", "seed"):
        if getattr(opts, key) is None:
            values[key] = settings.get(key)
    if opts.space_file is None and settings.get("space_explicit"):
        values["space_file"] = settings["space_file"]
    if opts.monitor is None and not settings.get("monitor_explicit"):
        values["monitor"] = None
    return dataclasses.replace(opts, **values)


def _create_settings(opts: SearchOptions, model_file: Path, study_name: str, ui) -> dict[str, Any]:
    from autotune import __version__
    from autotune.hardware import Hardware
    from autotune.runner import inspect_process
    from autotune.space import find_space, load_space, resolve_space

    space_path = find_space(opts.space_file or "default").resolve()
    space = load_space(space_path)  # validate before the slow inspection
    config_file = str(Path(opts.config_file).resolve()) if opts.config_file else None
    if config_file and not Path(config_file).is_file():
        raise UsageError(f"config file {opts.config_file!r} does not exist")
    ui.info(f"inspecting {model_file.name} in a trial process ...")
    report = inspect_process({"model_file": str(model_file), "model_class": opts.model_class, "data_class": opts.data_class, "config_file": config_file})
    hardware = Hardware.from_dict(report["hardware"])
    devices = opts.devices if opts.devices is not None else (hardware.device_count if hardware.accelerator == "gpu" else 1)
    if devices < 1:
        raise UsageError(f"--devices must be >= 1, got {devices}")
    if hardware.accelerator == "gpu" and devices > hardware.device_count:
        raise UsageError(f"--devices {devices}: this machine has {hardware.device_count} GPU(s)")
    if hardware.accelerator == "cpu" and devices > hardware.cpu_count:
        ui.warn(f"--devices {devices} runs {devices} processes on {hardware.cpu_count} CPU core(s): they will contend")
    num_nodes = opts.num_nodes or 1
    baseline = _baseline_config(report["baseline"], hardware, devices, ui, num_nodes)
    from autotune.space import EXTENDED_KNOBS, KNOB_TYPES, baseline_for_space

    applicable = {name: name in report["targets"] or name in ("precision", "accumulate_grad_batches", *EXTENDED_KNOBS) for name in KNOB_TYPES}
    model_info = dict(report.get("model_info") or {})
    # constructor arguments autotune sets itself through its own knobs (batch_size, lr, ...)
    model_info["knob_args"] = {section: {t["name"]: knob for knob, t in report["targets"].items() if t["owner"] == section and t["how"] == "init"}
                               for section in ("model", "data")}
    if "strategy" in space and "devices" not in space and devices * num_nodes == 1:
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
    limit = opts.memory_limit if opts.memory_limit is not None else (hardware.device_memory_gib if hardware.accelerator == "gpu" else None)
    memory_model = None
    if limit:
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
    }
    for key, default in DEFAULTS.items():
        value = getattr(opts, key)
        settings[key] = default if value is None else value
    return settings


def _baseline_config(base: Mapping[str, Any], hardware, devices: int, ui, num_nodes: int = 1) -> TrialConfig:
    """The baseline (the model's own values) as a TrialConfig.

    A precision this machine does not run natively is replaced by what Lightning runs instead
    ("16-mixed" on CPU runs as "bf16-mixed"), with a warning; one with no such replacement is an error.

    Raises:
        UsageError: A value of the model or its ``--config`` has the wrong type or range.
    """
    from autotune.hardware import unsupported_precisions

    precision = base["precision"]
    removed = unsupported_precisions(hardware)
    if precision in removed:
        if hardware.accelerator == "cpu" and precision == "16-mixed":
            ui.warn(f"the baseline's precision '16-mixed' runs as 'bf16-mixed' on CPU; the baseline uses 'bf16-mixed'")
            precision = "bf16-mixed"
        else:
            raise UsageError(f"the baseline's precision {precision!r} cannot run here ({removed[precision]}); set trainer.precision in --config")
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


def _measure_attrs(outcome) -> dict[str, Any]:
    """The trial's figures: :func:`autotune.measure.merge_ranks` of the ranks, plus what ran."""
    from autotune.measure import merge_ranks

    ranks = [r for r in outcome.ranks if r.get("ok")]
    attrs = merge_ranks(ranks, ranks[0].get("peak_memory_kind", "cpu_rss"))
    attrs["precision_ran"] = ranks[0].get("precision_ran")
    attrs["lr_ran"] = ranks[0].get("lr_ran")
    attrs["applied"] = ranks[0].get("applied")
    return attrs


def _rank_attrs(outcome) -> list[dict[str, Any]]:
    return [
        {"rank": r.get("rank"), "config": r.get("config"), "first_batch_size": r.get("first_batch_size"), "ok": r.get("ok", False),
         "applied": r.get("applied")}
        for r in sorted(outcome.ranks, key=lambda r: r.get("rank", 0))
    ]


def _run_one(study, trial, config: TrialConfig, settings: Mapping[str, Any], is_baseline: bool, ui, ctx: "_RunContext") -> Any:
    """Run one asked trial in a free slot to its end and tell the study. Returns the frozen trial."""
    import optuna

    from autotune.pruning import intermediate_metric
    from autotune.runner import run_trial_process

    trial.set_user_attr("config", config.to_dict())
    trial.set_user_attr("effective_batch_size", config.effective_batch_size)
    trial.set_user_attr("baseline", is_baseline)
    ui.trial_started(trial.number, config, is_baseline)
    if trial.user_attrs.get("stage") == "system" and system_budget(config, int(settings["samples"])) < int(settings["samples"]):
        trial.set_user_attr("trial_samples", system_budget(config, int(settings["samples"])))  # a short run
    if not is_baseline and "confirm_of" not in trial.user_attrs:
        # (an --enqueue'd config runs even when measured before: the user asked for it)
        original = None if "seeded_from" in trial.user_attrs else _measured_before(study, trial.number, config, _budget(trial.user_attrs, settings))
        if original is not None:
            return _tell_duplicate(study, trial, original, ui, ctx)
        reason = _predicted_oom(study, config)
        if reason is not None:
            return _prune_predicted_oom(study, trial, reason, ui, ctx)
    spec = {
        "model_file": settings["model_file"],
        "model_class": settings["model_class"],
        "data_class": settings["data_class"],
        "config_file": settings["config_file"],
        "user_config": settings.get("user_config"),
        "targets": settings["targets"],
        "config": config.to_dict(),
        "samples": _budget(trial.user_attrs, settings),
        "seed": settings["seed"],
    }
    slot = ctx.take_slot()
    # the heartbeat runs until the trial is told: storing its figures can take long on a busy database,
    # and a trial whose heartbeat stopped would be failed as stale by another worker meanwhile
    beating = _start_heartbeat(study, trial)
    try:
        try:
            launch, node_env = None, {}
            progress_file = os.path.join(ctx.log_dir, f"progress-{trial.number}.json")
            node_env["AUTOTUNE_PROGRESS_FILE"] = progress_file
            ui.trial_progress(trial.number, progress_file)
            if (ctx.pruner is not None and ctx.leader is None and not is_baseline and "confirm_of" not in trial.user_attrs
                    and "trial_samples" not in trial.user_attrs and intermediate_metric(settings["objective"]) is not None):
                _start_watch(study, trial, settings, ctx, progress_file, int(spec["samples"]), beating)
            if ctx.leader is not None:
                launch, rendezvous = ctx.leader.publish(trial.number, spec, float(settings["trial_timeout"]))
                node_env.update(rendezvous)
            outcome = run_trial_process(
                spec,
                timeout=float(settings["trial_timeout"]),
                trial_number=trial.number,
                expected_ranks=config.devices if launch else config.world_size,
                devices=config.devices,
                pool=None if config.strategy == "fsdp" else ctx.pools.get(slot),  # FSDP launches its ranks as scripts
                slot_env={**slot.env, **node_env},
                on_start=lambda pgid: _trial_started(ctx, trial, pgid),
            )
            if launch:
                outcome = ctx.leader.gather(launch, outcome)
        except KeyboardInterrupt:
            _fail_interrupted(study, trial.number)
            raise
        except AutotuneError as e:  # the warm process failed to start or answer: the trial fails, not the study
            from autotune.runner import TrialOutcome

            outcome = TrialOutcome(ok=False, fail_kind="crashed", fail_reason=f"crashed: {str(e).splitlines()[0]}")
        finally:
            ctx.running.pop(trial.number, None)
            ctx.give_slot(slot)
        if ctx.stop.is_set() and not outcome.ok:
            outcome.fail_kind, outcome.fail_reason = "interrupted", "interrupted: Ctrl-C in the autotune process"
        pruned = ctx.pruned.pop(trial.number, None)
        try:
            if pruned is not None and not outcome.ok:
                trial.set_user_attr("fail_kind", "pruned")
                trial.set_user_attr("fail_reason", pruned)
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                _tell(study, trial, outcome, settings, is_baseline, ctx, slot)
        except optuna.exceptions.UpdateFinishedTrialError as e:
            # another worker failed this trial as stale meanwhile (and retried it): log, never crash
            ui.warn(f"trial {trial.number} finished after another worker marked it failed (stale); its result is not stored ({e})")
    finally:
        beating.set()
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


def _tell(study, trial, outcome, settings: Mapping[str, Any], is_baseline: bool, ctx: "_RunContext", slot) -> None:
    """Store a finished trial's figures and outcome (user attributes, constraint, values or FAIL).

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: Another process finished the trial meanwhile.
    """
    import optuna

    from autotune.objective import constraint_value, final_loss, objective_values, time_to_target

    if study.get_trials(deepcopy=False)[trial.number].state != optuna.trial.TrialState.RUNNING:
        raise optuna.exceptions.UpdateFinishedTrialError(f"trial {trial.number} is no longer running")
    attrs: dict[str, Any] = {"launch": "cold" if ctx.pools.cold else "warm", "slot": slot.description, "shared_host": ctx.jobs > 1}
    attrs.update(outcome.timing)
    attrs.update(_overhead(outcome))
    attrs["wall_seconds"] = outcome.wall_seconds
    attrs["ranks"] = _rank_attrs(outcome)
    kind, reason = outcome.fail_kind, outcome.fail_reason
    values = constraint = None
    if kind is None:
        measured = _measure_attrs(outcome)
        attrs.update(measured)
        try:
            loss, source = final_loss(measured["metrics"], measured["train_loss_final"], settings["monitor"], settings["monitor_explicit"])
        except UsageError as e:
            kind, reason = "monitor_missing", str(e)
        else:
            attrs["loss"], attrs["loss_source"] = loss, source
            sps = measured["samples_per_sec"]
            if not math.isfinite(loss):
                kind, reason = "nonfinite_loss", f"non-finite final {source} ({loss})"
            elif not (math.isfinite(sps) and sps > 0):
                kind, reason = "no_measurement", "no steady-state steps were measured; raise --samples"
            else:
                baseline = study.user_attrs.get(BASELINE_ATTR)
                baseline_loss = loss if is_baseline else baseline["loss"]
                if "trial_samples" in trial.user_attrs:
                    # a short run's loss is not comparable with the baseline's full budget: its
                    # convergence is not judged (stage 2 judges it at full budget), and the sampler is
                    # told it is not known to be feasible (SHORT_RUN_CONSTRAINT)
                    constraint = SHORT_RUN_CONSTRAINT
                    attrs["constraint"], attrs["feasible"] = None, None
                else:
                    constraint = constraint_value(loss, baseline_loss, settings["loss_tolerance"], settings["mode"])
                    attrs["constraint"] = constraint if math.isfinite(constraint) else None
                    attrs["feasible"] = constraint <= 0
                target = _loss_target(study, measured["loss_curve"], settings) if is_baseline or baseline.get("loss_target") is None else baseline["loss_target"]
                reach = time_to_target(measured["loss_curve"], target, sps, _budget(trial.user_attrs, settings))
                attrs["loss_target"] = target if math.isfinite(target) else None
                # JSON has no inf: a target never reached is stored as None (samples/seconds) with target_reached False
                attrs["time_to_target"] = reach.seconds if math.isfinite(reach.seconds) else None
                attrs["samples_to_target"] = reach.samples if math.isfinite(reach.samples) else None
                attrs["target_reached"] = reach.reached
                if settings["objective"] == "time-to-quality" and math.isnan(reach.seconds):
                    kind, reason = "no_loss_curve", "time-to-quality needs the training loss against samples; training_step returned no loss tensor"
                _mfu_attrs(attrs, measured, sps, trial.user_attrs["config"])
                goodput = _goodput_attrs(study, attrs, measured, sps, trial.user_attrs["effective_batch_size"], settings)
                if settings["objective"] == "goodput" and math.isnan(goodput) and kind is None:
                    kind, reason = "no_noise_scale", "goodput needs the gradient noise scale, and no step measured it; raise --samples (at least 4 optimizer steps)"
                values = objective_values(settings["objective"], sps, loss, reach.seconds, goodput)
    if kind is not None:
        attrs["fail_kind"], attrs["fail_reason"] = kind, reason
        if outcome.log_tail:
            attrs["log_tail"] = outcome.log_tail[-4000:]
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    if constraint is not None:
        trial.set_constraint("loss_tolerance", constraint if math.isfinite(constraint) else 1e300)
    try:
        if kind is not None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, values)
    except (ValueError, RuntimeError) as e:  # Optuna raises these for a trial told elsewhere
        raise optuna.exceptions.UpdateFinishedTrialError(str(e)) from None


def _budget(attrs: Mapping[str, Any], settings: Mapping[str, Any]) -> int:
    """Training samples of a trial: a confirmation run's or a stage-1 run's own budget, else the study's ``samples``."""
    return int(attrs.get("confirm_samples") or attrs.get("trial_samples") or settings["samples"])


def system_budget(config: TrialConfig, samples: int) -> int:
    """Training samples of a stage-1 run of ``--search staged`` (a throughput measurement).

    A quarter of the study's budget, but at least :data:`SYSTEM_STEPS` optimizer steps of the
    config, and never more than the full budget: ``min(samples, max(samples // 4, SYSTEM_STEPS x
    effective batch))``.

    Args:
        config: The trial's config.
        samples: The study's ``samples`` per trial (>= 1).
    """
    return min(samples, max(samples // 4, SYSTEM_STEPS * config.effective_batch_size))


def _mfu_attrs(attrs: dict[str, Any], measured: Mapping[str, Any], sps: float, config: Mapping[str, Any]) -> None:
    """Store model FLOP/s and MFU on ``attrs`` (see :mod:`autotune.flops`); None where unknown."""
    from autotune.flops import mfu

    per_sample, peak = measured.get("flops_per_sample"), measured.get("peak_flops")
    devices = int(config.get("devices", 1)) * int(config.get("num_nodes", 1))
    attrs["model_flops_per_sec"] = per_sample * sps if per_sample else None
    value = mfu(per_sample or 0.0, sps, peak or 0.0, devices)
    attrs["mfu"] = value if math.isfinite(value) else None


def _goodput_attrs(study, attrs: dict[str, Any], measured: Mapping[str, Any], sps: float, batch: int, settings: Mapping[str, Any]) -> float:
    """Store the gradient noise scale, the statistical efficiency and the goodput on ``attrs``;
    return the goodput (NaN when the noise scale was not measured here nor in any other trial)."""
    import statistics

    from autotune.noise import noise_scale, statistical_efficiency

    noise = measured.get("noise")
    if noise:
        scale, method = noise_scale(noise["grad_sq"], noise["trace"]), noise["method"]
    else:
        # too few optimizer steps to measure (a batch as large as the budget): the noise scale is a
        # property of the model and data, so the median of the study's measured trials stands in
        measured_scales = [t.user_attrs["gradient_noise_scale"] for t in study.get_trials(deepcopy=False)
                           if t.state.name == "COMPLETE" and t.user_attrs.get("noise_method") not in (None, "study_median")
                           and t.user_attrs.get("gradient_noise_scale") is not None]
        if not measured_scales:
            return math.nan
        scale, method = statistics.median(measured_scales), "study_median"
    base = TrialConfig.from_dict(settings["baseline_config"]).effective_batch_size
    efficiency = statistical_efficiency(scale, batch, base)
    attrs["gradient_noise_scale"] = scale if math.isfinite(scale) else None  # None: inf (all noise)
    attrs["noise_method"] = method
    attrs["statistical_efficiency"] = efficiency
    attrs["goodput"] = sps * efficiency
    return sps * efficiency


def _loss_target(study, curve, settings: Mapping[str, Any]) -> float:
    """The time-to-quality target: the baseline's smoothed final training loss (this trial is the
    baseline, or the study's baseline predates the target and its stored curve is used)."""
    from autotune.objective import loss_target

    info = study.user_attrs.get(BASELINE_ATTR)
    if info is not None and info.get("trial") is not None:
        curve = study.get_trials(deepcopy=False)[info["trial"]].user_attrs.get("loss_curve") or curve
    return loss_target(curve, settings["samples"])


#: Trials pruned as predicted OOM that one run replaces by new trials (they cost no training).
OOM_REPLACEMENTS = 20


def _memory_events(study) -> list:
    from autotune.frontier import event_of

    events = []
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished():
            event = event_of(t.number, t.state.name, t.user_attrs)
            if event is not None:
                events.append(event)
    return events


def _predicted_oom(study, config: TrialConfig) -> str | None:
    """:func:`autotune.frontier.predicted_oom` over the study's finished trials, then the memory model."""
    from autotune.frontier import predicted_oom

    reason = predicted_oom(config.to_dict(), _memory_events(study))
    settings = study.user_attrs.get(SETTINGS_ATTR) or {}
    model = (settings.get("memory_model") or {}).get(config.precision)
    if reason is None and model and model.get("max_batch") is not None and config.devices == settings.get("devices"):
        if config.batch_size > model["max_batch"]:
            reason = (f"predicted OOM by the memory model: per-device batch {config.batch_size} > {model['max_batch']}, the most "
                      f"that fits {config.precision} in {1 - settings['memory_model_margin']:.0%} of {settings['memory_limit_gib']:g} GiB")
    return reason


def _probe_memory(model_file: Path, opts: "SearchOptions", report, resolved: dict, baseline: TrialConfig, limit: float, margin: float, ui):
    """Fit the memory model (see :mod:`autotune.memory`) by probes, print it, and cap ``resolved``'s batch sizes.

    Returns:
        ``{precision: {"fixed_gib", "per_sample_gib", "max_batch", "probes"}}``, or ``None`` when the
        probes could not measure (a warning says why).

    Raises:
        UsageError: Not even the smallest batch size of the space fits.
    """
    from autotune.memory import fit_memory, max_batch, probe_batches
    from autotune.runner import run_trial_process

    batch_entry = resolved.get("batch_size", {"choices": [baseline.batch_size]})
    choices = batch_entry.get("choices") or [batch_entry["low"], batch_entry["high"]]
    precisions = list(resolved.get("precision", {}).get("choices") or [baseline.precision])
    model: dict[str, Any] = {}
    ui.info(f"memory model: probing {len(precisions)} precision(s) x 2 batch sizes against {limit:g} GiB ({margin:.0%} kept free) ...")
    for precision in precisions:
        points, oom_at = [], None
        for batch in probe_batches(choices):
            config = baseline.replace(batch_size=batch, precision=precision, accumulate_grad_batches=1)
            spec = {"model_file": str(model_file), "model_class": report["model_class"], "data_class": report["data_class"],
                    "config_file": str(Path(opts.config_file).resolve()) if opts.config_file else None, "user_config": report["user_config"],
                    "targets": report["targets"], "config": config.to_dict(), "samples": 2 * batch * config.world_size,
                    "seed": opts.seed if opts.seed is not None else DEFAULTS["seed"]}
            outcome = run_trial_process(spec, timeout=float(opts.trial_timeout or DEFAULTS["trial_timeout"]), trial_number=-1,
                                        expected_ranks=config.world_size, devices=config.devices)
            if not outcome.ok:
                if outcome.fail_kind == "oom":
                    oom_at = batch
                    break
                ui.warn(f"memory probe ({precision}, batch {batch}) failed: {outcome.fail_reason}; no memory model for {precision}")
                break
            memory = [r.get("peak_memory_gib", 0.0) for r in outcome.ranks if r.get("ok")]
            cuda = any(r.get("peak_memory_kind") == "cuda_max_allocated" for r in outcome.ranks)
            points.append((batch, max(memory) if cuda else sum(memory)))
        if oom_at is not None:
            model[precision] = {"fixed_gib": None, "per_sample_gib": None, "max_batch": oom_at - 1, "probes": points}
            ui.info(f"  {precision}: batch {oom_at} already ran out of memory; batches >= {oom_at} are skipped")
        elif len(points) == 2:
            fixed, per_sample = fit_memory(points)
            top = max_batch(fixed, per_sample, limit, margin)
            model[precision] = {"fixed_gib": fixed, "per_sample_gib": per_sample, "max_batch": 0 if top is None else top, "probes": points}
            shown = "none fits" if top is None else ("no limit in sight" if top >= 2**31 else f"max per-device batch {top}")
            ui.info(f"  {precision}: {fixed:.3g} GiB + {per_sample * 1024:.3g} MiB x batch; {shown}")
    if not model:
        return None
    if len(model) == len(precisions):  # batch sizes above every precision's maximum never fit: out of the space
        top = max(m["max_batch"] for m in model.values())
        if "choices" in batch_entry:
            kept = [c for c in batch_entry["choices"] if c <= top]
            if not kept:
                raise UsageError(f"--memory-limit {limit:g} GiB: not even batch {min(batch_entry['choices'])} fits (memory model); "
                                 "raise --memory-limit, lower --memory-margin, or add smaller batch sizes to the space")
            if len(kept) < len(batch_entry["choices"]):
                ui.warn(f"removed batch sizes {[c for c in batch_entry['choices'] if c > top]}: above {top}, the most the memory model fits")
                resolved["batch_size"] = {"choices": kept}
        elif "high" in batch_entry and batch_entry["high"] > top >= batch_entry["low"]:
            ui.warn(f"batch_size capped at {top}, the most the memory model fits")
            resolved["batch_size"] = {**batch_entry, "high": top}
    return model


def oom_frontier(study) -> list[dict[str, Any]]:
    """The study's OOM frontier (:func:`autotune.frontier.frontier_summary`), for settings where some trial ran out of memory."""
    from autotune.frontier import frontier_summary

    return [row for row in frontier_summary(_memory_events(study)) if row["oom_from"] is not None]


def frontier_lines(study) -> list[str]:
    """One line per setting of the OOM frontier (none when no trial ran out of memory)."""
    return [f"OOM frontier: {r['precision']}, {r['devices']} device(s), {r['strategy']}{', ' + r['setting'] if r.get('setting') else ''}: per-device batch "
            f"{'<= ' + str(r['fits_up_to']) + ' fits' if r['fits_up_to'] is not None else 'none known to fit'}, "
            f">= {r['oom_from']} runs out of memory (not run again)" for r in oom_frontier(study)]


#: Figures a duplicate trial takes from the trial that measured its config (see :func:`_tell_duplicate`).
_NOT_COPIED = {"config", "effective_batch_size", "baseline", "seeded_from", "stage", "trial_samples", "confirm_of", "confirm_samples",
               "baseline_repeat", "duplicate_of", "intermediate", "screen", "ranks", "log_tail", "launch", "slot", "shared_host", "launch_time",
               "exit_time", "wall_seconds", "startup_seconds", "training_seconds", "teardown_seconds"}


def _measured_before(study, number: int, config: TrialConfig, budget: int):
    """The first completed search trial (not a confirmation run, nor itself a duplicate) with the same
    config and training budget as trial ``number``, or ``None``."""
    import optuna

    wanted, settings = config.to_dict(), study.user_attrs.get(SETTINGS_ATTR, {})
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs = t.user_attrs
        if (t.number != number and attrs.get("config") == wanted and "confirm_of" not in attrs and "duplicate_of" not in attrs
                and _budget(attrs, settings) == budget):
            return t
    return None


def _tell_duplicate(study, trial, original, ui, ctx: "_RunContext"):
    """A sampled config that a completed trial already measured at the same budget is not trained
    again: the trial takes that trial's figures and values (``duplicate_of``; never recommended in
    its place), which tells the sampler the same thing at no cost, and a replacement is queued."""
    for key, value in original.user_attrs.items():
        if key not in _NOT_COPIED:
            trial.set_user_attr(key, value)
    trial.set_user_attr("duplicate_of", original.number)
    constraint = original.user_attrs.get("constraint")
    if original.user_attrs.get("feasible") is not None:
        trial.set_constraint("loss_tolerance", constraint if constraint is not None else 1e300)
    elif "trial_samples" in original.user_attrs:  # a short run: not judged
        trial.set_constraint("loss_tolerance", SHORT_RUN_CONSTRAINT)
    study.tell(trial, list(original.values))
    _replace(study, trial, ctx)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


def _replace(study, trial, ctx: "_RunContext") -> None:
    """Queue a replacement for a trial that trained nothing (predicted OOM, a duplicate): up to
    :data:`OOM_REPLACEMENTS` per run; none for a grid (a fixed set of points)."""
    import optuna

    if trial.user_attrs.get("screen"):
        return  # a stage-1 screen point: the other unvisited points are queued already
    with ctx.lock:
        if ctx.oom_replacements < OOM_REPLACEMENTS and not isinstance(study.sampler, optuna.samplers.GridSampler):
            ctx.oom_replacements += 1
            stage = trial.user_attrs.get("stage")
            if stage:  # a staged trial's replacement keeps its stage and the knobs its stage fixes
                fixed = dict(study.get_trials(deepcopy=False)[trial.number].system_attrs.get("fixed_params") or {})
                if stage == "full":  # stage 2 fixes the system knobs; the sampler picks the rest
                    fixed = system_part(fixed)
                study.enqueue_trial(fixed, user_attrs={"stage": stage})
            else:
                study.enqueue_trial({})


def _prune_predicted_oom(study, trial, reason: str, ui, ctx: "_RunContext"):
    """Store a trial the OOM frontier rules out as PRUNED (not run), and queue a replacement."""
    import optuna

    trial.set_user_attr("fail_kind", "predicted_oom")
    trial.set_user_attr("fail_reason", reason)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    _replace(study, trial, ctx)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    ui.trial_finished(frozen)
    return frozen


def _start_watch(study, trial, settings: Mapping[str, Any], ctx: "_RunContext", progress_file: str, budget: int, done) -> None:
    """Watch a running trial's progress preview; at each milestone record its intermediate value and
    stop it (its process group) when the pruner says so (see :mod:`autotune.pruning`). Ends with ``done``."""
    import json
    import threading

    import optuna

    from autotune.pruning import intermediate_metric, milestone_steps, prune_decision
    from autotune.runner import kill_group

    key, direction = intermediate_metric(settings["objective"])
    steps = milestone_steps(budget)
    single = len(study.directions) == 1
    recorded: dict[int, float] = {}

    def completed() -> list[dict[int, float]]:
        out = []
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if "confirm_of" in t.user_attrs or "duplicate_of" in t.user_attrs or not t.user_attrs.get("feasible"):
                continue
            final = t.user_attrs.get(key)
            values = {int(k): float(v) for k, v in (t.user_attrs.get("intermediate") or {}).items()}
            if final is not None:
                for step in steps:  # a trial too short for the watcher to see a milestone: its final figure
                    values.setdefault(step, float(final))
            out.append(values)
        return out

    def watch() -> None:
        while not done.wait(0.25):
            try:
                with open(progress_file) as f:
                    preview = json.load(f)
            except (OSError, ValueError):
                continue
            reached = [step for step in steps if preview.get("samples", 0) >= step]
            value = preview.get(key)
            # only the latest milestone the preview has passed: an older one would get a later figure
            for step in reached[-1:]:
                if step in recorded or value is None:
                    continue
                recorded[step] = float(value)
                try:
                    trial.set_user_attr("intermediate", {str(k): v for k, v in recorded.items()})
                    if single:
                        trial.report(float(value), step)
                    prune = prune_decision(ctx.pruner, direction, completed(), recorded)
                except Exception:  # a database hiccup or a finished trial: never stop a trial for it
                    continue
                if prune:
                    ctx.pruned[trial.number] = (f"pruned at {step} of {budget} samples: {key.replace('_', ' ')} {value:.4g} is worse than "
                                                f"the completed trials' at that point (--pruner {ctx.pruner_name})")
                    pgid = ctx.running.get(trial.number)
                    if pgid is not None:
                        kill_group(pgid)
                    return

    threading.Thread(target=watch, name=f"watch-{trial.number}", daemon=True).start()


def _trial_started(ctx: "_RunContext", trial, pgid: int) -> None:
    """Note a running trial's process group: for Ctrl-C, and on the trial (stored at once, so even
    an interrupted trial names the group that was killed)."""
    ctx.running[trial.number] = pgid
    trial.set_user_attr("process_group", pgid)


def _start_heartbeat(study, trial):
    """Record the trial's heartbeat every interval until the returned event is set (RDB storages)."""
    import threading

    stop = threading.Event()
    storage = study._storage
    interval = storage.get_heartbeat_interval() if hasattr(storage, "get_heartbeat_interval") else None
    if not interval:
        return stop

    def beat() -> None:
        while True:
            try:
                storage.record_heartbeat(trial._trial_id)
            except Exception:  # a database hiccup: the next beat retries
                pass
            if stop.wait(interval):
                return

    threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True).start()
    return stop


def _overhead(outcome) -> dict[str, float]:
    """Start-up (launch to first training batch), training, and after-training seconds of a trial."""
    firsts = [r["first_batch_time"] for r in outcome.ranks if r.get("first_batch_time")]
    ends = [r["train_end_time"] for r in outcome.ranks if r.get("train_end_time")]
    launch, exit_time = outcome.timing.get("launch_time"), outcome.timing.get("exit_time")
    if not (firsts and ends and launch and exit_time):
        return {}
    first, end = min(firsts), max(ends)
    return {"startup_seconds": first - launch, "training_seconds": end - first, "teardown_seconds": exit_time - end}


class _RunContext:
    """What the trials of one ``search`` run share: slots, warm pools, running trials, Ctrl-C."""

    def __init__(self, slots, pools, jobs: int):
        import queue
        import threading

        self.pools = pools
        self.jobs = jobs
        self.leader = None
        self.log_dir = "."
        self.stop = threading.Event()
        self.running: dict[int, int] = {}
        self.asked: list[int] = []
        self.oom_replacements = 0
        self.pruner = None
        self.pruner_name = "none"
        self.pruned: dict[int, str] = {}
        self.lock = threading.Lock()
        self._free: "queue.Queue" = queue.Queue()
        for slot in slots:
            self._free.put(slot)

    def take_slot(self):
        return self._free.get()

    def give_slot(self, slot) -> None:
        self._free.put(slot)

    def kill_running(self) -> None:
        from autotune.runner import kill_group

        for pgid in list(self.running.values()):
            kill_group(pgid)


def _fail_interrupted(study, number: int) -> None:
    """Store an asked trial that Ctrl-C cut short as FAIL (reason ``interrupted``), if not told yet."""
    import optuna

    frozen = study.get_trials(deepcopy=False)[number]
    if frozen.state != optuna.trial.TrialState.RUNNING:
        return
    trial = optuna.trial.Trial(study, frozen._trial_id)
    trial.set_user_attr("fail_kind", "interrupted")
    trial.set_user_attr("fail_reason", "interrupted: Ctrl-C in the autotune process")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _resume_command(settings: Mapping[str, Any], storage_url: str, remaining: int) -> str:
    relative = os.path.relpath(settings["model_file"])
    model = settings["model_file"] if relative.startswith("..") else relative
    parts = ["autotune", "search", model, "--study-name", settings["study_name"], "--storage", mask_url(storage_url), "--trials", str(max(1, remaining))]
    return shlex.join(parts)


def run_search(opts: SearchOptions, ui) -> SearchResult:
    """Create or resume a study and add ``opts.trials`` trials to it, then export the recommendation.

    The first trial of a new study (or of a study whose baseline never completed) is the baseline:
    the model's own config. If the baseline fails, the search stops with :class:`BaselineFailedError`
    (its failed trial stays in the study).

    Raises:
        UsageError: Bad input (file, space, storage, flags, or settings that differ from the study's).
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C; the running trial is stored as failed, finished trials are kept.
    """
    import optuna

    from autotune.loader import check_model_file
    from autotune.objective import directions

    check_search_options(opts)
    if (opts.num_nodes or 1) > 1:
        _search_node(opts.num_nodes, opts.node_rank, opts.node_group)
    elif opts.node_rank not in (None, 0):
        raise UsageError(f"--node-rank {opts.node_rank}: autotune search is always node rank 0; "
                         "run `autotune worker --node-rank K` on the other nodes of a --num-nodes study")
    model_file = check_model_file(opts.model_file)
    if opts.out:
        check_out_path(Path(opts.out))
    study_name = opts.study_name or default_study_name(model_file)
    storage_url = resolve_storage(opts.storage, study_name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sqlite_path = _sqlite_path(storage_url)
    settings = None
    seeds = None
    if sqlite_path is not None and not sqlite_path.exists():
        # a new database: check the model before creating any file, so bad input leaves nothing behind
        settings = _create_settings(opts, model_file, study_name, ui)
        seeds = _check_run_inputs(opts, settings, new_study=True)
    storage = open_storage(storage_url, heartbeat=True)
    if study_name in _study_names(storage):
        study = optuna.load_study(study_name=study_name, storage=storage)
        settings = study.user_attrs.get(SETTINGS_ATTR)
        if settings is None:
            raise StudyMismatchError(f"study {study_name!r} in {mask_url(storage_url)} was not made by autotune; give another --study-name")
        _check_resume(settings, opts, model_file)
        if study.user_attrs.get(BASELINE_ATTR) is None:
            # no baseline yet (it failed): the model or its config may have been fixed, so look again
            fresh = _create_settings(_with_study_values(opts, settings), model_file, study_name, ui)
            study.set_user_attr(SETTINGS_ATTR, fresh)
            settings = fresh
        if opts.trial_timeout is not None:
            settings = {**settings, "trial_timeout": opts.trial_timeout}
        seeds = _check_run_inputs(opts, settings)
        ui.info(f"resuming study {study_name!r} ({len(study.trials)} trials so far) in {mask_url(storage_url)}")
    else:
        if settings is None:
            settings = _create_settings(opts, model_file, study_name, ui)
            seeds = _check_run_inputs(opts, settings, new_study=True)  # before the study exists: bad input leaves nothing behind
        try:
            study = optuna.create_study(
                study_name=study_name,
                storage=storage,
                directions=directions(settings["objective"], settings["mode"]),
            )
        except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile: join it
            study = optuna.load_study(study_name=study_name, storage=storage)
        study.set_user_attr(SETTINGS_ATTR, settings)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(_METRIC_NAMES.get(settings["objective"], ["samples_per_sec"]) if settings["objective"] != "pareto" else ["samples_per_sec", settings["monitor"]])
        ui.info(f"created study {study_name!r} in {mask_url(storage_url)}")
    study.sampler = _make_sampler(settings, len(study.trials), opts.sampler)
    room = opts.trials - (1 if study.user_attrs.get(BASELINE_ATTR) is None and not _baseline_pending(study) else 0)
    if len(seeds) > room:
        raise UsageError(f"--enqueue gives {len(seeds)} config(s), but --trials {opts.trials} leaves room for {max(0, room)} "
                         "after the baseline; raise --trials")
    leader = _leader(study, settings, opts.node_rank, opts.node_group, "autotune search", ui)
    ui.search_started(settings, opts.trials)
    add = opts.trials
    if opts.sampler == "grid":
        from autotune.samplers import grid_size

        left = grid_size(settings["space"]) - len({repr(sorted(t.params.items())) for t in study.get_trials(deepcopy=False) if "confirm_of" not in t.user_attrs})
        if left < add:
            ui.info(f"--sampler grid: {max(0, left)} combination(s) of the space left to run; this run adds {max(0, left)} trial(s), not {add}")
            add = max(0, left)
    search = opts.search or ("flat" if opts.sampler == "grid" or leader is not None else default_search(settings))
    if search == "staged" and settings["objective"] not in ("throughput", "goodput"):
        raise UsageError(f"--search staged ranks stage 1 by samples/s, which does not decide --objective {settings['objective']}; "
                         "use --search flat")
    run_id = f"{os.getpid()}-{time.time():.0f}"
    drain = functools.partial(drain_queue, study, settings, ui, jobs=opts.jobs, cold=opts.cold, storage_url=storage_url, leader=leader,
                              pruner=(opts.pruner or _env_pruner(), opts.pruner_startup), run_id=run_id)
    if search == "staged":
        ran = _staged_search(study, settings, ui, drain, add, seeds, cold=opts.cold)
    else:
        ran = drain(add=add, seeds=seeds)
    confirm = opts.confirm if opts.confirm is not None else _env_confirm()
    if confirm and leader is None:
        ran += _confirm(study, settings, ui, confirm, opts.confirm_repeats, opts.confirm_samples or 2 * settings["samples"],
                        jobs=opts.jobs, cold=opts.cold, storage_url=storage_url, run_id=run_id)
    elif confirm:
        ui.warn("--confirm is not run for --num-nodes studies yet: the recommendation is the best single run")
    recommended, baseline = recommendation(study, settings)
    export_path = None
    if recommended is not None:
        export_path = Path(opts.out) if opts.out else default_export_path(storage_url, study_name)
        export_study(study, settings, recommended, baseline, export_path, storage_url)
        _save_note(study, settings, recommended, baseline, export_path, ui)
    return SearchResult(study_name, storage_url, ran, recommended, baseline, export_path)


#: Environment variable giving ``--search``'s default.
ENV_SEARCH = "AUTOTUNE_SEARCH"


def default_search(settings: Mapping[str, Any]) -> str:
    """``--search``'s default for a study: ``flat`` for ``time-to-quality`` and ``pareto``, whose
    figures need the full budget; for the rate objectives (``throughput``, ``goodput``), whose
    stage-1 figure a short run measures, ``$AUTOTUNE_SEARCH`` if set, else ``staged`` (the
    benchmark ``benchmarks/search_efficiency.py`` decides; docs/search.md)."""
    rate = settings["objective"] in ("throughput", "goodput")
    value = os.environ.get(ENV_SEARCH)
    if value:
        return value if rate else "flat"
    return "staged" if rate else "flat"


def staged_plan(add: int, baseline_needed: bool, seeds: int, system_knobs: bool) -> tuple[int, int]:
    """Split a staged run's trials: ``(stage-1 short runs, stage-2 full-budget runs)``.

    The baseline (when the study has none yet) and the ``--enqueue`` configs run first at full
    budget; of the rest, :data:`SYSTEM_FRACTION` (rounded) are stage-1 runs, the others stage 2.
    Without system knobs to search there is no stage 1.

    Args:
        add: Trials this run adds (``--trials``, >= 1).
        baseline_needed: The study has no baseline yet (it takes one of ``add``).
        seeds: ``--enqueue`` configs (each takes one of ``add``).
        system_knobs: The space searches a knob outside :data:`CONVERGENCE_KNOBS`.
    """
    rest = max(0, add - (1 if baseline_needed else 0) - seeds)
    system = round(SYSTEM_FRACTION * rest) if system_knobs else 0
    return system, rest - system


def top_system_configs(trials: Sequence[Any], k: int | None = None, with_speed: bool = False) -> list:
    """The ``k`` (default: all) fastest distinct system configs among completed trials, fastest first.

    A trial's system config is its Optuna params without :data:`CONVERGENCE_KNOBS` (``lr`` or
    ``lr_multiplier``, ``accumulate_grad_batches``) and the user's constructor arguments
    (``model.<arg>``, ``data.<arg>``); a config's speed is the best samples/s any of its trials
    measured. Confirmation runs are left out.

    Args:
        trials: Frozen Optuna trials.
        k: Configs wanted (>= 0), or ``None`` for all.
        with_speed: Return ``(config, samples/s)`` pairs.
    """
    best: dict[str, tuple[float, dict]] = {}
    for t in trials:
        sps = t.user_attrs.get("samples_per_sec")
        if t.state.name != "COMPLETE" or "confirm_of" in t.user_attrs or not sps:
            continue
        system = system_part(t.params)
        key = repr(sorted(system.items()))
        if key not in best or sps > best[key][0]:
            best[key] = (float(sps), system)
    ranked = sorted(best.values(), key=lambda pair: -pair[0])[:k]
    return [(system, speed) for speed, system in ranked] if with_speed else [system for _, system in ranked]


def system_part(params: Mapping[str, Any]) -> dict[str, Any]:
    """The system knobs of a trial's Optuna params (see :func:`top_system_configs`)."""
    from autotune.space import user_arg

    return {name: value for name, value in params.items() if name not in (*CONVERGENCE_KNOBS, "lr_multiplier") and user_arg(name) is None}


#: Largest system grid stage 1 enumerates (see :func:`screen_points`).
SCREEN_MAX_POINTS = 100_000


def screen_points(trials: Sequence[Any], resolved: Mapping[str, Any], convergence: set, seed: int,
                  visited_params: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]] | None:
    """Stage 1's system configs: every point of the system knobs' grid that no trial has visited, in a
    random order (seeded), or ``None`` when the system knobs are not all discrete (or the grid is
    larger than :data:`SCREEN_MAX_POINTS`; the sampler then chooses). Screening without repeats is
    what a short throughput run is for; the sampler's model of the loss constraint matters in stage 2.

    Args:
        trials: The study's frozen trials (their system configs count as visited).
        resolved: The study's resolved space.
        convergence: Optuna parameter names of the convergence knobs (left out of the grid).
        seed: Seed of the order.
        visited_params: More visited points (the baseline's, before its trial exists).
    """
    import itertools
    import math
    import random

    from autotune.samplers import grid_space
    from autotune.space import param_name

    system = {name: entry for name, entry in resolved.items() if param_name(name, entry) not in convergence}
    try:
        grid = grid_space(system)
    except UsageError:
        return None
    if not grid or math.prod(len(v) for v in grid.values()) > SCREEN_MAX_POINTS:
        return None
    visited = {repr(sorted(system_part(p).items())) for p in [*(t.params for t in trials if t.params), *visited_params]}
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    points = [p for p in points if repr(sorted(p.items())) not in visited]
    random.Random(seed).shuffle(points)
    return points


#: Full-budget trials of one system config, none feasible, after which stage 2 takes the next config.
STAGE2_ATTEMPTS = 3


def stage2_round(trials: Sequence[Any], fixed: Mapping[str, Any], k: int = STAGE2_CONFIGS) -> list[tuple[dict, dict]]:
    """The next round of stage 2 of ``--search staged``: ``(params, user attributes)`` of up to ``k`` trials.

    System configs are taken fastest first (stage 1's ranking, :func:`top_system_configs`), skipping
    one that already has a feasible full-budget trial (it is solved), one with
    :data:`STAGE2_ATTEMPTS` full-budget trials and none feasible (its batch does not converge at any
    lr tried), and one no faster than the best feasible trial so far (it cannot win). Each taken config
    runs first at the baseline's lr and accumulation (``fixed``), then with the sampler choosing them.
    An empty round means no system config can beat the best feasible trial.

    Args:
        trials: The study's frozen trials.
        fixed: The baseline's Optuna params of the convergence knobs.
        k: Trials per round (the configs explored side by side).
    """
    full = [t for t in trials if t.state.name == "COMPLETE" and "confirm_of" not in t.user_attrs and "trial_samples" not in t.user_attrs
            and t.user_attrs.get("feasible") is not None]
    incumbent = max((t.user_attrs["samples_per_sec"] for t in full if t.user_attrs.get("feasible")), default=0.0)
    # full-budget attempts: completed or failed (a NaN loss, an OOM), stage-1 runs as long as the budget included
    tried = [t for t in trials if t.state.name in ("COMPLETE", "FAIL") and "confirm_of" not in t.user_attrs and "trial_samples" not in t.user_attrs]
    out: list[tuple[dict, dict]] = []
    for system, speed in top_system_configs(trials, with_speed=True):
        if len(out) == k:
            break
        mine = [t for t in tried if system_part(t.params) == system]
        if speed <= incumbent or any(t.user_attrs.get("feasible") for t in mine) or len(mine) >= STAGE2_ATTEMPTS:
            continue
        at_baseline = any(all(t.params.get(name) == value for name, value in fixed.items()) for t in mine)
        out.append(({**system, **fixed} if not at_baseline else dict(system), {"stage": "full"}))
    return out


def _staged_search(study, settings: Mapping[str, Any], ui, drain: Callable[..., int], add: int, seeds: list, cold: bool = False) -> int:
    """``--search staged``: stage 1 samples the system knobs with short throughput runs (lr,
    accumulation and the user's constructor arguments at the baseline's values); stage 2 trains the
    fastest system configs at full budget in rounds of :data:`STAGE2_CONFIGS` (see
    :func:`stage2_round`), first at the baseline's lr and accumulation, then with the sampler choosing
    those; when no system config can beat the best feasible trial, the rest sample every knob. Trials
    are marked ``stage`` (``system`` or ``full``); short runs are never recommended. One set of warm
    processes serves every round. Returns the trials this process ran."""
    import tempfile

    from autotune.jobs import SlotPools
    from autotune.space import baseline_params, param_name, user_arg

    resolved = settings["space"]
    baseline = TrialConfig.from_dict(settings["baseline_config"])
    convergence = {param_name(name, resolved[name]) for name in resolved if name in CONVERGENCE_KNOBS or user_arg(name) is not None}
    system_knobs = any(param_name(name, entry) not in convergence for name, entry in resolved.items())
    baseline_needed = study.user_attrs.get(BASELINE_ATTR) is None and not _baseline_pending(study)
    n_system, n_full = staged_plan(add, baseline_needed, len(seeds), system_knobs)
    fixed = {key: value for key, value in baseline_params(resolved, baseline).items() if key in convergence}
    ui.info(f"staged search: {n_system} system-knob screening run(s) (lr and accumulation at the baseline's; "
            f"{system_budget(baseline, int(settings['samples']))} samples at the baseline's batch), "
            f"then {n_full} full-budget run(s) of the fastest system configs")
    screen = screen_points(study.get_trials(deepcopy=False), resolved, convergence, int(settings["seed"]) + len(study.trials),
                           [baseline_params(resolved, baseline)])
    if screen is not None:  # a discrete system space: unvisited points, in a seeded random order
        if len(screen) < n_system:
            n_system, n_full = len(screen), n_full + n_system - len(screen)
        first = [({**point, **fixed}, {"stage": "system", "screen": True}) for point in screen[:n_system]]
    else:
        first = [(dict(fixed), {"stage": "system"}) for _ in range(n_system)]
    pools = SlotPools(settings["model_file"], cold, tempfile.mkdtemp(prefix="autotune-warm-"), ui)
    try:
        ran = drain(add=add - n_full, seeds=list(seeds) + first, pools=pools)
        left = n_full
        while left > 0:
            batch = stage2_round(study.get_trials(deepcopy=False), fixed)[:left]
            if not batch:
                ui.info(f"staged search: no system config left that could beat the best feasible trial; "
                        f"the last {left} trial(s) sample every knob")
                ran += drain(add=left, pools=pools)
                break
            ui.info("staged search, stage 2: " + "; ".join(", ".join(f"{k}={v}" for k, v in params.items()) for params, _ in batch))
            ran += drain(add=len(batch), seeds=batch, pools=pools)
            left -= len(batch)
    finally:
        import shutil

        pools.close()
        shutil.rmtree(pools.log_dir, ignore_errors=True)
    return ran


def _check_run_inputs(opts: "SearchOptions", settings: Mapping[str, Any], new_study: bool = False) -> list[tuple[dict, str]]:
    """Check what needs the study's space (``--sampler grid``, ``--enqueue``) before the study is
    created or changed. Returns the ``--enqueue`` seeds.

    Raises:
        UsageError: As :func:`autotune.samplers.make_sampler` and :func:`_seeds`.
    """
    from autotune.samplers import make_sampler

    make_sampler(opts.sampler or "tpe", settings["space"], int(settings["seed"]))
    seeds = _seeds(opts.enqueue or [], settings)
    if new_study and len(seeds) > opts.trials - 1:
        raise UsageError(f"--enqueue gives {len(seeds)} config(s), but --trials {opts.trials} leaves room for {opts.trials - 1} "
                         "after the baseline; raise --trials")
    return seeds


def _seeds(files: Sequence[str], settings: Mapping[str, Any]) -> list[tuple[dict, dict]]:
    """``(params, {"seeded_from": file})`` of each ``--enqueue`` file (a LightningCLI YAML, such as an export).

    Raises:
        UsageError: A missing or unreadable file, not YAML, not a LightningCLI config, or a value
            outside the study's space.
    """
    import yaml

    from autotune.export import config_from_lightning_cli
    from autotune.space import params_of

    baseline = TrialConfig.from_dict(settings["baseline_config"])
    seeds = []
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"--enqueue {file!r} does not exist; give a LightningCLI YAML such as an autotune export")
        try:
            document = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise UsageError(f"--enqueue {file!r} is not valid YAML ({getattr(e, 'problem', e)})") from None
        config = config_from_lightning_cli(document, settings["targets"], baseline, source=file, searched=settings["space"])
        seeds.append((params_of(config, settings["space"], baseline, source=file), {"seeded_from": str(path)}))
    return seeds


#: Environment variable giving ``--pruner``'s default (else ``median``).
ENV_PRUNER = "AUTOTUNE_PRUNER"


def _env_pruner() -> str:
    """``--pruner``'s default: ``$AUTOTUNE_PRUNER`` or ``median`` (checked by ``make_pruner``)."""
    return os.environ.get(ENV_PRUNER) or "median"


def _env_confirm() -> int:
    """``--confirm``'s default: ``$AUTOTUNE_CONFIRM`` or :data:`DEFAULT_CONFIRM`.

    Raises:
        UsageError: The variable is not an integer >= 0.
    """
    value = os.environ.get(ENV_CONFIRM)
    if value is None or value == "":
        return DEFAULT_CONFIRM
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise UsageError(f"${ENV_CONFIRM}={value!r} must be an integer >= 0 (the default of --confirm)")
    return number


def _search_records(study) -> list:
    """:func:`records_of` without confirmation runs and stage-1 runs (their other budgets make them
    incomparable) and duplicates (their figures are another trial's)."""
    every = study.get_trials(deepcopy=False)
    return [r for r in records_of(study) if "confirm_of" not in every[r.number].user_attrs
            and "duplicate_of" not in every[r.number].user_attrs and "trial_samples" not in every[r.number].user_attrs]


def confirm_candidates(study, settings: Mapping[str, Any], k: int) -> list:
    """The ``k`` best distinct feasible configs of the search (by the objective), baseline excluded, as frozen trials."""
    from autotune.objective import recommend

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return []
    every = study.get_trials(deepcopy=False)
    remaining = _search_records(study)
    seen = [every[baseline_info["trial"]].params]
    picked = []
    while len(picked) < k:
        best = recommend(remaining, baseline_info["loss"], settings["loss_tolerance"], settings["objective"], settings["mode"])
        if best is None:
            break
        remaining = [r for r in remaining if r.number != best.number]
        if every[best.number].params not in seen:
            seen.append(every[best.number].params)
            picked.append(every[best.number])
    return picked


def _confirm(study, settings: Mapping[str, Any], ui, k: int, repeats: int, samples: int, *, jobs: int, cold: bool, storage_url: str,
             run_id: str | None = None) -> int:
    """Queue and run the confirmation runs (see :mod:`autotune.confirm`). Returns the runs this process ran."""
    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return 0
    every = study.get_trials(deepcopy=False)
    targets = [every[baseline_info["trial"]], *confirm_candidates(study, settings, k)]
    queued = 0
    for original in targets:
        # runs of the same config (whichever search trial found it) at the same budget count
        done = [t for t in every if "confirm_of" in t.user_attrs and t.params == original.params and t.user_attrs.get("confirm_samples") == samples]
        for _ in range(max(0, repeats - len(done))):
            study.enqueue_trial(dict(original.params), user_attrs={"confirm_of": original.number, "confirm_samples": samples})
            queued += 1
    if not queued:
        return 0
    which = f"the {len(targets) - 1} best config(s) and the baseline" if len(targets) > 1 else "the baseline (no other feasible config)"
    ui.stage(f"confirming {which}: {repeats} run(s) each of {samples} training samples ({queued} to run; --confirm 0 skips this)", queued)
    return drain_queue(study, settings, ui, add=0, jobs=jobs, cold=cold, storage_url=storage_url, stage="confirm", run_id=run_id)


def confirmation(study, settings: Mapping[str, Any]):
    """The confirmation groups of the study's latest confirmation budget, and the :class:`autotune.confirm.Pick`.

    Returns:
        ``(groups, pick, samples)``, or ``None`` when the study has no confirmation run.
    """
    from autotune.confirm import ConfirmGroup, pick
    from autotune.objective import directions

    every = study.get_trials(deepcopy=False)
    runs = [t for t in every if "confirm_of" in t.user_attrs]
    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if not runs or baseline_info is None:
        return None
    samples = runs[-1].user_attrs["confirm_samples"]
    runs = [t for t in runs if t.user_attrs["confirm_samples"] == samples]
    baseline_params = every[baseline_info["trial"]].params
    groups = []
    for number in dict.fromkeys(t.user_attrs["confirm_of"] for t in runs):
        mine = [t for t in runs if t.user_attrs["confirm_of"] == number]
        complete = [t for t in mine if t.state.name == "COMPLETE"]
        params = every[number].params
        groups.append(ConfirmGroup(
            number=number,
            values=tuple(_objective_value(t, settings["objective"]) for t in complete),
            losses=tuple(float(t.user_attrs.get("loss", math.nan)) for t in complete),
            failed=sum(t.state.name == "FAIL" for t in mine),
            distance=sum(params.get(name) != value for name, value in baseline_params.items()),
            baseline=number == baseline_info["trial"],
            runs=tuple(t.number for t in complete),
        ))
    maximize = directions(settings["objective"], settings["mode"])[0] == "maximize"
    return groups, pick(groups, maximize, settings["loss_tolerance"], settings["mode"]), samples


def _objective_value(trial, objective: str) -> float:
    """The figure a confirmation run is judged by (samples/s for ``throughput`` and ``pareto``)."""
    attrs = trial.user_attrs
    if objective == "time-to-quality":
        return _seconds_to_target(attrs)
    if objective == "goodput":
        return float(attrs.get("goodput", math.nan))
    return float(attrs.get("samples_per_sec", math.nan))


def _search_node(num_nodes: int, node_rank: int | None, node_group: str | None):
    """The node identity of ``autotune search``, which must be node rank 0.

    Raises:
        UsageError: A node rank outside ``[0, num_nodes)``, or other than 0.
    """
    from autotune.nodes import node_identity

    identity = node_identity(num_nodes, node_rank, node_group)
    if identity.node_rank != 0:
        raise UsageError(
            f"autotune search runs node rank 0 of a {num_nodes}-node trial, but this node's rank is {identity.node_rank}; "
            "run `autotune worker --node-rank K` on the other nodes (or unset NODE_RANK / give --node-rank 0)"
        )
    return identity


def _leader(study, settings: Mapping[str, Any], node_rank: int | None, node_group: str | None, command: str, ui):
    """The :class:`autotune.nodes.LeaderChannel` of a multi-node study's node-0 process, else ``None``.

    Raises:
        UsageError: ``command`` is ``autotune search`` on a node rank other than 0.
    """
    from autotune.nodes import LeaderChannel, node_identity

    num_nodes = int(settings.get("num_nodes", 1))
    if num_nodes == 1:
        return None
    identity = _search_node(num_nodes, node_rank, node_group) if command == "autotune search" else node_identity(num_nodes, node_rank, node_group)
    if identity.node_rank != 0:
        return identity
    ui.info(f"multi-node trials: this is node 0 of group {identity.group!r} at {identity.master_addr}; "
            f"start `autotune worker --node-rank K --node-group {identity.group}` on {num_nodes - 1} other node(s)")
    return LeaderChannel(study, identity, num_nodes)


def run_worker(storage_url: str, study_name: str | None, ui, *, jobs: int = 1, cold: bool = False, timeout: float | None = None,
               node_rank: int | None = None, node_group: str | None = None) -> SearchResult:
    """Join an existing study and run its queued trials (``autotune worker``).

    Every setting comes from the study. The worker stops when the study's queue is empty (its shared
    budget is spent), after ``timeout`` seconds, or on Ctrl-C. The model file must be at the same
    path on this machine as where the study was created (a shared file system or the same checkout).

    Raises:
        StorageError: The storage or study cannot be opened.
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C.
    """
    import optuna

    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, settings = load_study(study_name, storage_url)
    study = optuna.load_study(study_name=study.study_name, storage=open_storage(storage_url, create=False, heartbeat=True))
    if not Path(settings["model_file"]).is_file():
        raise UsageError(f"study {study.study_name!r} trains {settings['model_file']!r}, which is not on this machine; use the same path here")
    study.sampler = _make_sampler(settings, len(study.trials) + os.getpid())
    ui.info(f"worker on study {study.study_name!r} in {mask_url(storage_url)} ({len(study.trials)} trials so far)")
    leader = _leader(study, settings, node_rank, node_group, "autotune worker", ui)
    if leader is not None and jobs != 1:  # a multi-node study (either end of it)
        raise UsageError(f"--jobs {jobs}: a multi-node trial takes whole nodes; use --jobs 1")
    from autotune.nodes import NodeIdentity, follow

    if isinstance(leader, NodeIdentity):  # a node other than 0: run its ranks of the leader's trials
        ui.info(f"node {leader.node_rank} of group {leader.group!r}: following node 0's trials")
        ran = follow(study, leader, ui, devices=int(settings["devices"]), timeout=timeout)
        recommended, baseline = recommendation(study, settings)
        return SearchResult(study.study_name, storage_url, ran, recommended, baseline, None)
    ran = drain_queue(study, settings, ui, add=0, jobs=jobs, cold=cold, storage_url=storage_url, timeout=timeout, leader=leader)
    recommended, baseline = recommendation(study, settings)
    return SearchResult(study.study_name, storage_url, ran, recommended, baseline, None)


def _plan_slots(settings: Mapping[str, Any], jobs: int):
    from autotune.hardware import Hardware
    from autotune.jobs import plan_slots

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return plan_slots(Hardware.from_dict(settings["hardware"]), int(settings["devices"]), jobs, cpus)


def _claim(study, baseline_only: bool):
    """Atomically take a WAITING trial of the study (the shared budget), as Optuna's ``ask`` does.

    Returns:
        An ``optuna.trial.Trial`` now RUNNING, or ``None`` when no (baseline, if ``baseline_only``)
        trial is waiting.
    """
    import optuna

    storage = study._storage
    first = _first_baseline(study) if baseline_only else None
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if baseline_only and frozen.number != first:
            continue
        try:
            if not storage.set_trial_state_values(frozen._trial_id, state=optuna.trial.TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        if hasattr(storage, "get_heartbeat_interval") and storage.get_heartbeat_interval():
            # at once: a trial RUNNING without any heartbeat is never found stale, and would wait forever
            storage.record_heartbeat(frozen._trial_id)
        study.sampler.before_trial(study, storage.get_trial(frozen._trial_id))
        return optuna.trial.Trial(study, frozen._trial_id)
    return None


def _first_baseline(study) -> int | None:
    """Number of the study's baseline trial: its first baseline-flagged trial that did not fail."""
    numbers = [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.state.name != "FAIL"]
    return min(numbers) if numbers else None


def _others_running(study, ctx: "_RunContext") -> bool:
    """Whether a trial that this process did not take is still RUNNING (in another worker)."""
    mine = set(ctx.asked)
    return any(t.state.name == "RUNNING" and t.number not in mine for t in study.get_trials(deepcopy=False))


def _baseline_pending(study) -> bool:
    """Whether a baseline trial is waiting or running (so its result is still to come)."""
    return any(
        t.user_attrs.get("baseline") and t.state.name in ("WAITING", "RUNNING") for t in study.get_trials(deepcopy=False)
    )


def drain_queue(study, settings: Mapping[str, Any], ui, *, add: int, jobs: int = 1, cold: bool = False,
                storage_url: str = "", timeout: float | None = None, leader: Any = None, seeds: Sequence[tuple[dict, dict]] = (),
                pruner: tuple[str, int] | None = None, stage: str = "search", pools: Any = None, run_id: str | None = None) -> int:
    """Add ``add`` trials to the study's queue (its shared budget), then run queued trials until none is left.

    The budget lives in the storage as WAITING trials, which any ``search`` or ``worker`` process
    takes atomically (Optuna's own queue), so many processes on many machines run each budgeted trial
    once. A new study's first queued trial is the baseline; the rest of this run's trials are queued
    only when it has completed, and no process starts a sampled trial before that. Stale trials (a
    worker that stopped sending heartbeats) are failed and retried once (Optuna's
    ``RetryFailedTrialCallback``).

    Args:
        study, settings: The study and its autotune settings.
        ui: Output.
        add: Trials this run adds to the budget (0 for ``autotune worker``).
        jobs: Trials at once in this process (see :mod:`autotune.jobs`).
        cold: Start trials as fresh processes instead of forking warm ones.
        storage_url: For the resume command.
        timeout: Stop taking new trials after this many seconds.
        leader: For multi-node trials, this node-0 process's :class:`autotune.nodes.LeaderChannel`
            (trials then start cold, and the other nodes' ranks join each one).
        seeds: ``(params, user attributes)`` of trials to queue before sampled ones, counted in
            ``add``: known configs (``--enqueue``), a staged search's trials (partial params: the
            sampler chooses the rest).
        pruner: ``(name, startup trials)`` of :func:`autotune.pruning.make_pruner` for running trials
            (default: ``$AUTOTUNE_PRUNER`` or ``median``, after 5 completed trials).
        stage: Recorded with the run's figures (``search``, ``confirm``).
        pools: A :class:`autotune.jobs.SlotPools` the caller owns (its warm processes outlive this
            call: a staged search drains the queue several times), else one made and closed here.
        run_id: Groups this call's figures with the other calls of one ``search`` run.

    Returns:
        Trials this process ran.

    Raises:
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C; running trials are stored as failed (``interrupted``), queued ones stay.
    """
    import optuna

    from autotune.jobs import SlotPools
    from autotune.space import baseline_params, suggest_config

    resolved = settings["space"]
    baseline_config = TrialConfig.from_dict(settings["baseline_config"])
    _fail_stale(study)
    pending = [0]
    seeds = list(seeds)

    def queue(n: int) -> None:
        """Queue ``n`` trials: the seeded configs first (``--enqueue``), then sampled ones."""
        for i in range(n):
            if seeds:
                params, user_attrs = seeds.pop(0)
                study.enqueue_trial(params, user_attrs=user_attrs)
            else:
                study.enqueue_trial({})

    if add:
        if study.user_attrs.get(BASELINE_ATTR) is None:
            if not _baseline_pending(study):
                study.enqueue_trial(baseline_params(resolved, baseline_config), user_attrs={"baseline": True})
                add -= 1
            pending[0] = add
        else:
            queue(add)
    slots = _plan_slots(settings, jobs)
    if len(slots) > 1:
        ui.info("parallel trials on disjoint resources (throughput measured under shared host resources): " + "; ".join(s.description for s in slots))
    import tempfile

    cold = cold or leader is not None  # the other nodes start their ranks cold too
    own_pools = pools is None
    log_dir = tempfile.mkdtemp(prefix="autotune-warm-") if own_pools else pools.log_dir
    ctx = _RunContext(slots, SlotPools(settings["model_file"], cold, log_dir, ui) if own_pools else pools, len(slots))
    ctx.leader = leader
    ctx.log_dir = log_dir
    from autotune.pruning import make_pruner

    pruner = pruner or (_env_pruner(), 5)
    ctx.pruner, ctx.pruner_name = make_pruner(*pruner), pruner[0]
    deadline = time.monotonic() + timeout if timeout else None
    failed_baseline: list[Any] = []

    def work() -> None:
        while not ctx.stop.is_set() and not failed_baseline and (deadline is None or time.monotonic() < deadline):
            with ctx.lock:
                _fail_stale(study)
                need_baseline = study.user_attrs.get(BASELINE_ATTR) is None
                if pending[0] and not need_baseline:
                    # the baseline completed (here, or in another process that started this study at the same time)
                    queue(pending[0])
                    pending[0] = 0
                trial = _claim(study, baseline_only=need_baseline)
                if trial is not None:
                    ctx.asked.append(trial.number)
            if trial is None:
                if need_baseline:
                    if study.user_attrs.get(BASELINE_ATTR) is not None:
                        continue  # the baseline completed meanwhile: take a sampled trial
                    baselines = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline")]
                    coming = any(t.state.name in ("WAITING", "RUNNING", "COMPLETE") for t in baselines)
                    if coming or (not baselines and time.monotonic() - run_start < BASELINE_WAIT):
                        time.sleep(1.0)  # another process runs (or is about to queue, or to publish) the baseline
                        continue
                    if not failed_baseline:
                        failed_baseline.append(None)
                    return
                if _others_running(study, ctx):
                    # the queue is empty, but another process's trial may still go stale and be retried
                    time.sleep(1.0)
                    continue
                return
            # the study's baseline is its first queued baseline trial; another one (two `search` processes
            # started the study at once) runs after it as a repeat of the baseline config
            is_baseline = need_baseline or (bool(trial.user_attrs.get("baseline")) and trial.number == _first_baseline(study))
            if trial.user_attrs.get("baseline") and not is_baseline:
                trial.set_user_attr("baseline_repeat", True)
            frozen = _run_one(study, trial, suggest_config(trial, resolved, baseline_config), settings, is_baseline, ui, ctx)
            if not is_baseline:
                continue
            if frozen.state != optuna.trial.TrialState.COMPLETE:
                failed_baseline.append(frozen)
                return
            with ctx.lock:
                queue(pending[0])  # queue first, then publish the baseline: no worker sees an empty queue
                pending[0] = 0
                study.set_user_attr(
                    BASELINE_ATTR,
                    {
                        "trial": frozen.number,
                        "samples_per_sec": frozen.user_attrs["samples_per_sec"],
                        "loss": frozen.user_attrs["loss"],
                        "loss_target": frozen.user_attrs.get("loss_target"),
                    },
                )

    run_start = time.monotonic()
    try:
        ctx.pools.start_all(slots)
        if ctx.jobs == 1:
            work()
        else:
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(max_workers=ctx.jobs) as executor:
                futures = [executor.submit(work) for _ in range(ctx.jobs)]
                try:
                    for future in futures:
                        future.result()
                except KeyboardInterrupt:
                    ctx.stop.set()
                    ctx.kill_running()
                    concurrent.futures.wait(futures)
                    raise
    except KeyboardInterrupt:
        ctx.stop.set()
        ctx.kill_running()
        for number in ctx.asked:  # Ctrl-C may land between taking a trial and telling it
            _fail_interrupted(study, number)
        waiting = any(t.state.name == "WAITING" for t in study.get_trials(deepcopy=False))
        resume = ""
        if waiting and not pending[0]:
            resume = shlex.join(["autotune", "worker", "--study-name", settings["study_name"], "--storage", mask_url(storage_url)])
        elif pending[0]:
            resume = _resume_command(settings, storage_url, pending[0] + 1)
        raise Interrupted(resume) from None
    finally:
        if own_pools:
            ctx.pools.close()
        if leader is not None:
            try:
                leader.close()
            except Exception:  # the followers also stop when the study has nothing left to run
                pass
        import shutil

        if own_pools:
            shutil.rmtree(log_dir, ignore_errors=True)
        _record_run(study, run_start, ctx, cold, stage, run_id)
    if failed_baseline:
        frozen = failed_baseline[0]
        if frozen is None:
            failed = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.state.name == "FAIL"]
            if not failed:
                raise BaselineFailedError(f"study {settings['study_name']!r} has no baseline queued; start it with `autotune search` first")
            frozen = failed[-1]
        reason = frozen.user_attrs.get("fail_reason") or "see `autotune show`"
        number = frozen.number
        raise BaselineFailedError(
            f"the baseline trial {number} (the model's own config) failed: {reason}; "
            "fix the model or its --config so the baseline trains (or raise --trial-timeout), then run the same command again; "
            "the study is inspected again while it has no baseline"
        )
    return len(ctx.asked)


def _fail_stale(study) -> None:
    """Fail trials whose worker stopped sending heartbeats (RDB storages with heartbeats only)."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _record_run(study, run_start: float, ctx: _RunContext, cold: bool, stage: str = "search", run_id: str | None = None) -> None:
    """Append this run's overhead figures to the study's ``runs`` attribute (best effort)."""
    try:
        wall = time.monotonic() - run_start
        every = study.get_trials(deepcopy=False)
        trials = [every[n] for n in ctx.asked]
        training = sum(t.user_attrs.get("training_seconds", 0.0) for t in trials)
        runs = list(study.user_attrs.get("runs", []))
        runs.append(
            {
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "trials": len(trials),
                "jobs": ctx.jobs,
                "launch": "cold" if cold else "warm",
                "wall_seconds": wall,
                "training_seconds": training,
                "overhead_fraction": 1.0 - training / (wall * ctx.jobs) if wall > 0 else None,
                "stage": stage,
                "run_id": run_id,
            }
        )
        study.set_user_attr("runs", runs)
    except Exception:  # figures only; never hide the run's own outcome
        pass


def default_export_path(storage_url: str, study_name: str) -> Path:
    """``<folder of the SQLite file>/<name>.best.yaml``, or ``studies/<name>.best.yaml``."""
    path = _sqlite_path(storage_url)
    folder = path.parent if path is not None else Path("studies")
    return folder / f"{study_name}.best.yaml"


def records_of(study) -> list:
    """:class:`~autotune.objective.TrialRecord` of every trial of a study."""
    import optuna

    from autotune.objective import TrialRecord

    out = []
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        out.append(
            TrialRecord(
                number=t.number,
                complete=t.state == optuna.trial.TrialState.COMPLETE,
                samples_per_sec=float(attrs.get("samples_per_sec", math.nan)),
                loss=float(attrs.get("loss", math.nan)),
                baseline=bool(attrs.get("baseline", False)),
                time_to_target=_seconds_to_target(attrs),
                target_reached=bool(attrs.get("target_reached", False)),
                goodput=float(attrs.get("goodput", math.nan)),
            )
        )
    return out


def _seconds_to_target(attrs: Mapping[str, Any]) -> float:
    """A trial's stored ``time_to_target``: ``inf`` when stored as None (never reached), NaN when absent."""
    if "time_to_target" not in attrs:
        return math.nan
    value = attrs["time_to_target"]
    return math.inf if value is None else float(value)


def recommendation(study, settings: Mapping[str, Any]):
    """``(recommended_trial, baseline_trial)`` as Optuna FrozenTrials (either may be ``None``).

    When the study has confirmation runs, the recommendation is the confirmed config
    :func:`autotune.confirm.pick` chooses, represented by its run closest to its median, and the
    baseline likewise by its median confirmation run (both at the confirmation budget); otherwise
    the best single search trial and the baseline trial.
    """
    from autotune.objective import recommend

    baseline_info = study.user_attrs.get(BASELINE_ATTR)
    if baseline_info is None:
        return None, None
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    baseline = trials.get(baseline_info["trial"])
    confirmed = confirmation(study, settings)
    if confirmed is not None:
        groups, choice, _ = confirmed
        base_group = next((g for g in groups if g.baseline), None)
        if base_group is not None and base_group.median_run() is not None:
            baseline = trials[base_group.median_run()]
        return (trials[choice.chosen.median_run()] if choice.chosen else None), baseline
    best = recommend(_search_records(study), baseline_info["loss"], settings["loss_tolerance"], settings["objective"], settings["mode"])
    return (trials[best.number] if best else None), baseline


def _versions() -> str:
    import importlib.metadata as md

    parts = []
    for name in ("torch", "lightning", "optuna", "autotune"):
        try:
            parts.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            continue
    return ", ".join(parts)


def export_study(study, settings: Mapping[str, Any], trial, baseline, out: Path, storage_url: str) -> Path:
    """Write the LightningCLI YAML of ``trial`` to ``out`` (its folder is created). Returns ``out``."""
    from autotune.export import lightning_cli_config, render_yaml
    from autotune.hardware import Hardware
    from autotune.report import flops_line, input_bound_line, quality_line
    from autotune.loader import read_user_config

    config = TrialConfig.from_dict(trial.user_attrs["config"])
    user_config = settings.get("user_config") or read_user_config(None)
    doc, notes = lightning_cli_config(config, settings["targets"], user_config, has_datamodule=settings["data_class"] is not None,
                                      model_info=settings.get("model_info"), baseline=TrialConfig.from_dict(settings["baseline_config"]))
    doc = {**user_config.get("extra", {}), **doc}
    sps, loss = trial.user_attrs["samples_per_sec"], trial.user_attrs["loss"]
    b_sps, b_loss = baseline.user_attrs["samples_per_sec"], baseline.user_attrs["loss"]
    source = trial.user_attrs.get("loss_source", settings["monitor"])
    speed = confirmed_speed(study, settings)
    if speed is not None:
        measured = (f"measured: median {speed['samples_per_sec']:,.0f} samples/s over {speed['runs']} confirmation runs of the config of "
                    f"trial {speed['trial']} vs the baseline's median {speed['baseline_samples_per_sec']:,.0f} samples/s: speedup "
                    f"{speed['samples_per_sec'] / speed['baseline_samples_per_sec']:.2f}x")
    else:
        measured = f"measured: {sps:,.0f} samples/s vs baseline {b_sps:,.0f} samples/s (trial {baseline.number}): speedup {sps / b_sps:.2f}x"
    header = [
        "autotune recommendation (LightningCLI config)",
        f"study: {settings['study_name']} ({mask_url(storage_url)}), trial {trial.number} of {len(study.trials)}",
        measured,
        f"{source}: {loss:.4g} vs baseline {b_loss:.4g} (tolerance {settings['loss_tolerance']:.0%}), after {_budget(trial.user_attrs, settings)} training samples",
        *confirmation_lines(study, settings),
        f"effective batch size: {config.effective_batch_size}; objective: {settings['objective']}",
        *([flops] if (flops := flops_line(trial)) else []),
        *([quality] if (quality := quality_line(trial, baseline)) else []),
        *([advice] if (advice := input_bound_line(trial, settings)) else []),
        f"hardware: {Hardware.from_dict(settings['hardware']).describe()}, devices={config.devices}" + (f" x {config.num_nodes} nodes" if config.num_nodes > 1 else ""),
        f"versions: {_versions()}",
        f"run: python YOUR_LIGHTNING_CLI_SCRIPT.py fit --config {out}",
        "",
    ]
    check_out_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_yaml(doc, header, notes))
    return out


def confirmed_speed(study, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """Median samples/s of the recommended confirmed config's runs and of the baseline's, or ``None``.

    Returns:
        ``{"trial", "samples_per_sec", "runs", "baseline_trial", "baseline_samples_per_sec", "baseline_runs", "samples"}``.
    """
    import statistics

    confirmed = confirmation(study, settings)
    if confirmed is None or confirmed[1].chosen is None:
        return None
    groups, choice, samples = confirmed
    base = next((g for g in groups if g.baseline), None)
    every = study.get_trials(deepcopy=False)

    def speed(group) -> float:
        return statistics.median(every[n].user_attrs["samples_per_sec"] for n in group.runs) if group and group.runs else math.nan

    return {"trial": choice.chosen.number, "samples_per_sec": speed(choice.chosen), "runs": len(choice.chosen.runs),
            "baseline_trial": base.number if base else None, "baseline_samples_per_sec": speed(base),
            "baseline_runs": len(base.runs) if base else 0, "samples": samples}


def confirmation_lines(study, settings: Mapping[str, Any]) -> list[str]:
    """Lines on the confirmation of the recommendation (for the export header and the summary)."""
    confirmed = confirmation(study, settings)
    if confirmed is None:
        return []
    groups, choice, samples = confirmed
    if choice.chosen is None:
        return [f"confirmation ({samples} samples per run): no confirmed config is eligible"]
    unit = {"time-to-quality": "s to target", "goodput": "goodput samples/s"}.get(settings["objective"], "samples/s")
    def num(value: float) -> str:
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"

    g = choice.chosen
    lines = [f"confirmed: config of trial {g.number}, median of {len(g.values)} runs of {samples} samples: "
             f"{num(g.median)} {unit} (spread {num(g.spread)})"]
    base = next((x for x in groups if x.baseline), None)
    if base is not None:
        lines[0] += f" vs baseline median {num(base.median)} (spread {num(base.spread)})"
    if choice.best is not None and choice.best is not g:
        lines.append(f"within noise: trial {choice.best.number}'s config has the best median ({num(choice.best.median)}), but the difference "
                     f"is within the measured spread; recommending the config closer to the baseline ({g.distance} knob(s) changed)")
    elif choice.within_noise:
        lines.append("within noise of it: " + ", ".join(f"trial {x.number} ({num(x.median)})" for x in choice.within_noise))
    for x, reason in choice.ineligible:
        lines.append(f"not recommended: config of trial {x.number}: {reason}")
    return lines


def check_out_path(out: Path) -> None:
    """Check that a YAML can be written at ``out``.

    Raises:
        UsageError: ``out`` is a folder, or a part of its folder path is a file.
    """
    if out.is_dir():
        raise UsageError(f"--out {str(out)!r} is a folder; give a file path such as {str(out / 'best.yaml')!r}")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"--out {str(out)!r}: {str(parent)!r} is a file, not a folder")
            break


def _save_note(study, settings, trial, baseline, export_path: Path, ui) -> None:
    """Save the recommendation as the study's note in optuna-dashboard (best effort)."""
    try:
        from optuna_dashboard import save_note
    except ImportError:  # pragma: no cover - optuna-dashboard is a dependency
        return
    from autotune.report import input_bound_line, quality_line

    config = trial.user_attrs["config"]
    sps, b_sps = trial.user_attrs["samples_per_sec"], baseline.user_attrs["samples_per_sec"]
    rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in config.items())
    note = (
        f"## autotune recommendation: trial {trial.number}\n\n"
        f"**{sps:,.0f} samples/s**, {sps / b_sps:.2f}x the baseline (trial {baseline.number}, {b_sps:,.0f} samples/s); "
        f"{trial.user_attrs.get('loss_source')} {trial.user_attrs['loss']:.4g} vs baseline {baseline.user_attrs['loss']:.4g} "
        f"(tolerance {settings['loss_tolerance']:.0%}).\n\n| knob | value |\n|---|---|\n{rows}\n\n"
        f"Exported to `{export_path}` (updated {time.strftime('%Y-%m-%d %H:%M:%S')}).\n"
    )
    for line in (quality_line(trial, baseline), input_bound_line(trial, settings)):
        if line:
            note += f"\n{line}\n"
    try:
        save_note(study, note)
    except Exception as e:  # the note is a convenience; the export already succeeded
        ui.warn(f"could not save the dashboard note: {e}")
