"""Export of a trial's config as a YAML file that LightningCLI runs as is (pure functions).

The file has ``trainer:``, ``model:`` and ``data:`` sections. Each tuned value goes under the
constructor argument it was applied through (``lr`` under the module's own name for it, e.g.
``learning_rate``); the user's own ``--config`` values are kept. A value applied as an attribute
(no constructor argument), or to the training DataLoader that autotune rebuilt (a batch size
hard-coded in ``train_dataloader()``), cannot be set by LightningCLI: it is listed in a commented
``autotune:`` block with what to change in the code. A header comment names the study, the trial, the measured
figures, the hardware and the versions.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from autotune.config import TrialConfig
from autotune.lightning_cli import get_dotted, set_dotted

__all__ = [
    "config_from_lightning_cli",
    "early_stopping_line",
    "lightning_cli_config",
    "render_yaml",
    "scale_schedules",
    "scale_training_length",
    "scale_val_check_interval",
    "step_length_lines",
    "training_length_line",
]

#: The Trainer arguments that set how long ``fit`` trains (:func:`autotune.inspection.training_length`).
_LENGTH_KEYS = ("max_epochs", "max_steps", "max_time")


def lightning_cli_config(
    config: TrialConfig,
    targets: Mapping[str, Mapping[str, str]],
    user_config: Mapping[str, Mapping[str, Any]] | None = None,
    has_datamodule: bool = True,
    model_info: Mapping[str, Any] | None = None,
    baseline: TrialConfig | None = None,
    training_length: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The LightningCLI config of a trial.

    Args:
        config: The trial's config.
        targets: Knob name to ``{"owner": "model"|"data", "how": "init"|"attr"|"hparams"|"loader", "name"}``.
        user_config: The user's ``--config`` sections (``trainer``, ``model``, ``data``), kept as base.
        has_datamodule: Whether the model file has a DataModule (else there is no ``data:`` section).
        model_info: Inspection facts (constructor signatures, class names): ``pin_memory``/``prefetch_factor``
            go under ``data:`` (or ``model:``) when the class takes them as arguments.
        baseline: The baseline's config: an extended knob, or one applied to the rebuilt training
            DataLoader, at the baseline's value (what the user's code does already) gets no note.
        training_length: The ``max_epochs``/``max_steps``/``max_time`` the user's config or CLI
            defaults set (:func:`autotune.inspection.training_length`): each goes under ``trainer:``
            unless the user's ``--config`` has it already (the trials' own sample budget is never exported).

    Searched constructor arguments (``model_args``, ``data_args``) go under ``model:``/``data:``.
    ``torch.compile``, ``channels_last``, ``float32_matmul_precision``, and ``pin_memory`` or
    ``prefetch_factor`` without a constructor argument, are notes: LightningCLI has no key for them.

    Returns:
        ``(document, notes)``: the mapping to dump, and one line per value LightningCLI cannot set.
    """
    user_config = user_config or {}
    document = user_config.get("document")
    if document:  # the user's own file, class_path/init_args and optimizer sections kept
        doc: dict[str, Any] = copy.deepcopy(dict(document))
        doc["trainer"] = dict(doc.get("trainer") or {})
        doc.setdefault("model", {})
        if has_datamodule:
            doc.setdefault("data", {})
    else:
        doc = {
            "trainer": copy.deepcopy(dict(user_config.get("trainer", {}))),
            "model": copy.deepcopy(dict(user_config.get("model", {}))),
        }
        if has_datamodule:
            doc["data"] = copy.deepcopy(dict(user_config.get("data", {})))
    trainer = config.trainer_args()
    num_nodes = trainer.pop("num_nodes")
    if trainer.get("strategy") == "ddp" and str(doc["trainer"].get("strategy", "")).startswith("ddp"):
        trainer.pop("strategy")  # the user's own DDP flavour (find_unused_parameters, ...) is what the trial ran
    doc["trainer"].update(trainer)
    for key, value in (training_length or {}).items():
        doc["trainer"].setdefault(key, value)
    if num_nodes != 1:  # (a one-node run leaves num_nodes to the user's config or Lightning's default)
        doc["trainer"]["num_nodes"] = num_nodes
    notes = _set_knobs(doc, config, targets, (model_info or {}).get("class_names") or {}, baseline)
    loader_owner = "data" if has_datamodule else "model"
    notes += _extended_notes(doc, config, loader_owner, ((model_info or {}).get("signature") or {}).get(loader_owner) or {}, baseline)
    if not doc["model"]:
        del doc["model"]
    if has_datamodule and not doc.get("data"):
        doc.pop("data", None)
    return doc, notes


def _set_knobs(
    doc: dict[str, Any],
    config: TrialConfig,
    targets: Mapping[str, Mapping[str, str]],
    class_names: Mapping[str, str | None],
    baseline: TrialConfig | None,
) -> list[str]:
    """Put the knobs applied through constructor arguments, and the searched ``model_args``/``data_args``,
    under ``model:``/``data:`` in ``doc``; return a note per knob applied as an attribute, and per knob
    applied to the rebuilt training DataLoader that differs from the baseline (``class_names``: section
    to the user's class name, for the note)."""
    notes: list[str] = []
    for knob, target in targets.items():
        value = getattr(config, knob)
        if value is None:
            continue
        section = target["owner"]
        owner = class_names.get(section) or ("LightningModule" if section == "model" else "LightningDataModule")
        if target["how"] == "init":  # the dotted path the trial set (autotune.target.knob_overrides)
            set_dotted(doc, f"{section}.{target['name']}", value)
        elif target["how"] == "loader":  # the trial rebuilt the DataLoader: the code has the value
            if baseline is None or getattr(baseline, knob) != value:
                notes.append(
                    f"{knob}: {value!r}  # pass {target['name']}={value!r} to the DataLoader(...) that {owner}.train_dataloader() "
                    f"returns (it is not a constructor argument; was {getattr(baseline, knob, None)!r})"
                )
        else:
            owner = "LightningModule" if section == "model" else "LightningDataModule"
            where = f"hparams[{target['name']!r}]" if target["how"] == "hparams" else target["name"]
            notes.append(f"{knob}: {value!r}  # set {owner}.{where} in your code (it is not a constructor argument)")
    for section, args in (("model", config.model_args), ("data", config.data_args)):
        for name, value in (args or {}).items():
            set_dotted(doc, f"{section}.{name}", value)
    return notes


def _extended_notes(
    doc: dict[str, Any], config: TrialConfig, loader_owner: str, loader_args: Mapping[str, Any], baseline: TrialConfig | None
) -> list[str]:
    """The extended knobs: ``pin_memory``/``prefetch_factor`` under ``loader_owner`` in ``doc`` when its
    class takes them (``loader_args``: its constructor signature), else notes; notes for the rest."""

    def unchanged(knob: str) -> bool:
        return baseline is not None and getattr(baseline, knob) == getattr(config, knob)

    notes: list[str] = []
    for knob in ("pin_memory", "prefetch_factor"):
        value = getattr(config, knob)
        if value is None or unchanged(knob) or (knob == "prefetch_factor" and config.num_workers == 0):
            continue  # (PyTorch takes prefetch_factor only with worker processes)
        if knob in loader_args:
            set_dotted(doc, f"{loader_owner}.{knob}", value)
        else:
            notes.append(
                f"{knob}: {value!r}  # pass {knob}={value!r} to the DataLoader(...) your train_dataloader()/val_dataloader() return"
            )
    if config.compile_mode:
        mode = "" if config.compile_mode == "default" else f", mode={config.compile_mode!r}"
        notes.append(
            f"compile: {config.compile_mode}  # model = torch.compile(model{mode}) before trainer.fit(model) "
            "(with LightningCLI(run=False): cli.model)"
        )
    if config.channels_last:
        notes.append(
            "channels_last: true  # model.to(memory_format=torch.channels_last), and convert 4-D inputs with "
            "x.contiguous(memory_format=torch.channels_last) in on_after_batch_transfer"
        )
    if config.float32_matmul_precision and not unchanged("float32_matmul_precision"):
        notes.append(
            f"float32_matmul_precision: {config.float32_matmul_precision}  # "
            f"torch.set_float32_matmul_precision({config.float32_matmul_precision!r}) before training"
        )
    return notes


def scale_training_length(
    trainer: dict[str, Any], baseline_batch: int, batch: int, ratio: float | None = None
) -> dict[str, tuple[int, int]]:
    """Rescale, in place, the exported ``trainer:`` section's ``max_epochs`` and ``max_steps`` so the
    recommended config trains ``ratio`` times the training samples the user's own length gives the
    baseline (its samples to the baseline's loss over the baseline's: ``autotune.summary.samples_ratio``).

    ``max_epochs`` (passes over the data) becomes ``ceil(max_epochs x ratio)``. ``max_steps`` counts
    optimizer steps, each of one effective batch (per-device batch x accumulation x devices x nodes)
    of samples, so it becomes ``ceil(max_steps x baseline_batch / batch x ratio)``: a user's 1,000 steps
    at effective batch 32 are 32,000 samples, which the recommended effective batch 128 takes in 250.
    Only positive integers are scaled (``-1`` or ``None`` mean no limit; ``max_time`` is a wall-clock
    length, which a faster config fills with more samples).

    Args:
        trainer: The export's ``trainer:`` mapping; changed in place.
        baseline_batch, batch: The baseline's and the recommended config's effective batch sizes (samples, >= 1).
        ratio: Samples ratio, ``None`` for 1 (the recommendation trains as many samples as the baseline).

    Returns:
        ``{key: (old, new)}`` for each key whose value changed.
    """
    factors = {"max_epochs": ratio or 1.0, "max_steps": baseline_batch / batch * (ratio or 1.0)}
    changed = {}
    for key, factor in factors.items():
        old = trainer.get(key)
        if isinstance(old, int) and not isinstance(old, bool) and old > 0:
            new = math.ceil(old * factor - 1e-9)  # (a product whole up to float rounding stays whole)
            if new != old:
                trainer[key], changed[key] = new, (old, new)
    return changed


def scale_val_check_interval(trainer: dict[str, Any], baseline_samples: int, samples: int) -> str | None:
    """Rescale, in place, an integer ``val_check_interval`` (training batches between validations) of the
    exported ``trainer:`` so validation comes every as many samples as in the user's own runs (helper-36:
    ``val_check_interval: 50`` kept at 4x the batch validated 3 times instead of 12: the cadence of
    checkpoints and early stopping); a float (a fraction of an epoch) is left alone.

    Args:
        trainer: The export's ``trainer:`` mapping; changed in place.
        baseline_samples, samples: Samples per training batch over all devices (per-device batch x devices
            x nodes) of the baseline and of the recommended config (>= 1).

    Returns:
        The header's line (``"validation: val_check_interval from 50 to 13 training batches ..."``), or ``None``.
    """
    old = trainer.get("val_check_interval")
    if not isinstance(old, int) or isinstance(old, bool) or old <= 0 or samples == baseline_samples:
        return None
    new = max(1, round(old * baseline_samples / samples))
    if new == old:
        return None
    trainer["val_check_interval"] = new
    return (
        f"validation: val_check_interval from {old} to {new} training batches ({samples:,} samples a batch, the baseline's "
        f"{baseline_samples:,}): validation comes every ~{old * baseline_samples:,} samples, as in your runs"
    )


#: Constructor arguments of learning-rate schedulers that count optimizer steps or epochs of the whole
#: run (``torch.optim.lr_scheduler``, Hugging Face's ``get_*_schedule_with_warmup``, Lightning Bolts'
#: ``LinearWarmupCosineAnnealingLR``): sized for the user's training length, they must follow it.
SCHEDULE_LENGTHS = (
    "T_max",
    "T_0",
    "total_steps",
    "step_size",
    "total_iters",
    "milestones",
    "num_training_steps",
    "num_warmup_steps",
    "warmup_steps",
    "warmup_epochs",
    "max_epochs",
)


def scale_schedules(document: dict[str, Any], changes: Mapping[str, tuple[int, int]], manual: bool = False) -> list[str]:
    """Follow a rescaled training length (:func:`scale_training_length`'s ``changes``) in the export's
    learning-rate schedulers, in place, and say what was done.

    A scheduler is the top-level ``lr_scheduler:`` of a LightningCLI config, or any ``class_path`` mapping
    (under ``model:`` too) from a ``lr_scheduler`` module or whose class name ends with ``LR`` or holds ``Schedul``. An argument of
    :data:`SCHEDULE_LENGTHS` whose value equals the old ``max_steps`` (or ``max_epochs``) was sized to it and
    takes the new value (a cosine's ``T_max: 300`` with ``max_steps: 300`` becomes 150 with ``max_steps:
    150``: left at 300, the lr would stop halfway down). Any other such argument is left as is (it may count
    steps or epochs: a manually optimized module steps wherever it calls ``step()``) and named in a line
    that says by how much to scale it. LightningCLI's ``lr_scheduler:`` under automatic optimization is stepped once an epoch, so only a
    changed ``max_epochs`` moves it (a new user's cosine ``T_max: 400`` counted epochs and equalled
    ``max_steps: 400`` by chance: the same samples in larger batches are the same epochs).

    Args:
        document: The export (its ``trainer:`` already rescaled); changed in place.
        changes: ``{"max_steps" | "max_epochs": (old, new)}``; empty: nothing is done.
        manual: The module uses manual optimization (it steps even LightningCLI's ``lr_scheduler:`` itself).

    Returns:
        Header lines, at most one per scheduler (``"lr schedule: lr_scheduler (CosineAnnealingLR): the export
        changes T_max from 300 to 150, as max_steps (...)"``); empty when there is nothing to say.
    """
    if not changes:
        return []
    lines = []
    for where, scheduler in _schedulers(document):
        units = {"max_steps": "optimizer steps", "max_epochs": "epochs"}
        if where.startswith("lr_scheduler") and not manual:  # Lightning steps it once an epoch
            units = {"max_epochs": "epochs"}
        moved = {key: change for key, change in changes.items() if key in units}
        if not moved:
            continue
        args: dict[str, Any] = scheduler["init_args"] if isinstance(scheduler.get("init_args"), dict) else scheduler
        done, left = [], []
        for name in SCHEDULE_LENGTHS:
            value = args.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, list)) or (isinstance(value, list) and not value):
                continue
            matched = next((key for key, (old, _) in moved.items() if value == old), None)
            if matched is not None:
                args[name] = moved[matched][1]
                done.append(f"{name} from {value:,} to {args[name]:,}, as {matched} (equal to it: taken as sized to it)")
            else:
                left.append(f"{name} {value}")
        if not done and not left:
            continue
        said = [f"the export changes {d}" for d in done]
        if left:
            how = " or ".join(
                f"by {new / old:.3g} if it counts {units[key]} ({key} {old:,} -> {new:,})" for key, (old, new) in moved.items()
            )
            said.append(f"it keeps {', '.join(left)}: scale {'it' if len(left) == 1 else 'them'} {how}")
        lines.append(f"lr schedule: {where}: " + "; ".join(said))
    return lines


#: A model or data constructor argument whose name says it may size a schedule in optimizer steps
#: (``cosine_t_max``, ``warmup_steps``, ``lr_decay_steps``, ``milestones``: :func:`step_length_lines`).
_STEP_ARG = re.compile(
    r"(t_?max|(^|_)t_0$|total_steps|training_steps|warmup_steps|warmup_iters|decay_steps|total_iters|max_iters|max_steps|num_steps|milestones|step_size)",
    re.IGNORECASE,
)


def _step_count(value: Any) -> bool:
    """A positive int, or a non-empty list of them (``milestones``)."""
    if isinstance(value, list):
        return bool(value) and all(_step_count(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def step_length_lines(document: Mapping[str, Any], signature: Mapping[str, Any], baseline_batch: int, batch: int) -> list[str]:
    """Header lines for the model's and data module's own arguments that may size a schedule in
    optimizer steps, when the recommendation changes the effective batch size.

    A schedule built in code from a plain argument (``CosineAnnealingLR(opt, T_max=self.hparams.cosine_t_max)``,
    stepped once a batch, common under manual optimization) is no scheduler of the config, so
    :func:`scale_schedules` cannot see it; at another effective batch an epoch takes other steps, so
    left as it is the schedule ends early or late (helper-31's ``cosine_t_max: 720`` at batch 64
    instead of 32 went only halfway down over its ``max_epochs``). The arguments are found by name
    (:data:`_STEP_ARG`), in the export's ``model:``/``data:`` sections and else at their defaults
    (``signature``); the export keeps them, and the line says by how much to scale them if they count
    optimizer steps (one computed from ``trainer.estimated_stepping_batches`` follows by itself).

    Args:
        document: The export (its ``model:`` and ``data:``, flat or ``class_path``/``init_args``).
        signature: Inspection's constructor arguments, ``{"model"|"data": {name: {"default": ...}}}``.
        baseline_batch, batch: The baseline's and the recommendation's effective batch sizes (> 0).

    Returns:
        One line, or none when the effective batch is the baseline's or no argument is named so.
    """
    if batch == baseline_batch:
        return []
    found: dict[str, Any] = {}
    for owner in ("model", "data"):
        section = document.get(owner) or {}
        given = section.get("init_args") if isinstance(section.get("init_args"), dict) else section
        given = given if isinstance(given, Mapping) else {}
        values = {k: v.get("default") for k, v in (signature.get(owner) or {}).items() if isinstance(v, Mapping)}
        values.update({k: v for k, v in given.items() if k not in ("class_path", "init_args", "dict_kwargs")})
        found.update({f"{owner}.{k}": v for k, v in values.items() if _STEP_ARG.search(k) and _step_count(v)})
    if not found:
        return []
    factor = baseline_batch / batch
    names = ", ".join(f"{k}={v}" for k, v in found.items())
    return [
        f"lr schedule: {names}: at effective batch size {batch} (the baseline's {baseline_batch}) an epoch takes {factor:.3g}x the "
        f"optimizer steps; if {'it counts' if len(found) == 1 else 'they count'} optimizer steps, scale {'it' if len(found) == 1 else 'them'} "
        f"by {factor:.3g} (the export keeps {'it' if len(found) == 1 else 'them'}; a schedule your code sizes from "
        "trainer.estimated_stepping_batches follows by itself)"
    ]


def _schedulers(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """The schedulers of :func:`scale_schedules`, each with where it is (``"lr_scheduler (CosineAnnealingLR)"``)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(node, dict):
        return found
    path = str(node.get("class_path", ""))
    name = path.rsplit(".", 1)[-1]
    if where == "lr_scheduler" or (path and ("lr_scheduler" in path or name.endswith("LR") or "Schedul" in name)):
        found.append((where + (f" ({name})" if name else ""), node))
        return found
    for key, value in node.items():
        if key != "trainer":
            found += _schedulers(value, f"{where}.{key}" if where else str(key))
    return found


def training_length_line(training_length: Mapping[str, Any] | None, user_trainer: Mapping[str, Any]) -> str:
    """The export header's line on how long training with the export runs.

    Args:
        training_length: What the user's config or CLI defaults set
            (:func:`autotune.inspection.training_length`), or ``None`` when the study predates that
            inspection (only ``user_trainer`` is known).
        user_trainer: The ``trainer:`` section of the user's ``--config``.
    """
    own = {k: user_trainer[k] for k in _LENGTH_KEYS if user_trainer.get(k) is not None}
    defaults = {k: v for k, v in (training_length or {}).items() if k not in own}
    if own or defaults:
        said = [f"{k}={v}" for k, v in own.items()] + [f"{k}={v} (your LightningCLI's default)" for k, v in defaults.items()]
        return f"training length: {', '.join(said)}, as in your own runs (the search's trials trained a fixed number of samples)"
    found = "your --config and your LightningCLI's defaults set" if training_length is not None else "your --config sets"
    return (
        f"training length: {found} no max_epochs, max_steps or max_time, so Lightning trains for its default "
        "max_epochs=1000; set yours: add --trainer.max_epochs N to the run line below, or max_epochs: N under trainer:"
    )


def early_stopping_line(callbacks: Any, changes_math: bool) -> str | None:
    """The export header's line for a recommendation of other training math (effective batch, ``lr``:
    :func:`autotune.study.math_class.is_preserving`) under the user's own ``EarlyStopping``, which the
    trials left out and the export keeps (``callbacks``: the ``--config``'s ``trainer.callbacks``, a
    list or one entry, :func:`autotune.trial_trainer.callback_names`), else ``None``.

    The search compared the two configs at equal samples; early stopping ends each run at the first
    epoch its monitored metric stops improving, which for other math is another epoch and another
    loss (a new user's batch 64 at 4.5x the lr, confirmed 2.18x, stopped 3 epochs later than the
    baseline at a 10% higher ``val_loss``, in the same wall time)."""
    from autotune.trial_trainer import callback_names

    if not changes_math or not any("EarlyStopping" in name for name in callback_names(callbacks)):
        return None
    return (
        "early stopping: your EarlyStopping decides when training ends, and this config changes the training math "
        "(effective batch or lr), so it can stop at another epoch, with another loss, than the baseline would; the search "
        "compared the two at equal samples: compare them over your own full training before adopting it"
    )


def render_yaml(document: Mapping[str, Any], header: list[str], notes: list[str] | None = None) -> str:
    """YAML text: ``header`` lines as comments, the document (``yaml.safe_dump``), then notes.

    Floats are written with full precision (``yaml.safe_dump`` round-trips them exactly).
    """
    lines = [f"# {one_line(line)}" if line else "#" for line in header]
    body = yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False)
    text = "\n".join(lines) + "\n" + body
    if notes:
        text += "# autotune: values LightningCLI cannot set, to apply by hand:\n"
        text += "".join(f"#   {one_line(note)}\n" for note in notes)
    return text


def write_private(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, creating it (and missing folders) readable by its owner
    only: files ``0600`` and folders ``0700``, less what the user's umask also removes. A file that
    exists keeps its mode. Study exports and reports hold the user's configs and paths.

    Raises:
        OSError: As ``open`` does.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)


def one_line(text: object) -> str:
    """``text`` with every line break and other non-printable character written as its Python escape
    (a newline becomes the two characters ``\\n``), so that a value (a study name, a monitor) cannot end the YAML
    comment or Markdown line it is written into and start a key of its own."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def config_from_lightning_cli(
    document: Any,
    targets: Mapping[str, Mapping[str, str]],
    baseline: TrialConfig,
    source: str = "<config>",
    searched: Any = (),
) -> TrialConfig:
    """The config a LightningCLI YAML (such as an export) describes: the inverse of :func:`lightning_cli_config`.

    ``trainer:`` gives ``precision`` and ``accumulate_grad_batches``; the model's and the data
    module's constructor arguments give the knobs autotune applies through them (``targets``).
    Anything the file does not set keeps the baseline's value; other keys are ignored.

    Raises:
        UsageError: The document is not a mapping of sections, or a value has the wrong type.
    """
    from autotune.errors import UsageError

    if not isinstance(document, Mapping) or not all(isinstance(document.get(k, {}) or {}, Mapping) for k in ("trainer", "model", "data")):
        raise UsageError(f"{source}: not a LightningCLI config (a mapping with trainer:/model:/data: sections)")
    trainer = document.get("trainer") or {}
    changes: dict[str, Any] = {}
    for key in ("precision", "accumulate_grad_batches", "devices", "strategy"):
        if trainer.get(key) is not None:
            changes[key] = str(trainer[key]) if key in ("precision", "strategy") else trainer[key]
    from autotune.space import user_arg

    for name in searched:  # searched constructor arguments (model.<arg>, data.<arg>)
        arg = user_arg(name)
        if arg is None:
            continue
        section = document.get(arg[0]) or {}
        args = section.get("init_args", section) if isinstance(section, Mapping) else {}
        if arg[1] in args:
            key = f"{arg[0]}_args"
            changes[key] = {**(changes.get(key) or getattr(baseline, key) or {}), arg[1]: args[arg[1]]}
    for knob, target in targets.items():
        value = get_dotted(document, f"{target['owner']}.{target['name']}") if target["how"] == "init" else None
        if value is not None:
            changes[knob] = value
    for key, kind in (("batch_size", int), ("accumulate_grad_batches", int), ("num_workers", int), ("lr", float), ("devices", int)):
        if key in changes:
            value = changes[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
                raise UsageError(f"{source}: {key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
            changes[key] = kind(value)
    try:
        return baseline.replace(**changes)
    except UsageError as e:
        raise UsageError(f"{source}: {e}") from None
