"""The trial process: the only place that imports the user's model file and builds a Trainer.

Run as ``python -m autotune.target inspect SPEC OUT`` or ``python -m autotune.target run SPEC DIR``.
The CLI process starts it in a process group of its own (see :mod:`autotune.runner`). For a
multi-device trial, Lightning's DDP launcher re-executes this same command line once per extra rank,
so every rank reads the same ``SPEC`` file and runs the same config: no rank ever talks to the study.

``inspect`` probes the hardware, imports the model file, finds its classes and where each knob can
be applied, and reads the baseline values (:mod:`autotune.inspection`); it writes one JSON object to ``OUT``.

``run`` trains one trial for its sample budget and writes ``DIR/rank<R>.json`` for each rank: what
the rank measured (see :mod:`autotune.callback` and :mod:`autotune.rank_report`), what config it saw, or why it failed.
Its Trainer is set up by :mod:`autotune.trial_trainer`, its knobs applied by :mod:`autotune.knob_targets`
and :mod:`autotune.dataloaders`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from autotune.config import TrialConfig
from autotune.dataloaders import apply_loader_options
from autotune.errors import ModelFileError, UsageError
from autotune.knob_targets import KnobTarget, apply_attribute_knobs
from autotune.trial_trainer import (
    apply_channels_last,
    ddp_strategy,
    leave_out_model_callbacks,
    total_batches,
    trainer_kwargs,
    user_callbacks,
)

__all__ = ["knob_overrides", "main", "run_trial"]


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


def knob_overrides(targets: Mapping[str, Any], config: TrialConfig) -> dict[str, Any]:
    """Dotted config paths and values of a trial's knobs that LightningCLI sets: the knobs applied
    through constructor (or optimizer) arguments, and the searched ``model_args``/``data_args``."""
    out = {
        f"{t.owner}.{t.name}": getattr(config, knob) for knob, t in targets.items() if t.how == "init" and getattr(config, knob) is not None
    }
    out.update({f"model.{k}": v for k, v in (config.model_args or {}).items()})
    out.update({f"data.{k}": v for k, v in (config.data_args or {}).items()})
    return out


def _global_rank() -> int:
    return int(os.environ.get("NODE_RANK", 0)) * int(os.environ.get("AUTOTUNE_DEVICES", 1)) + int(os.environ.get("LOCAL_RANK", 0))


def run_trial(spec: Mapping[str, Any], out_dir: Path) -> int:
    """Train one trial and return the exit code (0 when ``fit`` returned).

    Every rank writes its report ``out_dir/rank<R>.json`` from the measurement callback (see
    :mod:`autotune.callback`); an error before ``fit`` (loading the model, building the Trainer, a
    precision Lightning did not apply) is reported here, for this process's rank, unless the rank
    already reported.
    """
    from autotune.measure import TrialFault, classify_exception
    from autotune.rank_report import RankReport, write_rank_report

    # a failed rank's report: it lacks RankSummary's figures (see RankReport), which only a finished fit has
    result = cast("RankReport", {"rank": _global_rank(), "ok": False})
    try:
        _quiet()
        import torch

        from autotune.callback import measure_callback_class
        from autotune.hardware import available_cpu_count
        from autotune.lightning_cli import build_spec, load_spec
        from autotune.loader import lightning_package
        from autotune.val_limit import counts_batches, equal_validation_class

        config = TrialConfig.from_dict(spec["config"])
        result["config"] = config.to_dict()
        if os.environ.get("AUTOTUNE_CPUS"):  # a parallel job's own cores (--jobs); children inherit them
            os.sched_setaffinity(0, {int(c) for c in os.environ["AUTOTUNE_CPUS"].split(",")})
        if config.accelerator == "cpu":
            torch.set_num_threads(max(1, available_cpu_count() // config.devices))
        model_cls, data_cls, user_config, cli = load_spec(spec)
        if config.float32_matmul_precision:
            torch.set_float32_matmul_precision(config.float32_matmul_precision)
        pl = lightning_package(model_cls)  # lightning.pytorch or pytorch_lightning, as the model uses
        targets = {k: KnobTarget(**t) for k, t in spec["targets"].items()}
        # built as the user's LightningCLI builds it (it seeds everything first), the knobs as overrides
        built = build_spec(spec, model_cls, data_cls, user_config, cli, knob_overrides(targets, config), str(out_dir))
        model, datamodule = built.model, built.datamodule
        apply_attribute_knobs(targets, {k: getattr(config, k) for k in targets}, model, datamodule)
        loader_knobs = {k: getattr(config, k) for k, t in targets.items() if t.how == "loader"}
        apply_loader_options(datamodule if datamodule is not None else model, config, loader_knobs)
        model = leave_out_model_callbacks(pl, model)  # an EarlyStopping from configure_callbacks() too
        if config.channels_last:
            model = apply_channels_last(model)
        _, batches = total_batches(config, int(spec["samples"]))
        kwargs = trainer_kwargs(config, int(spec["samples"]), built.trainer, str(out_dir), spec.get("train_samples"))
        if spec.get("start_method") and config.strategy == "ddp":  # warm trials fork their ranks
            kwargs["strategy"] = ddp_strategy(pl, kwargs["strategy"], spec["start_method"])
        callback = measure_callback_class(pl)(
            batch_size=config.batch_size,
            num_workers=config.num_workers if "num_workers" in targets else None,
            check_batch="batch_size" in targets,  # else the loader's own batch size, which may vary
            total_batches=batches,
            accumulate_grad_batches=config.accumulate_grad_batches,
            out_dir=str(out_dir),
            static={"config": config.to_dict()},
            logged_loss=spec.get("monitor"),
            # a timed paired run stops at the study's loss target (one process: ranks would have to agree)
            stop_at_loss=tuple(spec["stop_at_loss"]) if spec.get("stop_at_loss") and config.devices * config.num_nodes == 1 else None,
        )
        extra = []
        if counts_batches(kwargs.get("limit_val_batches"), config.batch_size, spec.get("baseline_batch_size")):
            # an integer limit_val_batches: the baseline's validation samples, not as many batches (autotune.val_limit)
            extra.append(
                equal_validation_class(pl)(kwargs["limit_val_batches"], config.batch_size, spec["baseline_batch_size"], callback.static)
            )
        trainer = pl.Trainer(callbacks=[*user_callbacks(pl, built.callbacks), *extra, callback], **kwargs)
        callback.static["precision_ran"] = result["precision_ran"] = str(trainer.precision)
        if str(trainer.precision) != config.precision:
            raise TrialFault(
                "precision_not_applied", f"precision not applied: asked for {config.precision!r}, Lightning ran {trainer.precision!r}"
            )
        if config.compile_mode:
            # Lightning trains a torch.compile'd LightningModule as is (and unwraps it for hooks and checkpoints)
            model = torch.compile(model, mode=None if config.compile_mode == "default" else config.compile_mode)
        trainer.fit(model, datamodule=datamodule)
        return 0
    except BaseException as e:  # a failed trial is data: classify and store it
        if isinstance(e, ModelFileError) and e.__cause__ is not None:
            kind, message = classify_exception(e.__cause__)  # the user's code raised building the objects: an OOM is an OOM
        else:
            kind, message = ("usage", str(e)) if isinstance(e, UsageError) else classify_exception(e)
        result["error"] = {"kind": kind, "message": message}
        traceback.print_exc()
        write_rank_report(str(out_dir), result["rank"], result, overwrite=False)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in ("inspect", "run"):
        print("usage: python -m autotune.target {inspect SPEC OUT | run SPEC DIR}", file=sys.stderr)
        return 2
    command, spec_path, out = argv
    spec = json.loads(Path(spec_path).read_text())
    if command == "run":
        from autotune.runner import end_group_on_sigterm

        end_group_on_sigterm()  # sent when the worker that started this trial dies
        return run_trial(spec, Path(out))
    try:
        _quiet()
        from autotune.inspection import inspect_model

        payload = {"ok": True, **inspect_model(spec)}
        code = 0
    except UsageError as e:  # one line for the user; the traceback (the user's frames) for --debug
        payload, code = {"ok": False, "usage": True, "message": str(e), "traceback": traceback.format_exc()}, 2
    except Exception as e:
        traceback.print_exc()
        payload, code = {"ok": False, "usage": False, "message": f"{type(e).__name__}: {e}"}, 1
    Path(out).write_text(json.dumps(payload, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
