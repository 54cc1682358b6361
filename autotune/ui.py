"""What a search tells its user while it runs: the :class:`UI` protocol.

The study code (:mod:`autotune.study`) calls these methods and never prints; :mod:`autotune.report`
implements them for a terminal (:class:`autotune.live.LiveUI`, a rich live view) and for pipes and
logs (:class:`autotune.report.ConsoleUI`, one line per event). A test or an embedding program can
pass any object with these methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from autotune.config import TrialConfig
    from autotune.study.settings import StudySettings

__all__ = ["UI"]


class UI(Protocol):
    """Receives a search's events, in the order it makes them."""

    def info(self, message: str) -> None:
        """A line of progress (one line, no markup)."""

    def warn(self, message: str) -> None:
        """Something the user should know that does not stop the search (one line)."""

    def search_started(self, settings: StudySettings, trials: int) -> None:
        """The search begins: its settings and the trials (>= 0) this run adds (fewer than ``--trials`` when the space has fewer configs left)."""

    def stage(self, message: str, trials: int) -> None:
        """A new stage (confirmation) adds ``trials`` (>= 0) trials to the run."""

    def trial_started(self, number: int, config: TrialConfig, is_baseline: bool) -> None:
        """Trial ``number`` starts with ``config``."""

    def trial_progress(self, number: int, path: str) -> None:
        """Trial ``number`` writes its progress preview to ``path`` (see :mod:`autotune.progress`)."""

    def trial_finished(self, trial: Any) -> None:
        """A trial ended (an Optuna ``FrozenTrial`` with autotune's user attributes)."""

    def stop(self) -> None:
        """End any live display (before a summary or an error message)."""

    def summary(self, study: Any, settings: StudySettings, recommended: Any, baseline: Any, export_path: Path | None) -> None:
        """The search ended: its best trials, the recommendation and where it was exported."""
