"""The math a trial computes, for ``--search staged`` (see docs/search.md).

A config is **math-preserving** when it computes what the baseline computes up to rounding: the same
effective batch (per-device batch x ``accumulate_grad_batches`` x ``devices`` x ``num_nodes``), the
same ``lr`` and the same constructor arguments, whatever its micro-batch x accumulation split,
DataLoader options, ``precision``, ``channels_last``, ``compile``, float32 matmul precision or
strategy. Every other config is **math-changing**: its lr follows its effective batch by a scaling
rule (:func:`lr_rule`), linear for the SGD family (Goyal et al. 2017, "Accurate, Large Minibatch
SGD") and square-root for the Adam family (Malladi et al. 2022, "On the SDEs and Scaling Rules for
Adaptive Gradient Algorithms"; Hoffer et al. 2017).

The functions here are pure: configs and plain trial data in, decisions out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from autotune.config import TrialConfig
from autotune.space_params import scaled_lr
from autotune.study.memo import per_finished_trial

__all__ = [
    "CHANGING",
    "IMPROVING_DROP",
    "PRESERVING",
    "SANITY_FACTOR",
    "SANITY_FLOOR",
    "SANITY_WINDOW",
    "Failure",
    "curve_tells",
    "failed_class",
    "failures_of",
    "is_preserving",
    "loss_sanity",
    "lr_multiplier",
    "lr_rule",
    "math_kind",
    "optimizer_family",
    "raised_lr_needed",
    "rule_lr",
    "ruled_out_at_any_lr",
    "same_question",
    "sanity_tolerance",
    "split_accumulation",
    "still_improving",
]

#: Values of a staged trial's ``math`` user attribute.
PRESERVING, CHANGING = "preserving", "changing"

#: A math-preserving short run passes the loss sanity check when its training loss is at most this
#: many times the study's ``--loss-tolerance`` above the baseline's at the same samples (15% at the
#: default 5%). Wider than the convergence tolerance: the same math differs only by rounding (bf16
#: keeps 8 bits of mantissa), summation order and data-loading order, but a short run's loss over a
#: few dozen steps is noisier than a full run's final loss; a broken config (a diverging bf16 run,
#: a wrong split) is off by far more.
SANITY_FACTOR = 3.0

#: The sanity check's tolerance is never below this relative loss increase (0.05 = 5%), even at
#: ``--loss-tolerance 0``: rounding alone moves a short run's loss by a few percent.
SANITY_FLOOR = 0.05

#: Share of a short run's samples, at its end, over which its loss and the baseline's are averaged (0 < x <= 1).
SANITY_WINDOW = 0.25

#: A failed run's training loss was still falling at its end when the mean over its last quarter of
#: samples is at least this fraction (0.02 = 2%) below the mean over the quarter before: it stopped
#: short of converging (too few optimizer steps for its lr), not at a plateau or a divergence, which
#: noise alone moves by less than that over a quarter of a run's steps.
IMPROVING_DROP = 0.02

#: Optimizer class names (lower case, without the module) of each scaling family.
_SGD_FAMILY = ("sgd", "asgd", "lars", "sgdw")
_ADAM_FAMILY = ("adam", "adamw", "nadam", "radam", "adamax", "sparseadam", "adagrad", "adadelta", "rmsprop", "lamb", "adafactor", "lion")


def optimizer_family(name: str | None) -> str | None:
    """``"sgd"``, ``"adam"`` or ``None`` (unknown) for an optimizer class name or path (``torch.optim.AdamW``)."""
    if not name:
        return None
    short = str(name).rsplit(".", 1)[-1].lower()
    if short in _SGD_FAMILY:
        return "sgd"
    if short in _ADAM_FAMILY:
        return "adam"
    return None


def lr_rule(space_scaling: str, optimizer: str | None) -> tuple[str, str]:
    """The rule a math-changing config's lr follows, and a one-line reason.

    The space's ``lr_scaling`` when it names one (``linear`` or ``sqrt``); else by the optimizer's
    family: ``linear`` for SGD (Goyal et al. 2017), ``sqrt`` for Adam and other adaptive methods
    (Malladi et al. 2022; Hoffer et al. 2017); ``sqrt`` when the optimizer or its family is unknown (the
    inspection knows it when a LightningCLI config names it, or when the model's ``configure_optimizers``
    runs before training, with a stand-in Trainer where it reads one).

    Args:
        space_scaling: The space's ``lr_scaling`` (``none``, ``linear``, ``sqrt``).
        optimizer: The optimizer's class name or path, or ``None`` when not known.

    Returns:
        ``(rule, reason)`` with ``rule`` ``"linear"`` or ``"sqrt"``.
    """
    if space_scaling in ("linear", "sqrt"):
        return space_scaling, f"the space's lr_scaling: {space_scaling}"
    family = optimizer_family(optimizer)
    short = str(optimizer).rsplit(".", 1)[-1]
    if family == "sgd":
        return "linear", f"{short}, an SGD-family optimizer: linear scaling (Goyal et al. 2017)"
    if family == "adam":
        return "sqrt", f"{short}, an adaptive (Adam-family) optimizer: square-root scaling (Malladi et al. 2022)"
    if optimizer:
        return "sqrt", (
            f"{short}'s scaling family is not known: square-root scaling, the Adam-family rule (Malladi et al. 2022); "
            "`lr_scaling: linear` in the space for SGD-like optimizers"
        )
    return "sqrt", (
        "the optimizer is not known before training: square-root scaling, the Adam-family rule "
        "(Malladi et al. 2022); `lr_scaling: linear` in the space for SGD"
    )


def _same_lr(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


def is_preserving(config: TrialConfig, baseline: TrialConfig) -> bool:
    """Whether ``config`` computes the baseline's math up to rounding (see the module docstring)."""
    return (
        config.effective_batch_size == baseline.effective_batch_size
        and _same_lr(config.lr, baseline.lr)
        and (config.model_args or {}) == (baseline.model_args or {})
        and (config.data_args or {}) == (baseline.data_args or {})
    )


def math_kind(config: TrialConfig, baseline: TrialConfig) -> str:
    """:data:`PRESERVING` or :data:`CHANGING` (:func:`is_preserving`)."""
    return PRESERVING if is_preserving(config, baseline) else CHANGING


def split_accumulation(config: TrialConfig, baseline: TrialConfig, entry: Mapping[str, Any] | None) -> int | None:
    """The ``accumulate_grad_batches`` that gives ``config``'s micro-batch the baseline's effective batch.

    ``baseline effective batch / (batch_size x devices x num_nodes)`` when that is a whole number
    the space allows (``entry``: the resolved ``accumulate_grad_batches`` knob; ``None`` when the
    space does not search it, and only the baseline's own value is allowed), else ``None``.

    Args:
        config: The config (its ``accumulate_grad_batches`` is ignored).
        baseline: The baseline config.
        entry: The resolved space entry (``choices``, or ``low``/``high``/``step``), or ``None``.
    """
    per_step = config.batch_size * config.world_size
    total = baseline.effective_batch_size
    if total % per_step:
        return None
    acc = total // per_step
    if entry is None:
        return acc if acc == baseline.accumulate_grad_batches else None
    if "choices" in entry:
        return acc if acc in entry["choices"] else None
    step = int(entry.get("step") or 1)
    return acc if entry["low"] <= acc <= entry["high"] and (acc - int(entry["low"])) % step == 0 else None


def rule_lr(config: TrialConfig, baseline: TrialConfig, rule: str) -> float | None:
    """The lr the scaling rule gives ``config``'s effective batch (``None`` without a baseline lr)."""
    if baseline.lr is None:
        return None
    return scaled_lr(baseline.lr, 1.0, config.effective_batch_size, baseline.effective_batch_size, rule)


def lr_multiplier(config: TrialConfig, baseline: TrialConfig, rule: str) -> float:
    """``config.lr`` over :func:`rule_lr` (1.0: the rule's lr exactly; 1.0 also when no lr is known)."""
    ruled = rule_lr(config, baseline, rule)
    if ruled is None or config.lr is None or ruled <= 0:
        return 1.0
    return config.lr / ruled


class Failure(NamedTuple):
    """A full-budget trial that failed the loss tolerance, as :func:`failed_class` reads it.

    Attributes:
        number: Its trial number.
        config: Its config.
        improving: Its training loss was still falling at its end (:func:`still_improving`): it
            under-trained, so a larger lr may converge in the same or fewer optimizer steps.
        refuted_by: A full-budget trial of its class that passed the loss with a larger effective
            batch, or the same one at a larger lr (:func:`failures_of`), or ``None``. A plateau it
            refutes rules out no more than a still-falling failure does (:func:`failed_class`).
        blind: It stored no training-loss curve that tells a plateau from under-training
            (:func:`curve_tells`: manual optimization returning no loss, or too short a curve), so it is
            read as a still-falling one: ruling out a larger lr that would have converged loses a win,
            running one that does not costs one trial.
    """

    number: int
    config: TrialConfig
    improving: bool = False
    refuted_by: int | None = None
    blind: bool = False

    @property
    def lr_bound(self) -> bool:
        """Whether this failure rules out only the same or fewer steps at the same or a smaller lr
        multiplier (:attr:`improving`, :attr:`blind`, or a plateau :attr:`refuted_by` a pass), not a
        larger batch at any lr."""
        return self.improving or self.blind or self.refuted_by is not None


def still_improving(curve: Sequence[Sequence[float]]) -> bool:
    """Whether a run's training loss was still falling at its end (see :data:`IMPROVING_DROP`).

    Args:
        curve: The run's ``[(samples_seen, training loss), ...]`` (increasing samples).

    Returns:
        ``True`` when the mean finite loss over the last quarter of the run's samples is at least
        :data:`IMPROVING_DROP` below the mean over the quarter before; ``False`` otherwise, and when
        either quarter has no finite point (a non-finite loss, or too short a curve).
    """
    points = [(float(x), float(y)) for x, y in curve]
    quarters = _last_quarters(points) if all(math.isfinite(y) for _, y in points) else None
    if quarters is None:
        return False
    last, before = quarters
    return statistics.fmean(last) <= (1 - IMPROVING_DROP) * statistics.fmean(before)


def curve_tells(curve: Sequence[Sequence[float]]) -> bool:
    """Whether :func:`still_improving` can read ``curve`` (same shape): it holds a non-finite loss (a
    divergence), or finite points in both its last quarter and the quarter before. An empty curve (no
    training loss logged: manual optimization whose ``training_step`` returns nothing) tells nothing."""
    points = [(float(x), float(y)) for x, y in curve]
    return not all(math.isfinite(y) for _, y in points) or _last_quarters(points) is not None


def _last_quarters(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]] | None:
    """The losses of the last quarter of ``points``' samples and of the quarter before, or ``None`` when
    either is empty (no curve, or too short a one)."""
    if not points:
        return None
    end = points[-1][0]
    last = [y for x, y in points if 0.75 * end < x <= end]
    before = [y for x, y in points if 0.5 * end < x <= 0.75 * end]
    return (last, before) if last and before else None


def failures_of(full: Sequence[Any]) -> list[Failure]:
    """The trials of ``full`` (frozen full-budget trials) that failed the loss tolerance, duplicates left
    out, each with whether its training loss (user attribute ``loss_curve``) was still falling at its end
    (:func:`still_improving`), and, for one that was not, the first trial of ``full`` that refutes its
    plateau (:attr:`Failure.refuted_by`): of its class, within the loss tolerance (``feasible``), with a
    larger effective batch, or the same one at a larger lr. A plateau reads as an lr already too large
    for the run's steps; a pass with fewer steps, or a larger lr, shows it was not (a regression MLP:
    batch 64 failed on a plateau at the rule's lr and passed at twice it, while its plateau had ruled
    batch 128 out at any lr)."""
    failures = [f for f in map(_failure_of, full) if f is not None]
    passed = [
        (t.number, TrialConfig.from_dict(t.user_attrs["config"]))
        for t in full
        if t.user_attrs.get("feasible") is True and "config" in t.user_attrs and "duplicate_of" not in t.user_attrs
    ]
    out = []
    for f in failures:
        if not f.improving and not f.blind:
            by = next((number for number, ok in passed if _refutes(ok, f.config)), None)
            f = f._replace(refuted_by=by)
        out.append(f)
    return out


def _refutes(passed: TrialConfig, failed: TrialConfig) -> bool:
    """Whether a pass of ``passed`` shows that ``failed``'s plateau was no lr too large for its steps (:func:`failures_of`)."""
    if not _same_class(passed, failed):
        return False
    if passed.effective_batch_size != failed.effective_batch_size:
        return passed.effective_batch_size > failed.effective_batch_size
    return passed.lr is not None and failed.lr is not None and passed.lr > failed.lr and not _same_lr(passed.lr, failed.lr)


@per_finished_trial
def _failure_of(trial: Any) -> Failure | None:
    """The :class:`Failure` of a full-budget trial, or ``None`` when it did not fail the loss (derived once per finished trial)."""
    attrs = trial.user_attrs
    if attrs.get("feasible") is not False or "config" not in attrs or "duplicate_of" in attrs:
        return None
    curve = attrs.get("loss_curve") or []
    return Failure(trial.number, TrialConfig.from_dict(attrs["config"]), still_improving(curve), blind=not curve_tells(curve))


def failed_class(config: TrialConfig, failures: Iterable[Failure], baseline: TrialConfig, rule: str) -> str | None:
    """Why ``config`` need not run: a config of its class already failed the loss at full budget.

    A class is a precision and the constructor arguments. What a failure of the class rules out
    depends on how it failed, since a config that trains the same samples in fewer optimizer steps
    (a larger effective batch) needs a larger lr to get as far:

    - **Still improving** (:attr:`Failure.improving`: it under-trained; or :attr:`Failure.blind`, no
      curve to tell): every config with the same
      or a larger effective batch (the same or fewer optimizer steps) at the same or a smaller lr
      multiplier (:func:`lr_multiplier`); a larger lr may still converge.
    - **Otherwise** (a plateau or a divergence: its lr was already too large for its steps, unless a
      pass refutes it, :attr:`Failure.refuted_by`, when it rules out what a still-falling one does): every
      config with a larger effective batch, whatever its lr, and every config with the same
      effective batch at the same or a larger lr multiplier; the same steps at a smaller lr may still
      converge.

    Args:
        config: The config about to run.
        failures: The full-budget trials of the study that failed the loss.
        baseline: The baseline config.
        rule: The lr rule (:func:`lr_rule`).

    Returns:
        The one-line reason stored on the skipped trial, or ``None`` (run it).
    """
    mine = lr_multiplier(config, baseline, rule)
    for number, failed, improving, refuted_by, blind in failures:
        if not _same_class(failed, config):
            continue
        theirs = lr_multiplier(failed, baseline, rule)
        what = (
            f"not run: trial {number} ({failed.precision}, effective batch {failed.effective_batch_size}, "
            f"lr x{theirs:.3g} of the {rule} rule) failed the loss at full budget"
        )
        if improving or blind or refuted_by is not None:
            if improving:
                how = "with its loss still falling"
            elif blind:
                how = "(no training-loss curve told a plateau from under-training, so a larger lr may still converge)"
            else:
                how = f"(on a plateau, which trial {refuted_by}'s pass showed was not its lr's limit)"
            if config.effective_batch_size >= failed.effective_batch_size and mine <= theirs * (1 + 1e-9):
                return (
                    f"{what} {how}, and this config trains the same samples in as many or fewer "
                    f"optimizer steps (effective batch {config.effective_batch_size}) at the same or a smaller lr multiplier (x{mine:.3g})"
                )
            continue
        if config.effective_batch_size > failed.effective_batch_size:
            return (
                f"{what}, and this config trains the same samples in fewer optimizer steps (effective batch {config.effective_batch_size})"
            )
        if config.effective_batch_size == failed.effective_batch_size and mine >= theirs * (1 - 1e-9):
            return (
                f"{what}, and this config has the same effective batch ({config.effective_batch_size}) at the same or a larger "
                f"lr multiplier (x{mine:.3g})"
            )
    return None


def ruled_out_at_any_lr(config: TrialConfig, failures: Iterable[Failure]) -> bool:
    """Whether :func:`failed_class` skips ``config`` whatever its lr: a config of its class with a
    smaller effective batch (more optimizer steps) already failed the loss at full budget, and not for
    want of steps (its loss was not still falling).

    Args:
        config: A config (its lr is not read).
        failures: As for :func:`failed_class`.
    """
    return any(
        not f.lr_bound and _same_class(f.config, config) and config.effective_batch_size > f.config.effective_batch_size for f in failures
    )


def raised_lr_needed(config: TrialConfig, failures: Iterable[Failure], baseline: TrialConfig, rule: str) -> float | None:
    """The lr multiplier ``config`` must exceed to escape the still-improving failures of its class
    (:func:`failed_class`): the largest multiplier among those with the same or a smaller effective
    batch, or ``None`` when none of them applies.

    Args:
        config: A config (its lr is not read).
        failures: As for :func:`failed_class`.
        baseline: The baseline config.
        rule: The lr rule.
    """
    needed = [
        lr_multiplier(f.config, baseline, rule)
        for f in failures
        if f.lr_bound and _same_class(f.config, config) and config.effective_batch_size >= f.config.effective_batch_size
    ]
    return max(needed) if needed else None


def same_question(a: TrialConfig, b: TrialConfig, compare_lr: bool = True) -> bool:
    """Whether a full-budget run of ``a`` asks ``b``'s convergence question: the same effective batch,
    precision and constructor arguments (and ``lr`` with ``compare_lr``), differing only in knobs that
    keep the math (``num_workers``, the micro-batch x accumulation split, DataLoader options). One
    run's loss answers for both: when it fails, the other's class is ruled out (:func:`failed_class`);
    when it passes, the slower of the two cannot win. Stage 2 of ``--search staged`` runs only the
    faster of two such configs in a round. Measured (the zoo's vit_digits, before): batch 128 with 1 and
    with 2 loader workers ran side by side at each of 3 lrs, 6 of 8 full-budget runs on 3 questions,
    and batch 64 got none."""
    return a.effective_batch_size == b.effective_batch_size and _same_class(a, b) and (not compare_lr or _same_lr(a.lr, b.lr))


def _same_class(a: TrialConfig, b: TrialConfig) -> bool:
    """Whether two configs are of one class: the same precision and constructor arguments."""
    return (a.precision, a.model_args or {}, a.data_args or {}) == (b.precision, b.model_args or {}, b.data_args or {})


def sanity_tolerance(tolerance: float) -> float:
    """The relative loss increase a math-preserving config is allowed against the baseline:
    ``max(SANITY_FACTOR x tolerance, SANITY_FLOOR)`` (``tolerance``: ``--loss-tolerance``, ``0 <= tolerance < 1``).
    Only rounding and the data order differ from the baseline's run, not the convergence."""
    return max(SANITY_FACTOR * tolerance, SANITY_FLOOR)


def loss_sanity(curve: Sequence[Sequence[float]], baseline_curve: Sequence[Sequence[float]], tolerance: float) -> dict[str, Any] | None:
    """The loss sanity check of a math-preserving run: its training loss against the baseline's at the same samples.

    Both curves are averaged over the last :data:`SANITY_WINDOW` of the run's samples; the run passes
    when its mean is at most ``max(SANITY_FACTOR x tolerance, SANITY_FLOOR)`` (relative) above the
    baseline's. A lower loss always passes.

    Args:
        curve: The run's ``[(samples_seen, training loss), ...]`` (global samples, increasing).
        baseline_curve: The baseline trial's, from a run at least as long.
        tolerance: The study's ``--loss-tolerance``, ``0 <= tolerance < 1``.

    Returns:
        ``{"loss", "baseline_loss", "samples", "change", "tolerance", "ok"}`` (``change``: relative,
        positive when worse), or ``None`` when either curve has no finite point in the window.
    """
    points = [(float(x), float(y)) for x, y in curve if math.isfinite(float(y))]
    if not points:
        return None
    end = points[-1][0]
    start = end * (1 - SANITY_WINDOW)
    mine = [y for x, y in points if start < x <= end]
    theirs = [float(y) for x, y in baseline_curve if start < float(x) <= end and math.isfinite(float(y))]
    if not mine or not theirs:
        return None
    loss, base = statistics.fmean(mine), statistics.fmean(theirs)
    limit = sanity_tolerance(tolerance)
    change = (loss - base) / abs(base) if base else (0.0 if loss == base else math.inf)
    return {"loss": loss, "baseline_loss": base, "samples": int(end), "change": change, "tolerance": limit, "ok": change <= limit}
