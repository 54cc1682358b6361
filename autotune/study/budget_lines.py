"""The run's first lines about its training budget: a ``max_epochs`` of the user's shorter than it, and a
budget too short to measure training."""

from __future__ import annotations

from autotune.config import TrialConfig
from autotune.study.settings import StudySettings

__all__ = ["FEW_STEPS", "max_epochs_line", "short_budget_line"]


def max_epochs_line(settings: StudySettings) -> str | None:
    """``"your max_epochs=15 covers 6,840 training samples, fewer than --samples 20000: ..."`` when the
    user's ``max_epochs`` would end a trial before its budget (trials raise it:
    :func:`autotune.trial_trainer.trial_max_epochs`), else None."""
    from autotune.trial_trainer import budget_epochs

    user = ((settings.model_info or {}).get("training_length") or {}).get("max_epochs")
    train = settings.train_samples
    if not isinstance(user, int) or user < 0 or not train:
        return None
    base = TrialConfig.from_dict(settings.baseline_config)
    needed = budget_epochs(base, int(settings.samples), int(train))
    if needed is None or needed <= user:
        return None
    # whole batches per epoch, as budget_epochs counts them (15 epochs of 140 samples in batches of 8: 2,040, not 2,100)
    covered = user * (-(-int(train) // base.world_size) // base.batch_size) * base.batch_size * base.world_size
    return (
        f"your max_epochs={user} covers {covered:,} training samples in whole batches, fewer than --samples {settings.samples}: "
        f"trials raise it to {needed} epochs, enough for their budget (the export keeps max_epochs={user})"
    )


#: Fewest optimizer steps of the baseline a trial's budget should hold (:func:`short_budget_line`).
FEW_STEPS = 8


def short_budget_line(settings: StudySettings) -> str | None:
    """A warning when ``--samples`` holds fewer than :data:`FEW_STEPS` optimizer steps of the baseline's
    effective batch, else None: such a trial measures its start-up and first steps, not training
    (helper-36: ``--samples 16`` at effective batch 64 ran one step per trial, measured 50 samples/s
    against 640 at 2,048 samples, and recommended without a word)."""
    base = TrialConfig.from_dict(settings.baseline_config)
    steps = -(-int(settings.samples) // base.effective_batch_size)
    if steps >= FEW_STEPS:
        return None
    return (
        f"--samples {settings.samples} is {steps} optimizer step(s) of the baseline's effective batch {base.effective_batch_size}: "
        f"a trial this short measures its start-up, not training; give --samples {FEW_STEPS * base.effective_batch_size} or more"
    )
