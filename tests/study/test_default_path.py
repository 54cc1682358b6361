"""One search down the default path: staged search, the median pruner, and confirmation before recommending.

tests/conftest.py turns all three off for the rest of the suite (AUTOTUNE_SEARCH=flat, AUTOTUNE_PRUNER=none,
AUTOTUNE_CONFIRM=0); this test sets them back to what a user gets.
"""

import pytest
from conftest import MODELS, load

from autotune.study import load_study, recommendation

#: A user's environment: $AUTOTUNE_CONFIRM empty reads as unset (--confirm's default, 3 configs).
DEFAULTS = {"AUTOTUNE_CONFIRM": "", "AUTOTUNE_PRUNER": "median", "AUTOTUNE_SEARCH": "staged"}
#: Every step of batch 16 sleeps 50 ms more, so that the batch-32 configs are surely the fastest.
SLOW_16 = {"TINY_SLOW_BATCH": "16"}


@pytest.mark.slow
def test_the_default_search_screens_short_trains_the_fastest_in_full_and_confirms_before_recommending(tmp_path, cli):
    db = tmp_path / "s.db"
    space = tmp_path / "space.yaml"
    # four system points (the baseline's is one), so stage 1 screens the other three; at 2048 samples a
    # stage-1 run of batch 16 or 32 (32 steps: 512 or 1024 samples) is shorter than the budget
    # (num_workers, not precision: a CPU without bfloat16 instructions has bf16 ruled out of the space)
    space.write_text("batch_size: {choices: [16, 32]}\nnum_workers: {choices: [0, 1]}\n"
                     "accumulate_grad_batches: {choices: [1, 2]}\nlr: {low: 0.5, high: 2.0, relative: true}\n")
    # --confirm-share 0.5: the slow baseline's 2 minimum pairs would pass 20% of so short a search (no race would start)
    r = cli("search", MODELS / "tiny.py", "--trials", 6, "--samples", 2048, "--confirm-samples", 512, "--confirm-share", 0.5,
            "--space", space, "--storage", f"sqlite:///{db}", env={**DEFAULTS, **SLOW_16}, check_rc=0)
    assert "staged search: 3 system-knob screening run(s)" in r.stdout
    study = load(db, "tiny")
    trials = study.trials
    base = trials[0]
    assert base.user_attrs["baseline"] and study.user_attrs["baseline"]["trial"] == 0
    short = [t for t in trials if t.user_attrs.get("stage") == "system"]
    full = [t for t in trials if t.user_attrs.get("stage") == "full"]
    runs = [t for t in trials if "confirm_of" in t.user_attrs]
    assert len(short) == 3 and 1 <= len(full) <= 2 and len(trials) - len(runs) == 6
    rule = base.params["lr"] * 2  # batch 32 is twice the baseline's effective batch: linear rule (tiny.py trains with SGD)
    for t in short:  # math-preserving first (the baseline's lr), then batch 32 at the lr rule's; a short budget, not judged
        preserving = t.user_attrs["math"] == "preserving"
        assert t.params["batch_size"] == (16 if preserving else 32) and t.params["accumulate_grad_batches"] == 1
        assert t.params["lr"] == (base.params["lr"] if preserving else pytest.approx(rule))
        assert t.user_attrs["trial_samples"] == 32 * t.params["batch_size"] < 2048 and t.user_attrs["feasible"] is None
    assert [t.user_attrs["math"] for t in short] == ["preserving", "changing", "changing"]
    assert max(t.number for t in short) < min(t.number for t in full) < min((t.number for t in runs), default=len(trials))
    # stage 2: the one-worker batch-16 config keeps the math, and has a round of its own when its short run was faster than
    # the baseline and passed the loss sanity check; then the batch-32 configs at full budget and the rule's lr, judged
    # (or not run, when a config of their class failed the loss with more optimizer steps)
    same = [t for t in full if t.user_attrs["math"] == "preserving"]
    changed = [t for t in full if t.user_attrs["math"] == "changing"]
    assert len(same) <= 1 and changed and full[: len(same)] == same
    assert all(t.params["batch_size"] == 16 and t.params["lr"] == base.params["lr"] for t in same)
    if not same:  # the two batch-32 configs ask one question (batch, lr): the faster screen runs it first
        fastest = max((t for t in short if t.user_attrs["math"] == "changing"), key=lambda t: t.user_attrs["samples_per_sec"])
        assert full[0].params["num_workers"] == fastest.params["num_workers"]
    for t in changed:
        assert t.params["batch_size"] == 32 and t.params["lr"] == pytest.approx(rule) and t.params["accumulate_grad_batches"] == 1
    for t in full:
        assert "trial_samples" not in t.user_attrs
        assert t.user_attrs.get("feasible") is not None or t.user_attrs.get("fail_kind") == "failed_class"
    assert all(t.state.name == "COMPLETE" or t.user_attrs.get("fail_kind") == "failed_class" for t in trials)
    # confirmation (on by default): feasible full-budget configs raced against the baseline in pairs at 512 samples
    if not any(t.user_attrs.get("feasible") for t in full):  # none to race (the tiny model's loss is near 0: a step of noise breaks it)
        assert not runs and "no feasible config measured faster than the baseline, or sooner at its loss, to race; the baseline is recommended" in r.stdout
        return
    assert runs and all("pair_of" in t.user_attrs for t in runs)
    # at 512 samples, a quarter of the study's: not judged against the baseline's full-budget loss (the race judges it)
    assert all(t.user_attrs["feasible"] is None and t.user_attrs["constraint"] is None for t in runs)
    raced = {t.user_attrs["pair_of"] for t in runs}
    assert all(trials[n].user_attrs["feasible"] and "trial_samples" not in trials[n].user_attrs for n in raced)
    assert all(t.user_attrs["confirm_samples"] == 512 and t.params == trials[t.user_attrs["confirm_of"]].params for t in runs)
    assert min(runs, key=lambda t: t.number).user_attrs["incumbent"] == 0  # the first race is against the baseline
    assert all(sum(u.user_attrs["pair_index"] == t.user_attrs["pair_index"] and u.user_attrs["pair_of"] == t.user_attrs["pair_of"]
                   for u in runs) == 2 for t in runs)  # every pair has its two runs
    _, settings = load_study("tiny", f"sqlite:///{db}")
    recommended, baseline = recommendation(study, settings)
    assert recommended is not None and "confirm_of" in recommended.user_attrs  # a paired run (the winner's, or the baseline's), not a single search trial
    assert "trial_samples" not in recommended.user_attrs and recommended.user_attrs.get("stage") != "system"
    assert baseline.user_attrs["confirm_of"] == 0
    export = (tmp_path / "tiny.best.yaml").read_text()
    assert f"trial {recommended.number} of {len(trials)}" in export and "# confirmed: " in export and "# race: trial " in export
