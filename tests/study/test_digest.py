"""Digests of a study's trials (autotune.study.digest): the queries over every trial read them and
give what they give over full trials; the trials a command prints are read in full."""

import pytest

from autotune.storage import open_storage
from autotune.study import confirmation, confirmed_speed, oom_frontier, recommendation
from autotune.study.digest import DIGEST_KEYS, UnreadAttribute, digest_trials, full_trials, is_digest
from autotune.study.settings import load_study, settings_of
from autotune.summary import input_bound_line

from .helpers import add, make_study, race


def _stored_study(tmp_path):
    """A SQLite study with a baseline, search trials (one infeasible, one OOM, one with a loss curve and
    ~50 figures of its own), and paired confirmation runs: opened as autotune opens it."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = make_study(open_storage(url))
    add(study, 100.0, 1.0, baseline=True, attrs={"loss_curve": [[0, 2.0], [64, 1.0]], "data_wait_fraction": 0.4})
    add(study, 180.0, 1.0, batch_size=32, num_workers=1, attrs={"loss_curve": [[0, 2.1]], "ranks": [{"samples": 5}]})
    add(study, 400.0, 3.0, batch_size=64)  # infeasible
    add(study, None, None, state="FAIL", batch_size=512, attrs={"fail_kind": "oom", "fail_reason": "CUDA out of memory"})
    add(study, 150.0, 1.0, batch_size=32, num_workers=2)
    race(study, 1, [99.0, 101.0, 100.0], [170.0, 175.0, 172.0])
    return load_study(None, url)


def test_the_queries_give_over_digests_what_they_give_over_full_trials(tmp_path):
    study, settings = _stored_study(tmp_path)
    every = study.get_trials(deepcopy=False)
    digests = digest_trials(study)
    assert len(digests) == len(every) == 11 and all(is_digest(t) for t in digests) and not any(is_digest(t) for t in every)
    assert [t.number for t in digests] == [t.number for t in every]
    for digest, full in zip(digests, every):
        assert digest.user_attrs == {k: v for k, v in full.user_attrs.items() if k in DIGEST_KEYS}
        assert digest.params == full.params and digest.state == full.state and digest.values == full.values
    rec, base = recommendation(study, settings, digests)
    assert (rec.number, base.number) == tuple(t.number for t in recommendation(study, settings))
    assert confirmation(study, settings, digests) == confirmation(study, settings) is not None
    assert confirmed_speed(study, settings, digests) == confirmed_speed(study, settings)
    assert oom_frontier(study, digests) == oom_frontier(study) != []
    full_rec = full_trials(study, [rec])[0]
    assert input_bound_line(full_rec, settings, digests) == input_bound_line(full_rec, settings, every)


def test_a_digest_refuses_an_attribute_it_did_not_read_and_full_trials_read_them_all(tmp_path):
    study, _ = _stored_study(tmp_path)
    digests = digest_trials(study)
    assert digests[1].user_attrs.get("confirm_of") is None and "trial_samples" not in digests[1].user_attrs
    with pytest.raises(UnreadAttribute, match="'loss_curve' is not in a trial digest"):
        digests[1].user_attrs.get("loss_curve")
    with pytest.raises(UnreadAttribute, match="'constraints'"):
        digests[1].system_attrs["constraints"]
    chosen = [digests[4], digests[1], digests[0]]
    full = full_trials(study, chosen)
    every = study.get_trials(deepcopy=False)
    assert full == [every[4], every[1], every[0]]
    assert full[1].user_attrs["ranks"] == [{"samples": 5}] and not any(is_digest(t) for t in full)
    # a trial added after the digest was read is not mistaken for one asked for
    add(study, 120.0, 1.0, batch_size=16, num_workers=3)
    assert [t.number for t in full_trials(study, chosen)] == [4, 1, 0]


def test_an_in_memory_study_gives_its_full_trials():
    study = make_study()
    add(study, 100.0, 1.0, baseline=True)
    digests = digest_trials(study)
    assert not is_digest(digests[0]) and digests == study.get_trials(deepcopy=False) == full_trials(study, digests)
    assert settings_of(study) is not None
