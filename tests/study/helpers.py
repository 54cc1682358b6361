"""Studies built without training: trials added with the user attributes a real search stores."""

from __future__ import annotations

import math

import optuna
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.config import PRECISIONS, TrialConfig
from autotune.objective import constraint_value, directions
from autotune.optuna_compat import CONSTRAINTS_KEY
from autotune.study import BASELINE_ATTR, SETTINGS_ATTR
from autotune.study.settings import StudySettings
from autotune.study.staged import SHORT_RUN_CONSTRAINT

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: The baseline config of every study here (the model's own values).
BASELINE = TrialConfig(batch_size=16, lr=0.05)

DISTRIBUTIONS = {
    "batch_size": CategoricalDistribution([16, 32, 64, 128, 256, 512]),
    "precision": CategoricalDistribution(list(PRECISIONS)),
    "accumulate_grad_batches": IntDistribution(1, 8),
    "num_workers": IntDistribution(0, 4),
    "lr": FloatDistribution(0.005, 0.5, log=True),
}


def make_settings(**overrides) -> StudySettings:
    """Settings of a study of a model that trains :data:`BASELINE` on a CPU (``overrides`` replace fields)."""
    return StudySettings(
        study_name="s", model_file="/nowhere/model.py", model_class="Model", data_class=None, config_file=None, user_config=None,
        space_file="default.yaml", space_explicit=False, space={}, targets={}, model_info={}, baseline_config=BASELINE.to_dict(),
        hardware={"accelerator": "cpu"}, autotune_version="test", devices=1, num_nodes=1, monitor_explicit=False,
        objective="throughput", loss_tolerance=0.05, monitor="val_loss", mode="min", samples=1024, trial_timeout=60.0, seed=0,
    ).replace(**overrides)


def make_study(storage: str | None = None, **settings):
    """A study with autotune's settings (:func:`make_settings`; ``settings`` overrides them)."""
    values = make_settings(**settings).to_dict()
    study = optuna.create_study(storage=storage, directions=directions(values["objective"], values["mode"]))
    study.set_user_attr(SETTINGS_ATTR, values)
    return study


def add(study, sps: float | None = 100.0, loss: float | None = 1.0, state: str = "COMPLETE", baseline: bool = False,
        attrs: dict | None = None, **config):
    """Add a finished trial of ``TrialConfig(**config)`` (fields default to the baseline's) and return it frozen.

    A completed trial is judged against the study's baseline loss as a search trial is (``feasible``,
    ``constraint``, and the constraint stored as Optuna and optuna-dashboard read it), unless it is a
    short stage-1 run (``trial_samples``: not judged, told :data:`SHORT_RUN_CONSTRAINT`). The first
    ``baseline`` trial becomes the study's baseline (its ``baseline`` study attribute). ``attrs`` adds
    or overrides user attributes (``confirm_of``, ``duplicate_of``, ``fail_kind``, ...).
    """
    cfg = BASELINE.replace(**config)
    params = {"batch_size": cfg.batch_size, "precision": cfg.precision, "accumulate_grad_batches": cfg.accumulate_grad_batches,
              "num_workers": cfg.num_workers, "lr": cfg.lr}
    settings = study.user_attrs[SETTINGS_ATTR]
    user_attrs = {"config": cfg.to_dict(), "effective_batch_size": cfg.effective_batch_size, "baseline": baseline}
    if sps is not None:
        user_attrs["samples_per_sec"] = sps
    if loss is not None:
        user_attrs["loss"] = loss
    user_attrs.update(attrs or {})
    info = study.user_attrs.get(BASELINE_ATTR)
    if state == "COMPLETE" and "trial_samples" in user_attrs:
        user_attrs.setdefault("feasible", None)
        user_attrs.setdefault("constraint", None)
    elif state == "COMPLETE":
        reference = loss if info is None else info["loss"]
        constraint = constraint_value(loss, reference, settings["loss_tolerance"], settings["mode"])
        user_attrs.setdefault("constraint", constraint)
        user_attrs.setdefault("feasible", constraint <= 0)
    values, system_attrs = None, {}
    if state == "COMPLETE":
        values = [sps] if len(study.directions) == 1 else [sps, loss]
        constraint = SHORT_RUN_CONSTRAINT if "trial_samples" in user_attrs else user_attrs["constraint"]
        system_attrs[CONSTRAINTS_KEY] = [1e300 if constraint is None or not math.isfinite(constraint) else float(constraint)]
    study.add_trial(optuna.trial.create_trial(params=params, distributions={k: DISTRIBUTIONS[k] for k in params}, values=values,
                                              state=getattr(optuna.trial.TrialState, state), user_attrs=user_attrs,
                                              system_attrs=system_attrs))
    frozen = study.get_trials(deepcopy=False)[-1]
    if baseline and info is None and state == "COMPLETE":
        study.set_user_attr(BASELINE_ATTR, {"trial": frozen.number, "samples_per_sec": sps, "loss": loss, "loss_target": None})
    return frozen


def race(study, candidate, incumbent_values, candidate_values, incumbent: int = 0, incumbent_loss: float = 1.0,
         candidate_loss: float = 1.0, samples: int = 2048, cap: int = 6, failed: int = 0, reach=None, stopped=(), reached=True):
    """Paired runs of a race of trial ``candidate``'s config against trial ``incumbent``'s, stored as
    :mod:`autotune.study.racing` stores them (pair ``i`` runs first what :func:`autotune.paired.runs_first`
    says), then ``failed`` failed candidate runs in the next pairs (each failed twice: its run and the race's retry); ``reach``: ``(incumbent's, candidate's)`` seconds
    to the loss target of each run (``time_to_target``; reached, ``target_reached``, unless ``None``, or the candidate's without ``reached``); ``stopped``: the roles whose runs stopped at the loss
    target (``stopped_at_target``). Returns ``[(incumbent run, candidate run)]``."""
    from autotune.paired import runs_first

    every = study.get_trials(deepcopy=False)
    configs = {n: TrialConfig.from_dict(every[n].user_attrs["config"]).to_dict() for n in (incumbent, candidate)}
    pairs = []
    for i, (inc, cand) in enumerate(zip(incumbent_values, candidate_values)):
        runs = {}
        order = ("incumbent", "candidate") if runs_first(i) == "incumbent" else ("candidate", "incumbent")
        for role in order:
            of = incumbent if role == "incumbent" else candidate
            attrs = {"confirm_of": of, "confirm_samples": samples, "pair_of": candidate, "pair_index": i, "incumbent": incumbent,
                     "pair_cap": cap}
            value, loss = (inc, incumbent_loss) if role == "incumbent" else (cand, candidate_loss)
            if reach is not None:
                attrs["time_to_target"] = reach[0 if role == "incumbent" else 1][i]
                attrs["target_reached"] = attrs["time_to_target"] is not None and (reached or role == "incumbent")
            if role in stopped:
                attrs["stopped_at_target"] = True
            runs[role] = add(study, value, loss, attrs=attrs, **configs[of])
        pairs.append((runs["incumbent"], runs["candidate"]))
    for j in range(failed):  # each failed in its run and in the retry the race gives it
        attrs = {"confirm_of": candidate, "confirm_samples": samples, "pair_of": candidate, "pair_index": len(pairs) + j,
                 "incumbent": incumbent, "pair_cap": cap, "fail_kind": "nonfinite_loss", "fail_reason": "non-finite loss: nan"}
        for _ in range(2):
            add(study, None, None, state="FAIL", attrs=attrs, **configs[candidate])
    return pairs
