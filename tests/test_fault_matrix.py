"""The fault matrix's counting (benchmarks/fault_matrix.py): what is a budget trial, finished, lost, duplicated."""

import importlib.util
import sys

import pytest
from conftest import ROOT
from optuna.trial import TrialState, create_trial


@pytest.fixture(scope="module")
def count_budget():
    spec = importlib.util.spec_from_file_location("fault_matrix", ROOT / "benchmarks" / "fault_matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_matrix"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module.count_budget
    finally:
        sys.modules.pop("fault_matrix", None)


def _trials(*specs):
    """Frozen trials numbered in order, from ``(state, user_attrs, system_attrs)``."""
    out = []
    for number, (state, user, system) in enumerate(specs):
        t = create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None, user_attrs=user, system_attrs=system)
        t.number = number
        out.append(t)
    return out


DONE = (TrialState.COMPLETE, {}, {})


def test_confirmation_runs_are_not_budget_trials(count_budget):
    confirm = (TrialState.COMPLETE, {"confirm_of": 0, "confirm_samples": 2048}, {})
    counted = count_budget(_trials(DONE, DONE, DONE, DONE, confirm, confirm, confirm), 4)
    assert (counted["finished"], counted["lost"], counted["confirmation"]) == (4, 0, 3)


def test_a_stale_trial_and_its_retry_count_once_by_the_retry(count_budget):
    stale = (TrialState.FAIL, {}, {})
    retry = (TrialState.COMPLETE, {}, {"failed_trial": 1, "retry_history": [1]})
    counted = count_budget(_trials(DONE, stale, DONE, DONE, retry), 4)
    assert (counted["finished"], counted["lost"], counted["retried"], counted["duplicated"]) == (4, 0, 1, 0)
    assert counted["fail_kinds"] == []


def test_a_retry_never_run_is_lost(count_budget):
    waiting = (TrialState.WAITING, {}, {"failed_trial": 1, "retry_history": [1]})
    counted = count_budget(_trials(DONE, (TrialState.FAIL, {}, {}), DONE, DONE, waiting), 4)
    assert (counted["finished"], counted["lost"], counted["unfinished"]) == (3, 1, 1)


def test_an_interrupted_trial_is_not_finished_until_run_again(count_budget):
    cut = (TrialState.FAIL, {"fail_kind": "interrupted"}, {})
    counted = count_budget(_trials(DONE, DONE, cut, DONE), 4)
    assert (counted["finished"], counted["lost"], counted["interrupted"]) == (3, 1, 1)
    rerun = count_budget(_trials(DONE, DONE, cut, DONE, DONE), 4)
    assert (rerun["finished"], rerun["lost"]) == (4, 0)


def test_a_trial_with_two_results_is_duplicated_and_own_failures_are_finished(count_budget):
    oom = (TrialState.FAIL, {"fail_kind": "oom"}, {})
    twice = (TrialState.COMPLETE, {}, {"failed_trial": 0, "retry_history": [0]})
    counted = count_budget(_trials(DONE, oom, twice), 2)
    assert (counted["finished"], counted["lost"], counted["duplicated"]) == (2, 0, 1)
    assert counted["fail_kinds"] == ["oom"]


def test_more_trials_than_the_budget_show_as_negative_lost(count_budget):
    assert count_budget(_trials(DONE, DONE, DONE), 2)["lost"] == -1
