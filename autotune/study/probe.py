"""The memory model's probes before a search (:mod:`autotune.memory`): two short runs per precision fit
peak memory = fixed + per-sample x batch, and batch sizes above every precision's maximum leave the space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.config import TrialConfig
from autotune.errors import UsageError
from autotune.memory import fit_memory, max_batch, probe_batches
from autotune.runner import run_trial_process, trial_spec
from autotune.study.options import DEFAULTS, SearchOptions
from autotune.ui import UI


def _probe_memory(
    model_file: Path, opts: SearchOptions, report, resolved: dict, baseline: TrialConfig, limit: float, margin: float, ui: UI
):
    """Fit the memory model (see :mod:`autotune.memory`) by probes, print it, and cap ``resolved``'s batch sizes.

    Returns:
        ``{precision: {"fixed_gib", "per_sample_gib", "max_batch", "probes"}}``, or ``None`` when the
        probes could not measure (a warning says why).

    Raises:
        UsageError: Not even the smallest batch size of the space fits.
    """

    batch_entry = resolved.get("batch_size", {"choices": [baseline.batch_size]})
    choices = batch_entry.get("choices") or [batch_entry["low"], batch_entry["high"]]
    precisions = list(resolved.get("precision", {}).get("choices") or [baseline.precision])
    model: dict[str, Any] = {}
    ui.info(f"memory model: probing {len(precisions)} precision(s) x 2 batch sizes against {limit:g} GiB ({margin:.0%} kept free) ...")
    for precision in precisions:
        points, oom_at = [], None
        for batch in probe_batches(choices):
            config = baseline.replace(batch_size=batch, precision=precision, accumulate_grad_batches=1)
            source = {
                **report,
                "model_file": str(model_file),
                "config_file": str(Path(opts.config_file).resolve()) if opts.config_file else None,
            }
            spec = trial_spec(
                source, config.to_dict(), 2 * batch * config.world_size, opts.seed if opts.seed is not None else DEFAULTS["seed"]
            )
            outcome = run_trial_process(
                spec,
                timeout=float(opts.trial_timeout or DEFAULTS["trial_timeout"]),
                trial_number=-1,
                expected_ranks=config.world_size,
                devices=config.devices,
            )
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
                raise UsageError(
                    f"--memory-limit {limit:g} GiB: not even batch {min(batch_entry['choices'])} fits (memory model); "
                    "raise --memory-limit, lower --memory-margin, or add smaller batch sizes to the space"
                )
            if len(kept) < len(batch_entry["choices"]):
                ui.warn(
                    f"removed batch sizes {[c for c in batch_entry['choices'] if c > top]}: above {top}, the most the memory model fits"
                )
                resolved["batch_size"] = {"choices": kept}
        elif "high" in batch_entry and batch_entry["high"] > top >= batch_entry["low"]:
            ui.warn(f"batch_size capped at {top}, the most the memory model fits")
            resolved["batch_size"] = {**batch_entry, "high": top}
    return model
