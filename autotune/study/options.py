"""What ``autotune search`` was asked to do: :class:`SearchOptions`, the only home of the defaults
(flags and environment variables), and the checks that run before anything is created."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import UsageError, did_you_mean
from autotune.objective import OBJECTIVES, validate_tolerance
from autotune.pruning import PRUNERS, make_pruner
from autotune.samplers import SAMPLERS

#: Environment variable read when ``--storage`` is not given.
ENV_STORAGE = "AUTOTUNE_STORAGE"


#: Environment variable giving ``--confirm``'s default (else :data:`DEFAULT_CONFIRM`).
ENV_CONFIRM = "AUTOTUNE_CONFIRM"


#: Configs confirmed after the search by default (besides the baseline).
DEFAULT_CONFIRM = 3


#: Environment variable giving ``--pruner``'s default (else ``median``).
ENV_PRUNER = "AUTOTUNE_PRUNER"


#: Environment variable giving ``--search``'s default.
ENV_SEARCH = "AUTOTUNE_SEARCH"


#: Values of ``--search`` (see :func:`staged_plan`).
SEARCHES = ("staged", "flat")


DEFAULTS: dict[str, Any] = {
    "objective": "throughput",
    "loss_tolerance": 0.05,
    "monitor": "val_loss",
    "mode": "min",
    "samples": 8192,
    "trial_timeout": 900.0,
    "seed": 0,
}


#: Largest ``--seed``: NumPy's (and so Lightning's ``seed_everything``) seeds are 32-bit unsigned.
MAX_SEED = 2**32 - 1


def option_defaults() -> dict[str, Any]:
    """Each :class:`SearchOptions` field's default (``None``: the study's value, else :data:`DEFAULTS`)."""
    return {f.name: f.default for f in dataclasses.fields(SearchOptions) if f.default is not dataclasses.MISSING}


#: Seconds a worker waits for the creator of a new study to queue its baseline.
BASELINE_WAIT = 120


@dataclass
class SearchOptions:
    """What ``autotune search`` was asked to do; ``None`` means "the study's value, else the default"."""

    model_file: str
    trials: int = 20
    model_class: str | None = None
    data_class: str | None = None
    config_file: str | None = None
    cli_script: str | None = None
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
    confirm_repeats: int = 6  # --confirm-pairs (--confirm-repeats): the pair cap of each race
    confirm_samples: int | None = None
    confirm_share: float = 0.2
    search: str | None = None


def check_search_options(opts: SearchOptions) -> None:
    """Validate the numeric and choice flags of a search.

    Raises:
        UsageError: ``--trials`` < 1, ``--samples`` < 1, ``--trial-timeout`` <= 0, ``--devices`` < 1,
            ``--jobs`` < 1, ``--seed`` outside ``0..2**32 - 1``, an unknown ``--objective`` or ``--mode``,
            ``--loss-tolerance`` outside ``[0, 1)``, and the other flags' ranges and choices.
    """

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
    if opts.jobs < 1:
        raise UsageError(f"--jobs must be >= 1 (trials at once), got {opts.jobs}")
    if opts.seed is not None and not 0 <= opts.seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..{MAX_SEED} (the seeds NumPy and Lightning accept), got {opts.seed}")

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
        raise UsageError(f"unknown --sampler {opts.sampler!r}; choose one of {list(SAMPLERS)}{did_you_mean(opts.sampler, SAMPLERS)}")
    if opts.confirm is not None and opts.confirm < 0:
        raise UsageError(f"--confirm must be >= 0 (configs re-run before recommending; 0 turns it off), got {opts.confirm}")
    if opts.confirm_repeats < 3:
        raise UsageError(f"--confirm-pairs must be >= 3 (the fewest pairs that can show a candidate better), got {opts.confirm_repeats}")
    if not 0 < opts.confirm_share < 1:
        raise UsageError(
            f"--confirm-share must be a fraction of the run's wall time, 0 < share < 1 (default 0.2), got {opts.confirm_share}"
        )
    if opts.confirm_samples is not None and opts.confirm_samples < 1:
        raise UsageError(f"--confirm-samples must be >= 1 (training samples per confirmation run), got {opts.confirm_samples}")
    if (opts.num_nodes or 1) > 1 and opts.jobs != 1:
        raise UsageError(f"--jobs {opts.jobs} with --num-nodes {opts.num_nodes}: a multi-node trial takes whole nodes; use --jobs 1")
    if opts.objective is not None and opts.objective not in OBJECTIVES:
        raise UsageError(f"--objective {opts.objective!r} is not one of {list(OBJECTIVES)}{did_you_mean(opts.objective, OBJECTIVES)}")
    if opts.mode is not None and opts.mode not in ("min", "max"):
        raise UsageError(f"--mode must be 'min' or 'max', got {opts.mode!r}")
    if opts.loss_tolerance is not None:
        validate_tolerance(opts.loss_tolerance)
    if opts.search is not None and opts.search not in SEARCHES:
        raise UsageError(
            f"unknown --search {opts.search!r}; choose one of {list(SEARCHES)}{did_you_mean(opts.search, SEARCHES)} (docs/search.md)"
        )
    if opts.search is None and os.environ.get(ENV_SEARCH) and os.environ[ENV_SEARCH] not in SEARCHES:
        raise UsageError(f"${ENV_SEARCH}={os.environ[ENV_SEARCH]!r} must be one of {list(SEARCHES)} (the default of --search)")
    if opts.search == "staged" and opts.objective not in (None, "throughput", "goodput"):
        raise UsageError(
            f"--search staged ranks stage 1 by samples/s, which does not decide --objective {opts.objective}; use --search flat"
        )
    if opts.search == "staged" and opts.sampler == "grid":
        raise UsageError("--search staged with --sampler grid: the grid runs every combination once; use --search flat")
    if opts.search == "staged" and (opts.num_nodes or 1) > 1:
        raise UsageError(
            f"--search staged with --num-nodes {opts.num_nodes}: a multi-node study runs flat (its nodes follow one "
            "queue of full-budget trials); use --search flat"
        )


#: Words of a metric's name that mean a higher value is better, and words that mean a lower one is
#: (``val_acc``, ``val/f1``, ``test_auroc``; but ``val_top1_error``): :func:`check_monitor_mode`.
_HIGHER_WORDS = frozenset(
    [
        "acc",
        "accuracy",
        "f1",
        "fbeta",
        "auc",
        "auroc",
        "auprc",
        "ap",
        "map",
        "precision",
        "recall",
        "iou",
        "jaccard",
        "dice",
        "bleu",
        "rouge",
        "r2",
        "psnr",
        "ssim",
        "top",
    ]
)
_LOWER_WORDS = frozenset(["loss", "err", "error", "mse", "mae", "rmse", "nll", "ppl", "perplexity", "wer", "cer", "fid", "distance"])


def check_monitor_mode(monitor: str | None, mode: str | None) -> None:
    """Refuse a new study that would minimise a metric whose name says higher is better.

    Raises:
        UsageError: ``mode`` was not given (so ``min``) and ``monitor`` reads like an accuracy or a
            score (a word of :data:`_HIGHER_WORDS` and none of :data:`_LOWER_WORDS`): the loss
            tolerance would then call a config feasible for a *lower* accuracy (a new user's
            ``--monitor val_acc`` study marked 0.83 feasible against the baseline's 0.96).
    """
    if mode is not None or not monitor:
        return
    if _reads_as(monitor) == "max":
        raise UsageError(
            f"--monitor {monitor} reads like a score where higher is better, but --mode defaults to min; "
            "pass --mode max (or --mode min if lower is better)"
        )


def _reads_as(monitor: str) -> str | None:
    """``"max"`` when a metric's name reads like a score (a word of :data:`_HIGHER_WORDS` and none of
    :data:`_LOWER_WORDS`), ``"min"`` when it reads like a loss or an error (the other way round, and
    no ``neg``: ``neg_loss`` is maximised), else ``None``."""
    import re

    words = set(re.findall(r"[a-z]+[0-9]*", monitor.lower())) | set(re.findall(r"[a-z]+", monitor.lower()))
    if words & _HIGHER_WORDS and not words & _LOWER_WORDS:
        return "max"
    if words & _LOWER_WORDS and not words & (_HIGHER_WORDS | {"neg", "negative"}):
        return "min"
    return None


def monitor_mode_warning(monitor: str | None, mode: str | None) -> str | None:
    """A warning when an explicit ``--mode`` goes against what the ``--monitor``'s name reads as
    (:func:`_reads_as`): ``--monitor val_loss --mode max`` calls a config feasible for a *higher*
    loss (helper-29's study was accepted silently). A warning, not a refusal: the user chose the mode."""
    reads = _reads_as(monitor) if monitor and mode else None
    if reads is None or reads == mode:
        return None
    what = "a loss or an error, where lower is better" if reads == "min" else "a score, where higher is better"
    return (
        f"--monitor {monitor} reads like {what}, but --mode {mode} {'maximises' if mode == 'max' else 'minimises'} it: "
        f"a config is then feasible for a {'higher' if mode == 'max' else 'lower'} {monitor}; pass --mode {reads} if that is not what you meant"
    )


def default_study_name(model_file: str | Path) -> str:
    """The file's stem, or its folder's name for ``model.py`` (``examples/digits/model.py`` -> ``digits``)."""
    path = Path(model_file).resolve()
    return path.parent.name if path.stem == "model" else path.stem


#: Longest study name autotune creates, in characters (file names derived from it add up to 12).
MAX_STUDY_NAME = 128


def check_study_name(name: str) -> None:
    """Check a new study's name: it names files (``studies/<name>.db``, ``<name>.best.yaml``) and is
    written into the export's header, so it must be a plain name.

    Raises:
        UsageError: ``name`` is empty or longer than :data:`MAX_STUDY_NAME`, starts with ``.``, or
            holds a path separator or a control character (a newline, a tab).
    """
    fix = "give --study-name a plain name such as 'digits' or 'resnet50-a100' (letters, digits, '-', '_', '.')"
    if not name or len(name) > MAX_STUDY_NAME:
        raise UsageError(f"study name {name!r} must be 1 to {MAX_STUDY_NAME} characters; {fix}")
    if name.startswith("."):
        raise UsageError(f"study name {name!r} starts with '.', which would make hidden or parent-folder files; {fix}")
    bad = sorted({c for c in name if c in "/\\" or c == os.sep or not c.isprintable()})
    if bad:
        raise UsageError(f"study name {name!r} holds {''.join(bad)!r} (a path separator or control character); {fix}")


def file_stem(study_name: str) -> str:
    """The study's name made safe as a file name in its folder: path separators, control characters
    and a leading ``.`` become ``_`` (names :func:`check_study_name` accepts are unchanged; names
    made elsewhere, for example by another tool in a shared database, never leave the folder)."""
    stem = "".join("_" if c in "/\\" or c == os.sep or not c.isprintable() else c for c in study_name[:MAX_STUDY_NAME])
    return "_" + stem[1:] if stem.startswith(".") else stem or "_"


def default_storage(study_name: str) -> str:
    """``sqlite:///studies/<name>.db``, relative to the working directory (the name made safe by :func:`file_stem`)."""
    return f"sqlite:///studies/{file_stem(study_name)}.db"


def resolve_storage(storage: str | None, study_name: str) -> str:
    """``--storage``, else ``$AUTOTUNE_STORAGE``, else :func:`default_storage`."""
    return storage or os.environ.get(ENV_STORAGE) or default_storage(study_name)


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


def default_search(objective: str) -> str:
    """``--search``'s default for a study: ``flat`` for ``time-to-quality`` and ``pareto``, whose
    figures need the full budget; for the rate objectives (``throughput``, ``goodput``), whose
    stage-1 figure a short run measures, ``$AUTOTUNE_SEARCH`` if set, else ``staged`` (the
    benchmark ``benchmarks/search_efficiency.py`` decides; docs/search.md)."""
    rate = objective in ("throughput", "goodput")
    value = os.environ.get(ENV_SEARCH)
    if value:
        return value if rate else "flat"
    return "staged" if rate else "flat"


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


def run_flags(opts: SearchOptions) -> list[str]:
    """The flags of a ``search`` that belong to the run, not to the study (the study stores its
    settings, so a resumed run needs only these repeated): what the resume command carries.

    Returns:
        Command-line words, e.g. ``["--confirm", "0", "--jobs", "2"]`` (defaults left out).
    """
    defaults = option_defaults()
    words: list[str] = []
    for name in (
        "confirm",
        "confirm_repeats",
        "confirm_samples",
        "confirm_share",
        "jobs",
        "sampler",
        "pruner",
        "pruner_startup",
        "search",
        "memory_limit",
        "memory_margin",
        "out",
    ):
        value = getattr(opts, name)
        if value is not None and value != defaults.get(name):
            words += [f"--{name.replace('_', '-')}", str(value)]
    if opts.cold:
        words.append("--cold")
    return words
