"""Per-trial results computed once: what autotune derives from a finished trial does not change.

Optuna never changes a finished trial (a COMPLETE, FAIL or PRUNED trial's values and attributes are
final), and Optuna's trial cache (``_CachedStorage``, see :func:`autotune.storage.open_storage`)
returns the same ``FrozenTrial`` object for it on every ``get_trials(deepcopy=False)``. So a value
derived from one finished trial can be kept by the object's identity: a study's passes over all its
trials, made before every new trial, then cost a dictionary lookup per old trial, not the
derivation again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["per_finished_trial"]

R = TypeVar("R")

#: Entries a cache keeps before it starts over (each holds its trial, which Optuna's cache holds anyway).
MAX_ENTRIES = 200_000


def per_finished_trial(derive: Callable[[Any], R]) -> Callable[[Any], R]:
    """``derive(trial)``, computed once per finished ``FrozenTrial`` object (by identity); a trial still
    waiting or running is derived afresh every call. The value must not be mutated by callers.

    The cache holds each trial it keys, so an id is never reused for another trial while cached.
    """
    cache: dict[int, tuple[Any, Any]] = {}

    @functools.wraps(derive)
    def cached(trial: Any) -> R:
        if not trial.state.is_finished():
            return derive(trial)
        hit = cache.get(id(trial))
        if hit is not None and hit[0] is trial:
            return hit[1]
        value = derive(trial)
        if len(cache) >= MAX_ENTRIES:
            cache.clear()
        cache[id(trial)] = (trial, value)
        return value

    return cached
