"""--search staged: short system-knob runs, then full-budget lr/accumulation runs of the fastest."""

import optuna
import pytest
from conftest import MODELS
from optuna.distributions import CategoricalDistribution
from test_report import plotly_figures

from autotune.config import TrialConfig
from autotune.errors import UsageError
from autotune.html_report import KINDS
from autotune.study import (
    SearchOptions,
    check_search_options,
    load_study,
    staged_plan,
    system_budget,
    top_system_configs,
)
from autotune.study.staged import SHORT_RUN_CONSTRAINT, same_math_phrase


def test_the_plan_runs_the_baseline_and_enqueued_configs_first_and_splits_the_rest():
    assert staged_plan(20, baseline_needed=True, seeds=0, system_knobs=True) == (11, 8)  # 19 left: 60% short
    assert staged_plan(10, baseline_needed=False, seeds=2, system_knobs=True) == (5, 3)
    assert staged_plan(10, baseline_needed=True, seeds=0, system_knobs=False) == (0, 9)  # nothing for stage 1 to search
    assert staged_plan(1, baseline_needed=True, seeds=0, system_knobs=True) == (0, 0)


def test_a_short_run_trains_a_quarter_of_the_budget_but_at_least_32_steps():
    assert system_budget(TrialConfig(batch_size=16), 8192) == 2048
    assert system_budget(TrialConfig(batch_size=128), 8192) == 4096  # 32 steps of 128
    assert system_budget(TrialConfig(batch_size=64, accumulate_grad_batches=8), 8192) == 8192  # never above the budget


def _trial(params, sps, state=optuna.trial.TrialState.COMPLETE, **attrs):
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    return optuna.trial.create_trial(params=params, distributions=dists, state=state, values=[sps] if state.name == "COMPLETE" else None,
                                     user_attrs={"samples_per_sec": sps, **attrs})


def test_top_system_configs_ignore_lr_accumulation_failures_and_confirmation_runs():
    trials = [
        _trial({"batch_size": 16, "precision": "32-true", "lr": 1e-3}, 100.0),
        _trial({"batch_size": 16, "precision": "32-true", "lr": 2e-3}, 120.0),  # the same system config, faster
        _trial({"batch_size": 64, "precision": "32-true", "accumulate_grad_batches": 2}, 300.0),
        _trial({"batch_size": 32, "precision": "bf16-mixed"}, 500.0, state=optuna.trial.TrialState.FAIL),
        _trial({"batch_size": 128, "precision": "32-true"}, 900.0, confirm_of=2),
        _trial({"batch_size": 32, "precision": "32-true"}, 200.0),
    ]
    assert top_system_configs(trials, 2) == [{"batch_size": 64, "precision": "32-true"}, {"batch_size": 32, "precision": "32-true"}]
    assert top_system_configs(trials, 5)[-1] == {"batch_size": 16, "precision": "32-true"}
    assert len(top_system_configs(trials, 5)) == 3


def test_bad_search_values_are_one_line_errors(monkeypatch):
    with pytest.raises(UsageError, match=r"unknown --search 'greedy'; choose one of \['staged', 'flat'\]"):
        check_search_options(SearchOptions(model_file="m.py", search="greedy"))
    with pytest.raises(UsageError, match="--search staged with --sampler grid"):
        check_search_options(SearchOptions(model_file="m.py", search="staged", sampler="grid"))
    with pytest.raises(UsageError, match=r"--search staged ranks stage 1 by samples/s.*use --search flat"):
        check_search_options(SearchOptions(model_file="m.py", search="staged", objective="time-to-quality"))
    monkeypatch.setenv("AUTOTUNE_SEARCH", "fast")
    with pytest.raises(UsageError, match=r"\$AUTOTUNE_SEARCH='fast' must be one of"):
        check_search_options(SearchOptions(model_file="m.py"))


def test_staged_search_screens_system_knobs_short_then_trains_the_fastest_at_full_budget(tmp_path, cli):
    db = tmp_path / "s.db"
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64, 128]}\nnum_workers: {choices: [0, 1]}\n"
                     "accumulate_grad_batches: {choices: [1, 2]}\nlr: {low: 0.5, high: 2.0, relative: true}\n")
    r = cli("search", MODELS / "tiny.py", "--search", "staged", "--trials", 9, "--samples", 2048, "--space", space,
            "--storage", f"sqlite:///{db}", check_rc=0)
    assert "staged search: 5 system-knob screening run(s)" in r.stdout
    assert "then the fastest system configs with the lr following the effective batch (" in r.stdout
    study, settings = load_study("tiny", f"sqlite:///{db}")
    trials = study.trials
    base = trials[0]
    assert base.user_attrs["baseline"] and "stage" not in base.user_attrs
    # (a stage-1 config sampled twice is a duplicate, not run, and replaced within stage 1)
    short = [t for t in trials if t.user_attrs.get("stage") == "system" and "duplicate_of" not in t.user_attrs]
    stage2 = [t for t in trials if t.user_attrs.get("stage") == "full"]
    full = [t for t in stage2 if "duplicate_of" not in t.user_attrs]
    # (a stage-2 config the sampler proposes again is a duplicate: it counts, and is not run)
    listing = [(t.number, t.user_attrs.get("stage"), t.user_attrs.get("duplicate_of"), t.state.name, t.params) for t in trials]
    # stage 2 proposes at most 3; it proposes fewer when the classes of the fastest configs failed the loss with
    # more optimizer steps (the tiny model's near-zero loss fails most), and then the rest sample every knob
    last_screen = max(t.number for t in trials if t.user_attrs.get("stage") == "system")
    after = [t for t in trials if t.number > last_screen]
    assert len(short) == 5 and 1 <= len(after) <= 3 and len(stage2) <= 3, listing
    assert full or "no system config left that could beat the best feasible trial" in r.stdout, (listing, r.stdout[-3000:])
    assert all(t.number > last_screen for t in stage2)
    for t in short:  # accumulation at the baseline's, lr by the linear rule (tiny.py trains with SGD); a shorter budget, not judged
        rule = base.params["lr"] * (t.params["batch_size"] / 16)
        assert t.params["lr"] == pytest.approx(min(rule, base.params["lr"] * 2))  # (on the space's range: 0.5x..2x)
        assert t.params["accumulate_grad_batches"] == 1 and t.state.name == "COMPLETE"
        budget = min(2048, max(512, 32 * t.params["batch_size"]))
        if budget < 2048:  # told a constraint it fails: Optuna's and optuna-dashboard's best values skip it
            assert t.user_attrs["trial_samples"] == budget and t.user_attrs["feasible"] is None
            assert t.system_attrs["constraints"] == [SHORT_RUN_CONSTRAINT]
        else:  # 32 steps of batch 128 are the whole budget: a full run, judged like any other
            assert "trial_samples" not in t.user_attrs and t.user_attrs["feasible"] is not None
    # batch 16 is the baseline's effective batch: its configs keep the math and get a round of their own;
    # the others change it, and go down the speed ranking
    # (down the speed ranking: a config whose class failed with more optimizer steps is passed over)
    fastest = [s for s in top_system_configs(trials[: min((t.number for t in full), default=len(trials))]) if s["batch_size"] != 16]
    systems = [{k: t.params[k] for k in ("batch_size", "num_workers")} for t in full if t.user_attrs["math"] == "changing"]
    # on a loaded machine the baseline may measure faster than every screened config, and the rest sample every knob
    lines = r.stdout.splitlines()
    listed = sum(len(line.split(";")) for line in lines if line.startswith("staged search, stage 2 (math-changing): "))
    preserving = [line for line in lines if line.startswith("staged search, stage 2 (math-preserving")]
    assert listed or preserving or "no system config left that could beat the best feasible trial" in r.stdout
    assert all(s in fastest for s in systems[:listed])
    for t in full:  # judged at full budget, or not run because a config of its class failed with more optimizer steps
        assert "trial_samples" not in t.user_attrs
        assert t.user_attrs.get("feasible") is not None or t.user_attrs.get("fail_kind") == "failed_class", t.user_attrs
    from autotune.study import recommendation

    recommended, _ = recommendation(study, settings)
    assert recommended is not None and recommended.user_attrs.get("stage") != "system"
    shown = cli("show", db, check_rc=0).stdout
    assert all(f"short ({t.user_attrs['trial_samples']} samples)" in shown for t in short if "trial_samples" in t.user_attrs)
    # the report draws the short runs (duplicates included) with their own mark, and leaves them out of the importances
    cli("report", db, "--out", tmp_path / "r.html", check_rc=0)
    figures = plotly_figures((tmp_path / "r.html").read_text())
    screened = sorted(t.number for t in trials if t.state.name == "COMPLETE" and "trial_samples" in t.user_attrs)
    assert sorted(x for t in figures["history"] if t["name"] == KINDS["short"] for x in t["x"]) == screened
    assert sum(len(t["x"]) for t in figures["batch_throughput"] if t["name"] == KINDS["short"]) == len(screened)
    # a resumed flat run samples every knob at full budget
    cli("search", MODELS / "tiny.py", "--search", "flat", "--trials", 1, "--samples", 2048, "--space", space,
        "--storage", f"sqlite:///{db}", check_rc=0)
    assert "stage" not in load_study("tiny", f"sqlite:///{db}")[0].trials[-1].user_attrs


def test_staged_with_a_time_to_quality_study_is_refused_before_any_trial(tmp_path, cli):
    db = tmp_path / "t.db"
    r = cli("search", MODELS / "tiny.py", "--search", "staged", "--objective", "time-to-quality", "--trials", 2,
            "--storage", f"sqlite:///{db}", check_rc=2)
    assert "use --search flat" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_default_search_is_staged_for_rate_objectives_only(monkeypatch):
    from autotune.study import default_search

    monkeypatch.delenv("AUTOTUNE_SEARCH", raising=False)
    assert [default_search(o) for o in ("throughput", "goodput", "time-to-quality", "pareto")] == ["staged", "staged", "flat", "flat"]
    monkeypatch.setenv("AUTOTUNE_SEARCH", "staged")
    assert default_search("pareto") == "flat"  # the variable never forces stage 1 on a full-budget objective
    monkeypatch.setenv("AUTOTUNE_SEARCH", "flat")
    assert default_search("throughput") == "flat"


def test_a_config_measured_before_is_not_trained_again_and_counts_against_trials(tmp_path, cli):
    db = tmp_path / "d.db"
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: [16, 32, 64, 128]\n")  # four configs; the random sampler (seed 0) repeats one of them
    cli("search", MODELS / "tiny.py", "--trials", 4, "--samples", 256, "--space", space, "--sampler", "random", "--seed", 0,
            "--storage", f"sqlite:///{db}", check_rc=0)
    study, settings = load_study("tiny", f"sqlite:///{db}")
    trained = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    copies = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert len({t.params["batch_size"] for t in trained}) == len(trained)  # each config trained once
    assert copies and len(study.trials) == 4  # a duplicate is one of the --trials asked: no replacement is added
    for t in copies:
        original = study.trials[t.user_attrs["duplicate_of"]]
        assert t.params == original.params and t.values == original.values and t.state.name == "COMPLETE"
        assert "training_seconds" not in t.user_attrs and t.user_attrs["samples_per_sec"] == original.user_attrs["samples_per_sec"]
    from autotune.study import recommendation

    recommended, _ = recommendation(study, settings)
    assert "duplicate_of" not in recommended.user_attrs
    assert "duplicate of #" in cli("show", db, check_rc=0).stdout


@pytest.mark.parametrize("search", ["staged", "flat"])
def test_a_space_with_fewer_configs_than_trials_adds_only_those_and_says_so(tmp_path, cli, search):
    """Issue 16.4: a precision list of only 16-mixed, removed on a CPU, leaves one config (the baseline's)."""
    db = tmp_path / "one.db"
    space = tmp_path / "space.yaml"
    space.write_text('precision: {choices: ["16-mixed"]}\n')
    args = ["search", MODELS / "tiny.py", "--search", search, "--samples", 256, "--space", space, "--storage", f"sqlite:///{db}"]
    r = cli(*args, "--trials", 3, check_rc=0)
    assert "removed precision '16-mixed'" in r.stderr + r.stdout
    assert r.stdout.count("the space has 1 distinct config(s), 0 of them run already: this run adds 1 of the 3 trial(s) asked") == 1
    assert len(load_study("tiny", f"sqlite:///{db}")[0].trials) == 1
    r = cli(*args, "--trials", 2, check_rc=0)  # resumed: nothing left to run, and nothing added
    assert "the space has 1 distinct config(s), 1 of them run already: this run adds 0 of the 2 trial(s) asked" in r.stdout
    assert len(load_study("tiny", f"sqlite:///{db}")[0].trials) == 1


def test_stage_1_screens_each_unvisited_system_point_once_in_a_seeded_order():
    from autotune.study import screen_points

    resolved = {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 1, "log": False},
                "lr": {"low": 0.1, "high": 1.0, "log": True}}
    visited = [_trial({"batch_size": 32, "num_workers": 0, "lr": 0.5}, 10.0)]
    points = screen_points(visited, resolved, {"lr"}, seed=1, visited_params=[{"batch_size": 16, "num_workers": 0, "lr": 0.1}])
    assert sorted((p["batch_size"], p["num_workers"]) for p in points) == [(16, 1), (32, 1), (64, 0), (64, 1)]
    assert points == screen_points(visited, resolved, {"lr"}, seed=1, visited_params=[{"batch_size": 16, "num_workers": 0, "lr": 0.1}])
    assert screen_points([], {**resolved, "prefetch_factor": {"low": 1, "high": 4, "log": False}}, {"lr"}, 0) is not None
    # a queued trial (--enqueue, not run yet) counts as visited: a new user's enqueued config was screened again after it ran
    from types import SimpleNamespace

    queued = SimpleNamespace(params={}, state=SimpleNamespace(name="WAITING"), system_attrs={"fixed_params": {"batch_size": 64, "num_workers": 1, "lr": 0.2}})
    points = screen_points([*visited, queued], resolved, {"lr"}, seed=1, visited_params=[{"batch_size": 16, "num_workers": 0, "lr": 0.1}])
    assert sorted((p["batch_size"], p["num_workers"]) for p in points) == [(16, 1), (32, 1), (64, 0)]
    assert screen_points([], {"batch_size": {"low": 1, "high": 4, "log": False}, "lr": resolved["lr"]}, set(), 0) is None  # lr is continuous


def test_stage_2_goes_down_the_speed_ranking_and_skips_configs_that_cannot_win():
    from autotune.study import stage2_round

    fixed = {"lr": 0.1, "accumulate_grad_batches": 1}
    short = dict(trial_samples=512, feasible=None)
    trials = [
        _trial({"batch_size": 16, **fixed}, 100.0, feasible=True),  # the baseline: 100 samples/s, feasible
        _trial({"batch_size": 256, **fixed}, 900.0, **short),
        _trial({"batch_size": 128, **fixed}, 800.0, **short),
        _trial({"batch_size": 64, **fixed}, 400.0, **short),
        _trial({"batch_size": 32, **fixed}, 90.0, **short),  # no faster than the feasible baseline: cannot win
    ]
    first = stage2_round(trials, fixed, k=3)
    assert [p for p, _ in first] == [{"batch_size": 256, **fixed}, {"batch_size": 128, **fixed}, {"batch_size": 64, **fixed}]
    trials += [_trial({"batch_size": 256, **fixed}, 900.0, feasible=False), _trial({"batch_size": 128, **fixed}, 800.0, feasible=True)]
    second = stage2_round(trials, fixed, k=3)
    # 256: tried at the baseline's lr, infeasible: the sampler picks lr next; 128 is solved and beats 64, which cannot win now
    assert [p for p, _ in second] == [{"batch_size": 256}]
    trials += [_trial({"batch_size": 256, "lr": 1.0, "accumulate_grad_batches": 2}, 950.0, feasible=False) for _ in range(2)]
    assert stage2_round(trials, fixed, k=3) == []  # 256 failed 3 times; nothing else can beat 800 samples/s


# --- math-preserving knobs first (issue 15.3) ---

def _context(rule="sqrt", acc=None, lr=None):
    from autotune.study.screen import MathContext

    resolved = {"batch_size": {"choices": [16, 32, 64, 128]}, "num_workers": {"choices": [0, 1]},
                "accumulate_grad_batches": acc or {"low": 1, "high": 8, "log": False},
                "lr": lr or {"low": 0.001, "high": 1.0, "log": True}}
    return MathContext(TrialConfig(batch_size=32, lr=0.01), resolved, rule), resolved


def test_stage_1_screens_math_preserving_configs_first_at_the_baselines_effective_batch_and_lr():
    from autotune.study import screen_points
    from autotune.study.screen import screen_order

    context, resolved = _context()
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    points = screen_points([], resolved, {"lr", "accumulate_grad_batches"}, seed=0,
                           visited_params=[{"batch_size": 32, "num_workers": 0, **fixed}])
    order = screen_order(points, 7, fixed, context)
    configs = [context.config_of(p) for p in order]
    # batch 16 x accumulation 2 and batch 32 keep the baseline's 32 samples per step: 3 configs (the baseline's is run)
    preserving = [c for c in configs if c.effective_batch_size == 32]
    assert len(preserving) == 3 and configs[:3] == preserving
    assert all(c.lr == 0.01 for c in preserving)
    assert sorted((c.batch_size, c.accumulate_grad_batches, c.num_workers) for c in preserving) == [(16, 2, 0), (16, 2, 1), (32, 1, 1)]
    # then math-changing configs at the baseline's accumulation and the lr rule's lr (sqrt: 2x for batch 128)
    assert all(c.accumulate_grad_batches == 1 and c.batch_size > 32 for c in configs[3:])
    assert all(c.lr == pytest.approx(0.01 * (c.batch_size / 32) ** 0.5) for c in configs[3:])
    # at most two thirds of the plan while math-changing configs are left to screen
    assert [context.config_of(p).effective_batch_size > 32 for p in screen_order(points, 3, fixed, context)] == [False, False, True]
    # a split outside the space's accumulation is no split: batch 16 needs 2, the space allows only 1
    narrow, _ = _context(acc={"choices": [1]})
    assert [narrow.config_of(p).batch_size for p in screen_order(points, 7, {**fixed}, narrow)][:1] == [32]


def test_math_changing_screens_climb_the_batch_ladder_one_rung_each_at_the_baselines_other_knobs_first():
    # a random order spent a tabular MLP's three math-changing screens on batch 512 twice and batch 128
    # with 2 workers (batch 256 never ran); the ladder covers each effective batch once, nearest first
    from autotune.study import screen_points
    from autotune.study.screen import MathContext, batch_ladder, screen_order

    resolved = {"batch_size": {"choices": [16, 32, 64, 128, 256, 512]}, "num_workers": {"choices": [0, 1, 2]},
                "accumulate_grad_batches": {"low": 1, "high": 8, "log": False}, "lr": {"low": 1e-4, "high": 1e-2, "log": True}}
    context = MathContext(TrialConfig(batch_size=64, lr=0.001), resolved, "sqrt")
    fixed = {"accumulate_grad_batches": 1, "lr": 0.001}
    for seed in range(5):
        points = screen_points([], resolved, {"lr", "accumulate_grad_batches"}, seed=seed,
                               visited_params=[{"batch_size": 64, "num_workers": 0, **fixed}])
        order = screen_order(points, 11, fixed, context)
        changing = [context.config_of(p) for p in order if context.config_of(p).effective_batch_size != 64]
        assert [(c.batch_size, c.num_workers) for c in changing] == [(128, 0), (256, 0), (512, 0)]
        assert [c.lr for c in changing] == pytest.approx([0.001 * (b / 64) ** 0.5 for b in (128, 256, 512)])
        # all of them: every rung once at the baseline's workers, then each rung again with other workers
        ladder = [context.config_of(p) for p in batch_ladder([context.first_point(p, fixed) for p in points
                                                               if context.split(p, fixed) is None], context)]
        assert len(ladder) == 9 and [c.batch_size for c in ladder] == [128, 256, 512] * 3
        assert {c.num_workers for c in ladder[:3]} == {0} and {c.num_workers for c in ladder[3:]} == {1, 2}
    assert batch_ladder([], context) == []


def test_the_lr_of_a_math_changing_config_follows_its_effective_batch_by_the_optimizers_family():
    from autotune.study.math_class import lr_rule, optimizer_family

    assert lr_rule("none", "torch.optim.SGD")[0] == "linear" and "Goyal" in lr_rule("none", "torch.optim.SGD")[1]
    assert lr_rule("none", "torch.optim.AdamW")[0] == "sqrt" and "Malladi" in lr_rule("none", "AdamW")[1]
    assert lr_rule("none", None)[0] == lr_rule("none", "MyOptimizer")[0] == "sqrt"  # unknown: square root, and said so
    assert "not known before training" in lr_rule("none", None)[1]
    assert "MyOptimizer's scaling family is not known" in lr_rule("none", "my.MyOptimizer")[1]
    assert lr_rule("linear", "torch.optim.AdamW")[0] == "linear"  # the space's lr_scaling wins
    assert optimizer_family("torch.optim.RMSprop") == "adam" and optimizer_family(None) is None
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    linear, _ = _context("linear")
    sqrt, _ = _context("sqrt")
    # batch 128 is 4x the baseline's 32: linear 4x the lr, square root 2x
    assert linear.first_point({"batch_size": 128, "num_workers": 0}, fixed)["lr"] == pytest.approx(0.04)
    assert sqrt.first_point({"batch_size": 128, "num_workers": 0}, fixed)["lr"] == pytest.approx(0.02)
    assert sqrt.first_point({"batch_size": 128}, {**fixed, "accumulate_grad_batches": 2})["lr"] == pytest.approx(0.01 * 8 ** 0.5)
    # on the space's grid: the nearest choice (in log), or clipped to the range
    grid, _ = _context("linear", lr={"choices": [0.01, 0.03, 0.1]})
    assert grid.first_point({"batch_size": 128}, fixed)["lr"] == 0.03
    clipped, _ = _context("linear", lr={"low": 0.001, "high": 0.02, "log": True})
    assert clipped.first_point({"batch_size": 128}, fixed)["lr"] == 0.02
    # under the space's lr_scaling the multiplier 1 is the rule's lr already
    scaled, _ = _context("sqrt", lr={"low": 0.5, "high": 2.0, "log": True, "scaling": "sqrt"})
    point = scaled.first_point({"batch_size": 128}, {"accumulate_grad_batches": 1, "lr_multiplier": 1.0})
    assert point["lr_multiplier"] == 1.0 and scaled.config_of(point).lr == pytest.approx(0.02)


#: A training-loss curve on a plateau (a failure with no curve reads as under-trained: math_class.curve_tells).
PLATEAU = [[x, 1.0] for x in range(0, 1024, 64)]


def _full(params, sps, number, feasible, context, **attrs):
    t = _trial(params, sps, feasible=feasible, config=context.config_of(params).to_dict(), **attrs)
    t.number = number
    return t


def test_a_pass_at_a_larger_lr_or_batch_refutes_a_plateau_and_no_longer_rules_out_larger_batches():
    from autotune.study.math_class import failed_class, failures_of, ruled_out_at_any_lr

    context, _ = _context("sqrt")
    base = context.baseline  # batch 32, lr 0.01
    flat = [[x, 1.0] for x in range(0, 1024, 64)]  # a plateau: not still improving
    plateau = _full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.01}, 200.0, 3, False, context, loss_curve=flat)
    alone = failures_of([plateau])
    assert [(f.number, f.improving, f.refuted_by) for f in alone] == [(3, False, None)]
    assert ruled_out_at_any_lr(base.replace(batch_size=128, lr=1.0), alone)  # a plateau alone: fewer steps fail at any lr
    # batch 64 passed at twice the lr: the plateau was not its lr's limit
    passed = _full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.02}, 200.0, 4, True, context)
    failures = failures_of([plateau, passed])
    assert [(f.number, f.refuted_by) for f in failures] == [(3, 4)]
    assert not ruled_out_at_any_lr(base.replace(batch_size=128, lr=1.0), failures)
    # what it still rules out: as many or fewer steps at the same or a smaller lr multiplier
    reason = failed_class(base.replace(batch_size=128, lr=0.01), failures, base, "sqrt")
    assert reason is not None and "trial 3" in reason and "trial 4's pass" in reason
    assert failed_class(base.replace(batch_size=128, lr=0.04), failures, base, "sqrt") is None  # a larger multiplier
    # a pass of another class, or at a smaller lr, refutes nothing; a pass at a larger batch does, whatever its lr
    other = _full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.005}, 200.0, 5, True, context)
    assert failures_of([plateau, other])[0].refuted_by is None
    bigger = _full({"batch_size": 128, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.001}, 200.0, 6, True, context)
    assert failures_of([plateau, bigger])[0].refuted_by == 6


def test_a_class_that_failed_the_loss_at_full_budget_is_not_rerun_with_fewer_optimizer_steps():
    from autotune.study.math_class import Failure, failed_class, ruled_out_at_any_lr
    from autotune.study.staged import stage2_round

    context, _ = _context("sqrt")
    base = context.baseline
    failed = [Failure(5, base.replace(batch_size=128, lr=0.02))]  # not improving at its end  # 4x the batch at the sqrt rule's lr: multiplier 1
    reason = failed_class(base.replace(batch_size=128, accumulate_grad_batches=4, lr=0.04), failed, base, "sqrt")
    assert reason is not None and "trial 5" in reason and "fewer optimizer steps" in reason
    assert failed_class(base.replace(batch_size=128, lr=0.02, num_workers=1), failed, base, "sqrt") is not None  # same steps
    assert failed_class(base.replace(batch_size=128, lr=0.01), failed, base, "sqrt") is None  # a smaller lr multiplier
    assert failed_class(base.replace(batch_size=64, lr=0.02 / 2 ** 0.5), failed, base, "sqrt") is None  # more steps
    assert failed_class(base.replace(batch_size=256, lr=0.04, precision="bf16-mixed"), failed, base, "sqrt") is None  # another class
    # whatever its lr: only a larger effective batch of the same class
    assert ruled_out_at_any_lr(base.replace(batch_size=256, lr=1e-9), failed)
    assert not ruled_out_at_any_lr(base.replace(batch_size=128, lr=1e-9), failed)  # the same steps: a smaller lr may converge
    assert not ruled_out_at_any_lr(base.replace(batch_size=256, precision="bf16-mixed"), failed)
    # stage 2: 256 would be the same class at multiplier 1 with fewer steps: the sampler picks its lr and accumulation
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    short = dict(trial_samples=512)
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),  # the baseline
        _full({"batch_size": 256, "num_workers": 0, **fixed}, 900.0, 1, None, context, **short),
        _full({"batch_size": 128, "num_workers": 0, **fixed}, 800.0, 2, None, context, **short),
        _full({"batch_size": 128, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.02}, 800.0, 3, False, context, loss_curve=PLATEAU),
    ]
    # 256 trains fewer steps than the failed 128 of its class at any lr: not proposed; 128 again with the sampler
    # choosing the lr at the baseline's accumulation (a larger one would be fewer steps)
    assert stage2_round(trials, fixed, k=3, context=context) == [
        ({"batch_size": 128, "num_workers": 0, "accumulate_grad_batches": 1}, {"stage": "full"})]


def test_without_lr_in_the_space_a_config_that_failed_at_full_budget_is_not_proposed_again():
    # a new user's search without lr: stage 2 proposed batch 128 a second time, a duplicate that took one of --trials
    from autotune.study.screen import MathContext
    from autotune.study.staged import stage2_round

    _, resolved = _context("sqrt")
    resolved = {k: v for k, v in resolved.items() if k != "lr"}
    context = MathContext(TrialConfig(batch_size=32, lr=0.01), resolved, "sqrt")
    fixed = {"accumulate_grad_batches": 1}
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),  # the baseline
        _full({"batch_size": 128, "num_workers": 0, **fixed}, 800.0, 1, None, context, trial_samples=512),
    ]
    assert stage2_round(trials, fixed, context=context) == [({"batch_size": 128, "num_workers": 0, **fixed}, {"stage": "full"})]
    trials.append(_full({"batch_size": 128, "num_workers": 0, **fixed}, 800.0, 2, False, context, loss_curve=PLATEAU))  # failed the loss
    assert stage2_round(trials, fixed, context=context) == []  # nothing left to vary: not the same config again


def test_when_no_screened_config_can_win_stage_2_runs_unscreened_ones_up_the_ladder_from_the_fastest_trial():
    # a regression MLP's short search screened batch 64 alone above its baseline's 32, then sampled every
    # knob at random; batch 128 at the rule's lr, never run, was 2.2x faster within the loss tolerance
    from autotune.study import screen_points
    from autotune.study.staged import stage2_round, unscreened_round

    context, resolved = _context("sqrt")
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    lr64 = 0.01 * 2 ** 0.5
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),  # the baseline
        _full({"batch_size": 32, "num_workers": 1, **fixed}, 80.0, 1, None, context, trial_samples=512),
        _full({"batch_size": 16, "num_workers": 1, "accumulate_grad_batches": 2, "lr": 0.01}, 60.0, 2, None, context, trial_samples=512),
        _full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": lr64}, 500.0, 3, True, context),
    ]
    assert stage2_round(trials, fixed, context=context) == []  # batch 64 is solved, and nothing screened is faster
    unscreened = screen_points(trials, resolved, {"lr", "accumulate_grad_batches"}, seed=0)
    assert sorted((p["batch_size"], p["num_workers"]) for p in unscreened) == [(16, 0), (64, 1), (128, 0), (128, 1)]
    round_ = unscreened_round(trials, unscreened, fixed, context)
    # at the fastest trial's workers (0) first: the preserving split of batch 16, batch 128 at the sqrt rule's lr;
    # batch 64 with a worker is left out: 1 worker measured slower than 0 at batch 32 (80 vs 100 samples/s), the
    # only config that ran both; batch 128 with a worker asks batch 128's question again: not in this round
    assert [(p["batch_size"], p["num_workers"], p["accumulate_grad_batches"]) for p, _ in round_] == [(16, 0, 2), (128, 0, 1)]
    # with no config that ran both worker counts, batch 64 with a worker is run
    alone = [trials[0], trials[2], trials[3]]
    assert [(p["batch_size"], p["num_workers"]) for p, _ in unscreened_round(alone, unscreened, fixed, context)] == [(16, 0), (128, 0), (64, 1)]
    assert round_[0][1] == {"stage": "full", "math": "preserving"} and round_[1][1] == {"stage": "full"}
    assert round_[1][0]["lr"] == pytest.approx(0.02) and round_[0][0]["lr"] == 0.01
    # from the fastest trial's knobs, not the baseline's: 1 worker measured fastest at full budget
    quick = [*trials[:1], _full({"batch_size": 32, "num_workers": 1, **fixed}, 600.0, 1, True, context), *trials[2:]]
    assert stage2_round(quick, fixed, context=context) == []
    # (0 workers measured slower than 1 at batch 32: the preserving split of batch 16 at 0 workers is left out)
    assert [(p["batch_size"], p["num_workers"]) for p, _ in unscreened_round(quick, unscreened, fixed, context)] == [(64, 1), (128, 1)]
    # a batch-64 run that failed the loss (on a plateau) rules out batch 128 of its class at any lr, and batch 64 at its lr
    failed = [*trials[:3], _full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": lr64}, 500.0, 3, False, context, loss_curve=PLATEAU)]
    assert [(p["batch_size"], p["num_workers"]) for p, _ in unscreened_round(failed, unscreened, fixed, context)] == [(16, 0)]
    assert unscreened_round(trials, [], fixed, context) == []


def test_a_failed_run_whose_loss_was_still_falling_is_told_from_a_plateau_or_a_divergence():
    from autotune.study.math_class import still_improving

    falling = [(x, 2.0 - x / 1000) for x in range(100, 1100, 100)]  # still 5-10% lower per quarter at its end
    assert still_improving(falling)
    flat = [(x, 1.0 + 0.001 * (x % 200 == 0)) for x in range(100, 1100, 100)]  # a plateau: noise, no trend
    assert not still_improving(flat)
    assert not still_improving([(x, 1.0 + x / 1000) for x in range(100, 1100, 100)])  # rising: diverging
    assert not still_improving([*falling[:-1], (1000, float("nan"))])  # a non-finite loss anywhere
    assert not still_improving([(1000, 1.0)]) and not still_improving([])  # no quarter before the last to compare


def test_a_failure_with_no_loss_curve_is_read_as_under_trained_not_as_a_plateau():
    """A new user's manual optimization logged no training loss: batch 64 failed at the rule's lr, and the
    same batch at a larger lr was skipped as if on a plateau; run with --enqueue it passed, far below the baseline."""
    from autotune.study.math_class import Failure, curve_tells, failed_class, failures_of, ruled_out_at_any_lr

    assert not curve_tells([]) and not curve_tells([(1000, 1.0)])  # nothing, or no quarter before the last
    assert curve_tells([(x, 1.0) for x in range(100, 1100, 100)]) and curve_tells([(500, 1.0), (1000, float("nan"))])
    context, _ = _context("sqrt", lr={"choices": [0.01, 0.03, 0.1]})
    base = context.baseline  # batch 32, lr 0.01
    trials = [_full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.01}, 900.0, 3, False, context)]
    trials[0].user_attrs.pop("loss_curve", None)
    (blind,) = failures_of(trials)
    assert blind.blind and not blind.improving and blind.lr_bound
    reason = failed_class(base.replace(batch_size=64, lr=0.01, num_workers=1), [blind], base, "sqrt")  # the same steps and lr
    assert reason is not None and "no training-loss curve" in reason
    assert failed_class(base.replace(batch_size=64, lr=0.03), [blind], base, "sqrt") is None  # a larger lr may converge
    assert not ruled_out_at_any_lr(base.replace(batch_size=128), [blind])
    # the same failure with a flat curve is a plateau: the larger lr at that batch is ruled out, as before
    plateau = Failure(3, blind.config)
    assert failed_class(base.replace(batch_size=64, lr=0.03), [plateau], base, "sqrt") is not None


def test_an_under_trained_failure_rules_out_fewer_steps_at_a_smaller_lr_only_and_stage_2_raises_the_lr():
    """The digits grid's optimum (4x the batch at 10x the lr) was never run: batch 64 at lr 0.001 failed the
    loss under-trained, and that ruled out every larger batch of its precision at any lr."""
    from autotune.study.math_class import Failure, failed_class, raised_lr_needed, ruled_out_at_any_lr
    from autotune.study.staged import stage2_round

    context, _ = _context("sqrt", lr={"choices": [0.01, 0.03, 0.1]})
    base = context.baseline  # batch 32, lr 0.01
    failed = [Failure(5, base.replace(batch_size=64, lr=0.01), improving=True)]  # multiplier 1/sqrt(2)
    assert not ruled_out_at_any_lr(base.replace(batch_size=128), failed)
    reason = failed_class(base.replace(batch_size=128, lr=0.01), failed, base, "sqrt")  # fewer steps, a smaller multiplier
    assert reason is not None and "trial 5" in reason and "still falling" in reason
    assert failed_class(base.replace(batch_size=64, lr=0.01, num_workers=1), failed, base, "sqrt") is not None  # the same steps and lr
    assert failed_class(base.replace(batch_size=128, lr=0.1), failed, base, "sqrt") is None  # fewer steps at a larger lr: may converge
    assert failed_class(base.replace(batch_size=64, lr=0.03), failed, base, "sqrt") is None
    assert failed_class(base.replace(batch_size=32, lr=0.001), failed, base, "sqrt") is None  # more steps
    assert raised_lr_needed(base.replace(batch_size=128), failed, base, "sqrt") == pytest.approx(2 ** -0.5)
    assert raised_lr_needed(base.replace(batch_size=32), failed, base, "sqrt") is None
    # stage 2: 64 failed at the baseline's lr with its loss still falling: it runs again at the next lr of the grid
    # (0.03), and 128 (first point: the rule's lr 0.02 -> 0.03 on the grid, a multiplier of 1.5) runs as planned
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    short = dict(trial_samples=512)
    falling = [[x, 2.0 - x / 1000] for x in range(100, 1100, 100)]
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),
        _full({"batch_size": 64, "num_workers": 0, **fixed}, 900.0, 1, None, context, **short),
        _full({"batch_size": 128, "num_workers": 0, **fixed}, 800.0, 2, None, context, **short),
        _full({"batch_size": 64, "num_workers": 0, **fixed}, 900.0, 3, False, context, loss_curve=falling),
    ]
    assert stage2_round(trials, fixed, k=3, context=context) == [
        ({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.03}, {"stage": "full"}),
        ({"batch_size": 128, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.03}, {"stage": "full"}),
    ]
    # the same failure on a plateau (not still falling): 128 is ruled out at any lr, and 64 goes to the sampler
    trials[-1] = _full({"batch_size": 64, "num_workers": 0, **fixed}, 900.0, 3, False, context,
                       loss_curve=[[x, 1.0] for x in range(100, 1100, 100)])
    assert stage2_round(trials, fixed, k=3, context=context) == [
        ({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1}, {"stage": "full"})]
    # once 64 also failed at 0.03 with its loss still falling, its next point is 0.1; at the grid's top there is none left
    trials[-1] = _full({"batch_size": 64, "num_workers": 0, **fixed}, 900.0, 3, False, context, loss_curve=falling)
    trials.append(_full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.03}, 900.0, 4, False, context,
                        loss_curve=falling))
    trials.append(_full({"batch_size": 128, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.03}, 800.0, 5, False, context,
                        loss_curve=falling))
    assert stage2_round(trials, fixed, k=3, context=context)[0] == (
        {"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.1}, {"stage": "full"})
    assert context.raised_point({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.1},
                                [*failed, Failure(6, base.replace(batch_size=64, lr=0.1), improving=True)]) is None
    # ... and a config with no larger lr left is passed over, not given to the sampler, every smaller lr of which
    # is ruled out (demo_boring: batch 64 failed at the range's top lr, and 3 sampled lrs below it were skipped).
    # 128 too: 64 failed at x7.07 with more steps, so 128 needs more than x7.07 (lr 0.14), above the grid
    trials.append(_full({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": 0.1}, 900.0, 6, False, context,
                        loss_curve=falling))
    assert stage2_round(trials, fixed, k=3, context=context) == []
    del trials[5]  # without 128's own failure at 0.03 it would still run its first point... which 64's x7.07 now rules out
    assert stage2_round(trials, fixed, k=3, context=context) == []


def test_a_round_runs_one_config_per_convergence_question_and_passes_its_slower_twins_over():
    """vit_digits: batch 128 with 1 and with 2 loader workers ran side by side at each of 3 lrs (6 of 8
    full-budget runs on 3 questions), and batch 64 got none."""
    from autotune.study.math_class import same_question
    from autotune.study.staged import stage2_round

    context, _ = _context("sqrt")
    base = context.baseline  # batch 32, lr 0.01
    assert same_question(base.replace(batch_size=128, num_workers=1), base.replace(batch_size=64, accumulate_grad_batches=2))
    assert not same_question(base.replace(batch_size=128), base.replace(batch_size=128, lr=0.02))
    assert same_question(base.replace(batch_size=128), base.replace(batch_size=128, lr=0.02), compare_lr=False)
    assert not same_question(base.replace(batch_size=128), base.replace(batch_size=128, precision="bf16-mixed"))
    assert not same_question(base.replace(batch_size=128), base.replace(batch_size=64))
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    short = dict(trial_samples=512)
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),
        _full({"batch_size": 128, "num_workers": 1, **fixed}, 900.0, 1, None, context, **short),
        _full({"batch_size": 128, "num_workers": 0, **fixed}, 850.0, 2, None, context, **short),
        _full({"batch_size": 64, "num_workers": 0, **fixed}, 500.0, 3, None, context, **short),
    ]
    first = stage2_round(trials, fixed, k=3, context=context)
    # 128 with 0 workers asks 128 with 1 worker's question (same batch, lr 0.02): batch 64 takes its place
    assert [(p["batch_size"], p["num_workers"]) for p, _ in first] == [(128, 1), (64, 0)]
    assert [context.config_of(p).lr for p, _ in first] == [pytest.approx(0.02), pytest.approx(0.01 * 2 ** 0.5)]
    # after 128 (1 worker) failed under-trained, the twin is ruled out at lr 0.02 and the round raises the lr once
    falling = [[x, 2.0 - x / 1000] for x in range(100, 1100, 100)]
    trials.append(_full(first[0][0], 900.0, 4, False, context, loss_curve=falling))
    second = stage2_round(trials, fixed, k=3, context=context)
    raised = [p for p, _ in second if p["batch_size"] == 128]
    assert len(raised) == 1 and raised[0]["num_workers"] == 1 and raised[0]["lr"] > 0.02


def test_stage_2_gives_the_fastest_sane_math_preserving_config_a_full_budget_run_first():
    from autotune.study.staged import stage2_round

    context, _ = _context("sqrt")
    fixed = {"accumulate_grad_batches": 1, "lr": 0.01}
    short = dict(trial_samples=512)
    insane = {"ok": False, "change": 0.5, "samples": 512, "tolerance": 0.15}
    trials = [
        _full({"batch_size": 32, "num_workers": 0, **fixed}, 100.0, 0, True, context),
        _full({"batch_size": 64, "num_workers": 0, **fixed}, 900.0, 1, None, context, **short),
        _full({"batch_size": 16, "num_workers": 1, "accumulate_grad_batches": 2, "lr": 0.01}, 300.0, 2, None, context, **short,
              loss_sanity=insane),
        _full({"batch_size": 32, "num_workers": 1, **fixed}, 200.0, 3, None, context, **short),
    ]
    # 16 x 2 is faster but failed the sanity check; 32 with a worker is the fastest sane one: a round of its own
    assert stage2_round(trials, fixed, k=3, context=context) == [
        ({"batch_size": 32, "num_workers": 1, **fixed}, {"stage": "full", "math": "preserving"})]
    trials.append(_full({"batch_size": 32, "num_workers": 1, **fixed}, 210.0, 4, True, context))
    # it had its run: the math-changing configs come next, at the rule's lr
    assert stage2_round(trials, fixed, k=3, context=context) == [
        ({"batch_size": 64, "num_workers": 0, "accumulate_grad_batches": 1, "lr": pytest.approx(0.01 * 2 ** 0.5)}, {"stage": "full"})]


def test_the_loss_sanity_check_allows_rounding_not_a_broken_run():
    from autotune.study.math_class import loss_sanity

    base = [(s, 2.0 - s / 1000) for s in range(32, 2049, 32)]
    same = [(s, y * 1.05) for s, y in base if s <= 512]  # 5% above: rounding and noise
    check = loss_sanity(same, base, 0.05)
    assert check["ok"] and check["samples"] == 512 and check["tolerance"] == pytest.approx(0.15)
    assert check["change"] == pytest.approx(0.05)
    broken = [(s, y * 1.3) for s, y in base if s <= 512]
    assert loss_sanity(broken, base, 0.05)["ok"] is False
    assert loss_sanity(broken, base, 0.0)["tolerance"] == 0.05  # the floor
    assert loss_sanity([], base, 0.05) is None


def test_a_staged_search_gives_a_math_preserving_config_a_full_budget_run(tmp_path, cli):
    db = tmp_path / "m.db"
    space = tmp_path / "space.yaml"
    # the tiny model's baseline: batch 16, accumulation 1; batch 8 x accumulation 2 keeps its math
    space.write_text("batch_size: {choices: [8, 16, 64]}\nnum_workers: {choices: [0, 1]}\n"
                     "accumulate_grad_batches: {choices: [1, 2]}\nlr: {low: 0.5, high: 2.0, relative: true}\n")
    r = cli("search", MODELS / "tiny.py", "--search", "staged", "--trials", 7, "--samples", 1024, "--space", space,
            "--storage", f"sqlite:///{db}", env={"TINY_SLOW_BATCH": "16"}, check_rc=0)  # the baseline's batch is slow
    assert "3 math-preserving first" in r.stdout and "linear: SGD, an SGD-family optimizer: linear scaling" in r.stdout
    study, _ = load_study("tiny", f"sqlite:///{db}")
    base = study.trials[0]
    screened = [t for t in study.trials if t.user_attrs.get("stage") == "system"]
    assert [t.user_attrs["math"] for t in screened] == ["preserving"] * 3 + ["changing"]
    for t in screened[:3]:
        assert t.user_attrs["effective_batch_size"] == 16 and t.user_attrs["config"]["lr"] == base.user_attrs["config"]["lr"]
        assert t.user_attrs["loss_sanity"]["ok"], t.user_attrs["loss_sanity"]
    full = [t for t in study.trials if t.user_attrs.get("stage") == "full"]
    assert full and full[0].user_attrs["math"] == "preserving" and "trial_samples" not in full[0].user_attrs
    assert full[0].params["batch_size"] == 8 and full[0].params["accumulate_grad_batches"] == 2
    assert full[0].user_attrs["feasible"] is not None
    # judged with the sanity check's tolerance (3 x 5%): rounding and data order, not convergence
    from autotune.objective import constraint_value

    wide = constraint_value(full[0].user_attrs["loss"], base.user_attrs["loss"], 0.15, "min")
    assert full[0].user_attrs["constraint"] == pytest.approx(wide) and full[0].user_attrs["feasible"] == (wide <= 0)
    assert "same math" in cli("show", db, check_rc=0).stdout


def test_the_plan_line_speaks_of_accumulation_only_when_the_space_searches_it():
    """A new user's report: a manual-optimization module (accumulate_grad_batches dropped) read
    "split as micro-batch x accumulation" in the staged plan."""
    baseline = TrialConfig(batch_size=32, accumulate_grad_batches=2, lr=0.01)
    with_accumulation = same_math_phrase({"batch_size": {"choices": [32, 64]}, "accumulate_grad_batches": {"choices": [1, 2]}}, baseline)
    assert with_accumulation == "the baseline's effective batch 64 and lr, split as micro-batch x accumulation"
    manual = same_math_phrase({"batch_size": {"choices": [32, 64]}}, TrialConfig(batch_size=32, lr=0.01))
    assert manual == "the baseline's batch 32 and lr" and "accumulation" not in manual


def test_a_one_trial_staged_run_says_it_adds_only_the_baseline_and_the_next_lists_only_the_stages_it_runs(tmp_path, cli):
    args = ("search", MODELS / "tiny.py", "--search", "staged", "--trials", 1, "--samples", 512, "--storage", f"sqlite:///{tmp_path / 'o.db'}")
    r = cli(*args, check_rc=0)
    assert "staged search: no run beyond the baseline's" in r.stdout and "0 system-knob" not in r.stdout
    r = cli(*args, check_rc=0)
    assert "staged search: 1 system-knob screening run(s)" in r.stdout and "0 full-budget" not in r.stdout


def test_the_plan_line_of_a_space_without_lr_says_every_run_keeps_the_baseline_s_lr(tmp_path, cli):
    """Two new users read 'with the lr following the effective batch' and saw batch 128 run at the baseline's lr:
    their spaces searched no lr."""
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: {choices: [16, 64]}\nprecision: ['32-true']\n")
    r = cli("search", MODELS / "tiny.py", "--search", "staged", "--trials", 3, "--samples", 256, "--space", space,
            "--storage", f"sqlite:///{tmp_path / 'n.db'}", check_rc=0)
    assert "full-budget run(s): the fastest math-preserving config, then the fastest system configs at the baseline's lr (the space " \
           "searches no lr: add lr as a relative: true range, or lr_scaling, for it to follow the effective batch)" in r.stdout, r.stdout
    assert "following the effective batch (" not in r.stdout
    # a run of the baseline and an --enqueue config: the line names the enqueued run, not "no run beyond the baseline's"
    seed = tmp_path / "seed.yaml"
    seed.write_text("data:\n  batch_size: 64\n")
    r = cli("search", MODELS / "tiny.py", "--search", "staged", "--trials", 2, "--samples", 256, "--space", space, "--enqueue", seed,
            "--storage", f"sqlite:///{tmp_path / 'e.db'}", check_rc=0)
    assert "staged search: 1 --enqueue config(s) at full budget\n" in r.stdout and "no run beyond" not in r.stdout, r.stdout
