"""Train an exported config with LightningCLI alone: no autotune code in this process.

Used by ``benchmarks/fidelity.py`` to check the tuner's figures outside the tuner. It runs
``LightningCLI(Model, DataModule)`` from an example's ``model.py`` with the exported YAML, plus a
plain timing callback, and prints one JSON line:

- ``samples_per_sec``: global training samples over the wall time of the batches after the first
  10% (a fixed warm-up cut, deliberately not autotune's own MSER rule), the device synchronised
  at both ends;
- with ``--target LOSS``: ``seconds_to_target``, the wall time from the start of training until the
  training loss, averaged over the last ``--window`` samples, first reaches ``LOSS`` (training then
  stops), or null if it never does within ``--samples``;
- ``loss_curve_tail``: that moving average at the end of the run (the target of a baseline run).

Usage::

    python benchmarks/standalone.py examples/digits/model.py studies/digits.best.yaml --samples 8192
    python benchmarks/standalone.py examples/digits/model.py base.yaml --samples 65536 --target 0.31 --window 819
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import sys
import time
from collections import deque
from pathlib import Path


def _load(model_file: Path):
    sys.path.insert(0, str(model_file.parent))
    spec = importlib.util.spec_from_file_location(model_file.stem, model_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[model_file.stem] = module
    spec.loader.exec_module(module)
    import lightning.pytorch as pl

    classes = [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
    model = next(c for c in classes if issubclass(c, pl.LightningModule))
    data = next(c for c in classes if issubclass(c, pl.LightningDataModule))
    return model, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_file", type=Path)
    parser.add_argument("config", type=Path)
    parser.add_argument("--samples", type=int, required=True, help="training samples (all devices)")
    parser.add_argument("--target", type=float, help="stop when the moving-average training loss reaches this")
    parser.add_argument("--window", type=float, default=None, help="moving-average window in samples (default: a tenth of --samples)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import lightning.pytorch as pl
    import torch
    import yaml
    from lightning.pytorch.cli import LightningCLI

    model_cls, data_cls = _load(args.model_file.resolve())
    config = yaml.safe_load(args.config.read_text())
    trainer_cfg = config.get("trainer", {})
    devices = int(trainer_cfg.get("devices", 1) or 1)
    accumulate = int(trainer_cfg.get("accumulate_grad_batches", 1) or 1)
    batch = int(config.get("data", {}).get("batch_size") or config.get("model", {}).get("batch_size"))
    per_step = batch * accumulate * devices
    steps = max(1, math.ceil(args.samples / per_step))
    window = args.window or args.samples / 10

    class Timing(pl.Callback):
        def __init__(self):
            self.ends: list[float] = []
            self.sizes: list[int] = []
            self.start = None
            self.recent: deque = deque()
            self.total = 0.0
            self.seen = 0
            self.reached = None
            self.smoothed = math.nan

        def _sync(self, trainer):
            if trainer.strategy.root_device.type == "cuda":
                torch.cuda.synchronize()

        def on_train_start(self, trainer, pl_module):
            self._sync(trainer)
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch_data, batch_idx):
            if len(self.ends) % 10 == 0:
                self._sync(trainer)
            self.ends.append(time.perf_counter())
            first = batch_data[0] if isinstance(batch_data, (list, tuple)) else batch_data
            size = int(first.shape[0]) * trainer.world_size
            self.sizes.append(size)
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            value = float(loss.detach()) * accumulate  # Lightning divides the returned loss by the accumulation
            self.seen += size
            self.recent.append((self.seen, value))
            self.total += value
            while self.recent and self.recent[0][0] <= self.seen - window:
                self.total -= self.recent.popleft()[1]
            if self.seen >= window:
                self.smoothed = self.total / len(self.recent)
                if args.target is not None and self.reached is None and self.smoothed <= args.target:
                    self._sync(trainer)
                    self.reached = time.perf_counter() - self.start
                    trainer.should_stop = True

    timing = Timing()
    LightningCLI(
        model_cls,
        data_cls,
        args=[
            "fit",
            "--config",
            str(args.config),
            "--trainer.max_steps",
            str(steps),
            "--trainer.max_epochs",
            "-1",
            "--trainer.limit_val_batches",
            "0",
            "--trainer.logger",
            "false",
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.enable_model_summary",
            "false",
            "--seed_everything",
            str(args.seed),
        ],
        trainer_defaults={"callbacks": [timing]},
        save_config_callback=None,
    )
    if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return 0
    cut = len(timing.ends) // 10
    if len(timing.ends) - cut >= 2:
        seconds = timing.ends[-1] - timing.ends[cut]
        sps = sum(timing.sizes[cut + 1 :]) / seconds
    else:
        sps = math.nan
    print(
        json.dumps(
            {
                "samples_per_sec": sps,
                "samples": timing.seen,
                "seconds_to_target": timing.reached,
                "loss_curve_tail": timing.smoothed,
                "steps": len(timing.ends) // accumulate,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
