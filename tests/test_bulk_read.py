"""autotune's bulk trial read returns exactly what Optuna's own ORM read returns."""

import math
import uuid

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune.bulk_read import read_trials
from autotune.storage import open_storage
from tests.test_search_e2e import POSTGRES, _postgres_answers

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _fill(storage) -> optuna.Study:
    """A two-objective study with a trial in every state, every distribution type and odd values."""
    study = optuna.create_study(storage=storage, study_name=f"bulk-{uuid.uuid4().hex[:8]}", directions=["maximize", "minimize"])
    dists = {
        "batch_size": CategoricalDistribution([16, 32, None, "x", True]),
        "lr": FloatDistribution(1e-5, 1.0, log=True),
        "dropout": FloatDistribution(0.0, 0.5, step=0.1),
        "workers": IntDistribution(0, 8),
        "accum": IntDistribution(1, 64, log=True),
    }
    params = {"batch_size": None, "lr": 3e-4, "dropout": 0.2, "workers": 3, "accum": 8}
    attrs = {"config": {"nested": [1, 2.5, None, "é"]}, "log": "line\n" * 3, "nan": float("nan"), "inf": float("inf")}
    for values in ([1.0, 2.0], [math.inf, -math.inf], [-1e300, 1e-300]):
        study.add_trial(
            create_trial(
                params=params,
                distributions=dists,
                values=values,
                user_attrs=attrs,
                system_attrs={"constraints": [0.5]},
                intermediate_values={0: 1.0, 5: math.nan, 9: math.inf, 10: -math.inf},
            )
        )
    study.add_trial(
        create_trial(
            params={"batch_size": "x", "workers": 0},
            distributions={k: dists[k] for k in ("batch_size", "workers")},
            state=TrialState.FAIL,
            user_attrs={"fail_kind": "oom"},
        )
    )
    study.add_trial(
        create_trial(
            params={"batch_size": True},
            distributions={"batch_size": dists["batch_size"]},
            state=TrialState.PRUNED,
            intermediate_values={3: 2.0},
        )
    )
    study.enqueue_trial({"batch_size": 32, "workers": 1})  # WAITING
    running = study.ask({"lr": dists["lr"], "batch_size": dists["batch_size"]})  # RUNNING (the queued trial is taken: then one more)
    running.set_user_attr("samples_per_sec", 123.5)
    study.ask({"lr": dists["lr"]})
    study.enqueue_trial({"batch_size": 16})
    return study


def _canon(trial) -> str:
    """Every field of a FrozenTrial as text (NaN equals NaN; types kept: ``1`` is not ``1.0``; the
    order of attributes is the database's, in Optuna's read too, so they are sorted)."""
    fields = ("number", "state", "values", "datetime_start", "datetime_complete", "params", "distributions", "_trial_id")
    mappings = (trial.user_attrs, trial.system_attrs, trial.intermediate_values)
    return repr(
        [(getattr(trial, f), type(getattr(trial, f))) for f in fields]
        + [[type(v) for v in trial.params.values()]]
        + [sorted(m.items(), key=lambda kv: str(kv[0])) for m in mappings]
    )


def _backends():
    yield "sqlite"
    if _postgres_answers():
        yield "postgresql"


@pytest.mark.parametrize("listed", [True, False], ids=["ids-listed", "ids-by-subquery"])
@pytest.mark.parametrize("backend", list(_backends()))
def test_bulk_read_equals_optunas_own_read_for_every_selection(tmp_path, monkeypatch, backend, listed):
    """Both ways of naming the trials in the child-table queries (a list of ids for a cache's small
    reads, the selection as a subquery for a big one) read the same trials as Optuna."""
    import autotune.bulk_read

    monkeypatch.setattr(autotune.bulk_read, "_LISTED_IDS", 2000 if listed else 0)
    url = f"sqlite:///{tmp_path / 's.db'}" if backend == "sqlite" else POSTGRES
    rdb = optuna.storages.RDBStorage(url)
    study = _fill(rdb)
    sid = study._study_id
    every = rdb._get_trials(sid, None, set(), -1)
    assert [t.state for t in every].count(TrialState.COMPLETE) == 3 and len({t.state for t in every}) == 5
    ids = [t._trial_id for t in every]
    selections = [
        (None, set(), -1),
        ((TrialState.COMPLETE,), set(), -1),
        ((TrialState.WAITING, TrialState.RUNNING), set(), -1),
        (None, set(), ids[2]),  # newer than the third trial
        (None, {ids[0], ids[4], ids[-1]}, ids[3]),  # a cache's unfinished trials and everything newer
    ]
    assert read_trials(rdb.engine, sid, None, set(), ids[-1]) == []  # nothing newer
    for states, included, greater in selections:
        ours = read_trials(rdb.engine, sid, states, included, greater)
        theirs = rdb._get_trials(sid, states, included, greater)
        assert ours and [_canon(t) for t in ours] == [_canon(t) for t in theirs], (states, included, greater)
    if backend == "postgresql":
        optuna.delete_study(study_name=study.study_name, storage=rdb)


def test_autotunes_storage_keeps_optunas_trial_cache_across_load_study(tmp_path):
    """One storage object, many ``load_study``: finished trials are read from the database once."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _fill(optuna.storages.RDBStorage(url))
    storage = open_storage(url, create=False)
    reads = []
    backend = storage._backend
    original = type(backend)._get_trials

    def counting(self, study_id, states, included_trial_ids, trial_id_greater_than):
        found = original(self, study_id, states, included_trial_ids, trial_id_greater_than)
        reads.append(len(found))
        return found

    type(backend)._get_trials = counting
    try:
        first = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)
        again = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)
    finally:
        type(backend)._get_trials = original
    assert [_canon(t) for t in first] == [_canon(t) for t in again] and len(first) == 8
    # the first read fetched all 8; the second only the 3 unfinished ones (1 waiting, 2 running)
    assert reads == [8, 3]


@pytest.mark.parametrize("backend", list(_backends()))
def test_a_digest_read_is_optunas_read_with_only_the_user_attributes_asked_for(tmp_path, backend):
    url = f"sqlite:///{tmp_path / 's.db'}" if backend == "sqlite" else POSTGRES
    rdb = optuna.storages.RDBStorage(url)
    study = _fill(rdb)
    sid = study._study_id
    keys = {"config", "fail_kind", "samples_per_sec", "not_stored"}
    digest = read_trials(rdb.engine, sid, None, set(), -1, user_attr_keys=keys)
    theirs = rdb._get_trials(sid, None, set(), -1)
    assert len(digest) == len(theirs) == 8
    for ours, full in zip(digest, theirs):
        assert ours.user_attrs == {k: v for k, v in full.user_attrs.items() if k in keys}
        assert ours.system_attrs == {} and ours.intermediate_values == {}
        # everything else is Optuna's own
        for field in ("number", "state", "values", "datetime_start", "datetime_complete", "params", "distributions", "_trial_id"):
            assert getattr(ours, field) == getattr(full, field), field
    assert {k for t in digest for k in t.user_attrs} == {"config", "fail_kind", "samples_per_sec"}
    # the system attributes asked for, alone
    with_constraints = read_trials(rdb.engine, sid, None, set(), -1, user_attr_keys=keys, system_attr_keys={"constraints"})
    assert [t.system_attrs for t in with_constraints] == [{k: v for k, v in t.system_attrs.items() if k == "constraints"} for t in theirs]
    assert sum(bool(t.system_attrs) for t in with_constraints) == 3
    if backend == "postgresql":
        optuna.delete_study(study_name=study.study_name, storage=rdb)


def test_the_ordered_cache_returns_what_optunas_cache_returns_as_the_study_changes(tmp_path):
    from autotune.bulk_read import OrderedTrialCache

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _fill(optuna.storages.RDBStorage(url))
    ours = open_storage(url, create=False)
    assert isinstance(ours, OrderedTrialCache)
    theirs = optuna.storages._CachedStorage(optuna.storages.RDBStorage(url))
    sid = study._study_id

    def same() -> None:
        for states in (None, (TrialState.COMPLETE,), (TrialState.WAITING, TrialState.RUNNING), ()):
            a, b = ours.get_all_trials(sid, deepcopy=False, states=states), theirs.get_all_trials(sid, deepcopy=False, states=states)
            assert [_canon(t) for t in a] == [_canon(t) for t in b], states
        assert [_canon(t) for t in ours.get_all_trials(sid)] == [_canon(t) for t in theirs.get_all_trials(sid)]  # deep copies

    same()
    running = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
    study.tell(running[0].number, [1.0, 1.0])  # a trial finishes after both caches read it unfinished
    study.enqueue_trial({"batch_size": 16})
    study.add_trial(create_trial(params={}, distributions={}, values=[3.0, 4.0]))
    same()


def test_the_ordered_cache_counts_unfilled_numbers_without_comparing_trials(tmp_path):
    """Trials added out of order leave gaps until filled; the cache must say so without ``None in list``
    (which compares every trial: 10,000 ``FrozenTrial.__eq__`` per read)."""
    from autotune.bulk_read import OrderedTrialCache

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _fill(optuna.storages.RDBStorage(url))
    cache = OrderedTrialCache(optuna.storages.RDBStorage(url))
    sid = study._study_id
    trials = study.get_trials(deepcopy=False)
    cache._studies[sid] = optuna.storages._cached_storage._StudyInfo()  # as Optuna's first read of the study does
    cache._add_trials_to_cache(sid, [trials[-1]])
    assert cache._gaps[sid] == len(trials) - 1
    cache._add_trials_to_cache(sid, trials[:-1])
    assert cache._gaps[sid] == 0
    cache._add_trials_to_cache(sid, trials[:2])  # re-adding a filled number leaves no gap
    assert cache._gaps[sid] == 0
    assert [t.number for t in cache.get_all_trials(sid, deepcopy=False)] == [t.number for t in trials]


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"])
def test_bulk_read_gives_optunas_local_datetimes_in_any_time_zone(tmp_path, monkeypatch, zone):
    """Datetimes are stored as naive UTC and read as naive local time: the cached per-minute offset
    must give what Optuna's own conversion gives (half-hour zones, daylight saving time)."""
    import time

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        rdb = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
        study = _fill(rdb)
        ours = read_trials(rdb.engine, study._study_id, None, set(), -1)
        theirs = rdb._get_trials(study._study_id, None, set(), -1)
        assert [(t.datetime_start, t.datetime_complete) for t in ours] == [(t.datetime_start, t.datetime_complete) for t in theirs]
        assert any(t.datetime_start is not None for t in ours)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
