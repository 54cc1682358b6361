"""Values derived from a finished trial are derived once per trial object."""

import optuna

from autotune.storage import open_storage
from autotune.study.memo import per_finished_trial


def test_a_finished_trial_is_derived_once_and_a_running_one_every_time(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    running = study.ask()
    calls = []

    @per_finished_trial
    def derive(trial):
        calls.append(trial.number)
        return trial.number * 10

    for _ in range(3):
        # Optuna's trial cache hands back the same objects for finished trials on every read
        values = [derive(t) for t in optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)]
        assert values == [0, 10, 20, 30]
    assert sorted(calls) == [0, 1, 2, 3, 3, 3]  # finished: once each; running: every pass
    study.tell(running, 0.5)
    [derive(t) for t in study.get_trials(deepcopy=False)]
    assert calls.count(3) == 4  # the trial finished: derived once more, as a new object, then kept
    [derive(t) for t in study.get_trials(deepcopy=False)]
    assert calls.count(3) == 4


def test_a_copy_of_a_trial_is_derived_again():
    """Identity, not equality: a deep copy (another object) is derived afresh, never confused."""
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    seen = []
    derive = per_finished_trial(lambda t: seen.append(t) or len(seen))
    first = study.trials[0]
    assert derive(first) == 1 and derive(first) == 1
    assert derive(study.trials[0]) == 2  # study.trials deep-copies: a new object
