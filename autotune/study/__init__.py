"""The study: the single source of truth of a search, one concern per module.

The Optuna study holds everything. Its user attribute ``autotune`` holds the settings the study was
created with (model file, classes, space, objective, budget, hardware), so any later command
(``search`` again to resume, ``show``, ``export``, ``dashboard``) needs only the storage and the
study name. Each trial stores its config and measurements as user attributes, and a failed trial its
``fail_kind`` and ``fail_reason``. Nothing is ever deleted.

Modules, in the order a search uses them:

- :mod:`~autotune.study.options`: what the user asked for (:class:`SearchOptions`), every default, the checks before anything is created.
- :mod:`~autotune.study.settings`: the study's settings (model inspection, baseline, resolved space); create, load, check on resume.
- :mod:`~autotune.study.probe`: the memory model's probes before the search.
- :mod:`~autotune.study.search`: the entry point :func:`run_search`, and the confirmation runs.
- :mod:`~autotune.study.worker`: :func:`run_worker` (``autotune worker``), which waits for a study that does not exist yet.
- :mod:`~autotune.study.staged`: the ``--search staged`` policy; :mod:`~autotune.study.screen`: its stage-1 order; :mod:`~autotune.study.math_class`: which configs keep the baseline's math.
- :mod:`~autotune.study.queue`: the shared budget of WAITING trials, claimed and drained with ``--jobs``; Ctrl-C.
- :mod:`~autotune.study.plan`: what each search run has still to add (workers wait for it; the next search continues a stopped run).
- :mod:`~autotune.study.trial`: run one claimed trial (child process, heartbeat, pruning watcher).
- :mod:`~autotune.study.tell`: what a finished, duplicate, pruned or interrupted trial stores.
- :mod:`~autotune.study.records`: read-only queries: baseline, duplicates, confirmation groups, the recommendation.
- :mod:`~autotune.study.memory`: the OOM frontier over the study's trials.
- :mod:`~autotune.study.bounds`: batch sizes larger than an epoch, learned from a trial and kept out.
- :mod:`~autotune.study.publish`: the exported LightningCLI YAML and the dashboard note.

Storage URLs and opening live in :mod:`autotune.storage`; result sentences in :mod:`autotune.summary`.

Importing this package is cheap: each public name loads its module (and Optuna) on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.errors import Interrupted
    from autotune.storage import mask_url, open_storage
    from autotune.study.memory import oom_frontier
    from autotune.study.options import (
        DEFAULTS,
        ENV_STORAGE,
        SearchOptions,
        check_out_path,
        check_search_options,
        default_search,
        default_storage,
        default_study_name,
        resolve_storage,
    )
    from autotune.study.publish import default_export_path, export_study
    from autotune.study.queue import drain_queue
    from autotune.study.records import (
        confirm_candidates,
        confirmation,
        confirmed_speed,
        full_budget_trials,
        recommendation,
        records_of,
    )
    from autotune.study.search import SearchResult, run_search
    from autotune.study.settings import BASELINE_ATTR, SETTINGS_ATTR, load_study
    from autotune.study.staged import (
        screen_points,
        stage2_round,
        staged_plan,
        system_budget,
        system_part,
        top_system_configs,
    )
    from autotune.study.worker import run_worker

__all__ = [
    "BASELINE_ATTR",
    "DEFAULTS",
    "ENV_STORAGE",
    "SETTINGS_ATTR",
    "Interrupted",
    "SearchOptions",
    "SearchResult",
    "check_out_path",
    "check_search_options",
    "confirm_candidates",
    "confirmation",
    "confirmed_speed",
    "default_export_path",
    "default_search",
    "default_storage",
    "default_study_name",
    "drain_queue",
    "export_study",
    "full_budget_trials",
    "load_study",
    "mask_url",
    "oom_frontier",
    "open_storage",
    "recommendation",
    "records_of",
    "resolve_storage",
    "run_search",
    "run_worker",
    "screen_points",
    "stage2_round",
    "staged_plan",
    "system_budget",
    "system_part",
    "top_system_configs",
]

#: Where each public name lives.
_HOMES = {
    "BASELINE_ATTR": "autotune.study.settings",
    "DEFAULTS": "autotune.study.options",
    "ENV_STORAGE": "autotune.study.options",
    "Interrupted": "autotune.errors",
    "SETTINGS_ATTR": "autotune.study.settings",
    "SearchOptions": "autotune.study.options",
    "SearchResult": "autotune.study.search",
    "check_out_path": "autotune.study.options",
    "check_search_options": "autotune.study.options",
    "confirm_candidates": "autotune.study.records",
    "confirmation": "autotune.study.records",
    "confirmed_speed": "autotune.study.records",
    "default_export_path": "autotune.study.publish",
    "default_search": "autotune.study.options",
    "default_storage": "autotune.study.options",
    "default_study_name": "autotune.study.options",
    "drain_queue": "autotune.study.queue",
    "export_study": "autotune.study.publish",
    "full_budget_trials": "autotune.study.records",
    "load_study": "autotune.study.settings",
    "mask_url": "autotune.storage",
    "oom_frontier": "autotune.study.memory",
    "open_storage": "autotune.storage",
    "recommendation": "autotune.study.records",
    "records_of": "autotune.study.records",
    "resolve_storage": "autotune.study.options",
    "run_search": "autotune.study.search",
    "run_worker": "autotune.study.worker",
    "screen_points": "autotune.study.staged",
    "stage2_round": "autotune.study.staged",
    "staged_plan": "autotune.study.staged",
    "system_budget": "autotune.study.staged",
    "system_part": "autotune.study.staged",
    "top_system_configs": "autotune.study.staged",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
