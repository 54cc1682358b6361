"""The loss-tolerance constraint as optuna-dashboard reads it, and the dashboard's best trials (issue 14.10)."""

import optuna
from conftest import dashboard_api

from autotune.optuna_compat import dashboard_honours_constraints, set_constraint


def _study(storage, name, directions, trials):
    """A study of complete trials ``(values, constraint)`` stored as autotune stores them."""
    study = optuna.create_study(study_name=name, storage=storage, directions=directions)
    for values, constraint in trials:
        trial = study.ask({"batch_size": optuna.distributions.CategoricalDistribution([16, 32, 64])})
        set_constraint(study, trial, constraint)
        study.tell(trial, values)
    return study


def test_the_constraint_is_one_list_that_optuna_and_the_dashboard_read(tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    study = _study(storage, "s", ["maximize"], [([100.0], 0.0), ([300.0], 0.2), ([200.0], -0.01)])
    trials = study.get_trials()
    assert [t.system_attrs["constraints"] for t in trials] == [[0.0], [0.2], [-0.01]]  # optuna-dashboard's key
    assert [t.constraints for t in trials] == [{"0": 0.0}, {"0": 0.2}, {"0": -0.01}]  # one constraint for the samplers
    assert study.best_trial.number == 2  # Optuna's best: the fastest feasible trial, not the faster infeasible 1


def test_the_dashboard_best_trial_is_feasible_single_and_multi_objective(tmp_path, restore_dashboard):
    from optuna_dashboard._app import create_app

    url = f"sqlite:///{tmp_path / 'd.db'}"
    storage = optuna.storages.RDBStorage(url)
    _study(storage, "one", ["maximize"], [([100.0], 0.0), ([300.0], 0.2), ([200.0], -0.01)])
    _study(storage, "two", ["maximize", "minimize"], [([100.0, 0.4], 0.0), ([300.0, 0.5], 0.2), ([200.0, 0.9], -0.01)])
    served = optuna.storages.RDBStorage(url)
    # without the fix the dashboard names the faster infeasible trial best
    app = create_app(served)
    ids = {s["study_name"]: s["study_id"] for s in dashboard_api(app, "/api/studies")["study_summaries"]}
    assert [t["number"] for t in dashboard_api(app, f"/api/studies/{ids['one']}")["best_trials"]] == [1]
    assert sorted(t["number"] for t in dashboard_api(app, f"/api/studies/{ids['two']}")["best_trials"]) == [0, 1]
    chosen = {"one": None}
    dashboard_honours_constraints(
        served, lambda name: None if chosen[name] is None else optuna.load_study(study_name=name, storage=storage).trials[chosen[name]]
    )
    app = create_app(served)
    detail = dashboard_api(app, f"/api/studies/{ids['one']}")
    assert [t["constraints"] for t in detail["trials"]] == [[0.0], [0.2], [-0.01]]  # what it draws infeasible trials from
    assert [t["number"] for t in detail["best_trials"]] == [2]  # the best feasible trial
    chosen["one"] = 0  # autotune's recommendation, when it gives one, is the dashboard's best trial
    assert [t["number"] for t in dashboard_api(app, f"/api/studies/{ids['one']}")["best_trials"]] == [0]
    front = dashboard_api(app, f"/api/studies/{ids['two']}")["best_trials"]
    assert sorted(t["number"] for t in front) == [0, 2]  # the infeasible 1, which dominates 2, is left out
