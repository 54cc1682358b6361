"""End-to-end: the console entry point runs real Lightning trials into a real SQLite study."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import EXAMPLES, MODELS, ROOT, load

from autotune.objective import loss_target

pytestmark = pytest.mark.slow
MEASURED = ("samples_per_sec", "device/samples_per_sec", "step_time_median", "step_time_p90", "data_wait_fraction",
            "peak_memory_gib", "loss_curve", "loss", "effective_batch_size", "precision_ran", "config")


def _group_alive(pgid, wait=10.0):
    """Whether a live (non-zombie) process of group ``pgid`` remains after ``wait`` s (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + wait
    while True:
        alive = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive = True
                break
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_digits_search_resume_show_export_and_lightning_cli(tmp_path, cli):
    db = tmp_path / "d.db"
    out = tmp_path / "best.yaml"
    args = ["search", EXAMPLES / "digits" / "model.py", "--trials", 3, "--samples", 2048, "--storage", f"sqlite:///{db}", "--out", out]
    r = cli(*args, check_rc=0)
    assert "trial 0 (baseline)" in r.stdout and "recommended: trial" in r.stdout
    study = load(db, "digits")
    assert len(study.trials) == 3
    baseline = study.trials[0]
    assert baseline.user_attrs["baseline"] is True
    assert baseline.params == {"batch_size": 32, "precision": "32-true", "accumulate_grad_batches": 1, "num_workers": 0, "lr": 0.001}
    for t in study.trials:
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert all(k in t.user_attrs for k in MEASURED), t.user_attrs.keys()
            assert t.values[0] == t.user_attrs["samples_per_sec"] > 0
            assert t.user_attrs["precision_ran"] == t.params["precision"]
            assert t.user_attrs["loss_source"] == "val_loss"
            assert t.user_attrs["ranks"][0]["first_batch_size"] == t.params["batch_size"]
            # what TPE's constraint handling reads (one constraint), in the form optuna-dashboard reads too
            assert (t.constraints["0"] <= 0) == t.user_attrs["feasible"] and t.system_attrs["constraints"] == [t.constraints["0"]]
            # the whole sample budget, in whole optimizer steps, even when accumulation spans an epoch end
            accum = t.params["accumulate_grad_batches"]
            assert t.user_attrs["batches"] == -(-2048 // (t.params["batch_size"] * accum)) * accum
        else:
            assert t.user_attrs["fail_reason"]
    settings = study.user_attrs["autotune"]
    assert settings["samples"] == 2048 and "16-mixed" not in settings["space"]["precision"]["choices"]

    # the export is what LightningCLI runs, and each object receives exactly the exported values
    exported = yaml.safe_load(out.read_text())
    assert out.read_text().startswith("# autotune recommendation")
    check = (
        "import sys, json; sys.path.insert(0, sys.argv[2]);"
        "from lightning.pytorch.cli import LightningCLI; from model import DigitsClassifier, DigitsDataModule;"
        "cli = LightningCLI(DigitsClassifier, DigitsDataModule, run=False, args=['--config', sys.argv[1]]);"
        "t = cli.trainer; print(json.dumps({'precision': t.precision, 'accumulate_grad_batches': t.accumulate_grad_batches,"
        "'devices': t.num_devices, 'lr': cli.model.hparams.lr, 'batch_size': cli.datamodule.batch_size, 'num_workers': cli.datamodule.num_workers}))"
    )
    got = subprocess.run([sys.executable, "-c", check, out, EXAMPLES / "digits"], capture_output=True, text=True, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    received = json.loads(got.stdout.strip().splitlines()[-1])
    assert received == {
        "precision": exported["trainer"]["precision"],
        "accumulate_grad_batches": exported["trainer"]["accumulate_grad_batches"],
        "devices": exported["trainer"]["devices"],
        "lr": exported["model"]["lr"],
        "batch_size": exported["data"]["batch_size"],
        "num_workers": exported["data"]["num_workers"],
    }
    fit = subprocess.run([sys.executable, EXAMPLES / "digits" / "train.py", "fit", "--config", out, "--trainer.max_steps", "3"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-2000:]

    # resume adds trials; nothing is deleted
    cli(*args[:2], "--trials", 1, "--storage", f"sqlite:///{db}", "--out", out, check_rc=0)
    assert len(load(db, "digits").trials) == 4
    r = cli(*args[:2], "--trials", 1, "--storage", f"sqlite:///{db}", "--objective", "pareto", check_rc=2)
    assert "created with objective='throughput'" in r.stderr and len(load(db, "digits").trials) == 4

    rows = json.loads(cli("show", db, "--format", "json", check_rc=0).stdout)
    assert [row["number"] for row in rows] == [0, 1, 2, 3] and sum("recommended" in row["note"] for row in rows) == 1
    out2 = tmp_path / "again.yaml"
    cli("export", db, "--out", out2, check_rc=0)
    assert yaml.safe_load(out2.read_text()) == yaml.safe_load(out.read_text())
    _check_dashboard(db, tmp_path)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_dashboard(db, cwd):
    """`autotune dashboard DB` serves the study on 127.0.0.1 with the recommendation as its note."""
    import urllib.request

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "dashboard", str(db), "--port", str(port)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        studies = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as response:
                    studies = json.loads(response.read())["study_summaries"]
                break
            except OSError:
                time.sleep(0.5)
        assert studies and studies[0]["study_name"] == "digits"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}", timeout=5) as response:
            detail = json.loads(response.read())
        assert "autotune recommendation" in detail["note"]["body"]
        assert len(detail["trials"]) == 4
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_two_rank_ddp_trials_share_one_config(tmp_path, cli):
    db = tmp_path / "ddp.db"
    cli("search", MODELS / "tiny.py", "--trials", 2, "--devices", 2, "--samples", 512, "--storage", f"sqlite:///{db}", check_rc=0)
    study = load(db, "tiny")
    assert len(study.trials) == 2
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE, t.user_attrs.get("fail_reason")
        ranks = t.user_attrs["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert all(r["config"] == t.user_attrs["config"] for r in ranks)
        assert t.user_attrs["config"]["devices"] == 2 and t.user_attrs["config"]["strategy"] == "ddp"
        assert all(r["first_batch_size"] == t.params["batch_size"] for r in ranks)
        assert t.user_attrs["effective_batch_size"] == 2 * t.params["batch_size"] * t.params["accumulate_grad_batches"]
        # the gradient noise scale: each rank's local gradient (comm hook) against the all-reduced one
        # (a trial of too few optimizer steps borrows the study's median)
        assert t.user_attrs["noise_method"] in ("ddp_ranks", "study_median") and t.user_attrs["gradient_noise_scale"] > 0
    assert study.trials[0].user_attrs["noise_method"] == "ddp_ranks"
    for t in study.trials:
        # Linear(8, 1): forward 2*8 FLOPs per sample, the weight gradient 2*8 (the input needs no gradient)
        assert t.user_attrs["flops_per_sample"] == 32
        assert t.user_attrs["model_flops_per_sec"] == pytest.approx(32 * t.user_attrs["samples_per_sec"])
        assert 0 < t.user_attrs["mfu"] < 1


def test_faults_fail_their_trial_with_a_reason_and_the_study_goes_on(tmp_path, cli):
    db = tmp_path / "faults.db"
    env = {"TINY_FAULTS": "1:raise,2:nan,3:kill,4:hang,5:oom,6:oom_runtime"}
    # known configs in order, so that no trial after an injected OOM has a batch as large (the OOM frontier would skip it)
    seeds = []
    for number, batch in enumerate([32, 32, 32, 32, 512, 256, 16], start=1):
        seeds += ["--enqueue", tmp_path / f"seed{number}.yaml"]
        (tmp_path / f"seed{number}.yaml").write_text(f"data:\n  batch_size: {batch}\n")
    cli("search", MODELS / "tiny.py", "--trials", 8, "--samples", 1024, "--trial-timeout", 25, *seeds,
        "--storage", f"sqlite:///{db}", env=env, check_rc=0)
    trials = load(db, "tiny").trials
    assert len(trials) == 8
    kinds = {t.number: t.user_attrs.get("fail_kind") for t in trials}
    assert kinds == {0: None, 1: "exception", 2: "nonfinite_loss", 3: "killed", 4: "timeout", 5: "oom", 6: "oom", 7: None}
    reasons = {t.number: t.user_attrs.get("fail_reason", "") for t in trials}
    assert "ValueError: boom from the user's training_step at tiny.py:" in reasons[1]
    assert "non-finite loss" in reasons[2] and "SIGKILL" in reasons[3] and "--trial-timeout" in reasons[4]
    assert reasons[5].startswith("out of memory") and reasons[6].startswith("out of memory")
    assert trials[7].state == optuna.trial.TrialState.COMPLETE
    assert not _group_alive(trials[4].user_attrs["process_group"])  # the hung trial left no process behind


def test_batch_size_not_applied_fails_the_trial(tmp_path):
    from autotune.runner import inspect_process, run_trial_process

    report = inspect_process({"model_file": str(MODELS / "tiny.py")})
    os.environ["TINY_IGNORE_BATCH"] = "1"
    try:
        spec = {"model_file": str(MODELS / "tiny.py"), "targets": report["targets"], "samples": 256, "seed": 0,
                "config": {"batch_size": 32, "lr": 0.05}}
        outcome = run_trial_process(spec, timeout=120, trial_number=1, expected_ranks=1, devices=1)
    finally:
        del os.environ["TINY_IGNORE_BATCH"]
    assert outcome.fail_kind == "batch_size_not_applied"
    assert outcome.fail_reason == "batch_size not applied: the first training batch had 16 samples, the trial asked for 32"


def test_pareto_objective(tmp_path, cli):
    db = tmp_path / "p.db"
    space = tmp_path / "grid.yaml"  # 2 x 2 = 4 combinations: the grid caps the run at 4 trials
    space.write_text("batch_size: {choices: [16, 32]}\naccumulate_grad_batches: {choices: [1, 2]}\n")
    r = cli("search", MODELS / "tiny.py", "--trials", 6, "--samples", 512, "--objective", "pareto", "--sampler", "grid", "--space", space,
            "--storage", f"sqlite:///{db}", "--out", tmp_path / "p.yaml", check_rc=0)
    assert "--sampler grid: 4 combination(s) of the space left to run; this run adds 4 trial(s), not 6" in r.stdout
    study = load(db, "tiny")
    assert len(study.directions) == 2 and study.metric_names == ["samples_per_sec", "val_loss"]
    assert all(len(t.values) == 2 for t in study.trials if t.state.name == "COMPLETE")
    assert len({(t.params["batch_size"], t.params["accumulate_grad_batches"]) for t in study.trials}) == len(study.trials) == 4
    assert (tmp_path / "p.yaml").is_file()


def test_digits_time_to_quality_objective(tmp_path, cli):
    db = tmp_path / "q.db"
    out = tmp_path / "q.yaml"
    space = tmp_path / "space.yaml"  # with lr tied to the batch size (sqrt scaling)
    space.write_text("batch_size: {choices: [32, 64, 128]}\naccumulate_grad_batches: {low: 1, high: 2}\n"
                     "lr: {low: 0.5, high: 2.0, log: true, relative: true}\nlr_scaling: sqrt\n")
    r = cli("search", EXAMPLES / "digits" / "model.py", "--trials", 3, "--samples", 1024, "--objective", "time-to-quality",
            "--space", space, "--storage", f"sqlite:///{db}", "--out", out, check_rc=0)
    assert "lr_multiplier=0.5..2 (log) (x baseline lr scaled by effective batch, sqrt)" in r.stdout
    study = load(db, "digits")
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE] and study.metric_names == ["time_to_target_seconds"]
    baseline = study.trials[0]
    target = baseline.user_attrs["loss_target"]
    assert baseline.user_attrs["target_reached"] and target > 0
    # the baseline's smoothed final loss plus the 5% default tolerance
    assert target == pytest.approx(loss_target(baseline.user_attrs["loss_curve"], 1024) * 1.05)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    for t in complete:
        assert t.user_attrs["loss_target"] == target  # every trial is judged against the baseline's loss
        seconds = t.user_attrs["time_to_target"]
        assert t.values[0] == (seconds if seconds is not None else float("inf"))
        if t.user_attrs["target_reached"]:
            assert seconds == pytest.approx(t.user_attrs["samples_to_target"] / t.user_attrs["samples_per_sec"])
            assert t.user_attrs["samples_to_target"] <= t.user_attrs["samples_seen"]
    # the recommendation: the feasible trial that reached the target soonest (reached ones before estimates)
    feasible = [t for t in complete if t.user_attrs["feasible"]]
    best = min(feasible, key=lambda t: (not t.user_attrs["target_reached"], t.values[0]))
    assert f"recommended: trial {best.number}" in r.stdout
    assert "time to the baseline's training loss" in out.read_text()
    for t in study.trials:  # the lr ran is the baseline's, scaled by sqrt(effective batch ratio), times the multiplier
        ratio = t.user_attrs["effective_batch_size"] / baseline.user_attrs["effective_batch_size"]
        expected = 0.001 * t.params["lr_multiplier"] * ratio**0.5
        assert t.user_attrs["config"]["lr"] == pytest.approx(expected)
        if t.state.name == "COMPLETE":
            assert t.user_attrs["lr_ran"] == pytest.approx(expected)
    exported = yaml.safe_load(out.read_text())
    assert exported["model"]["lr"] == pytest.approx(best.user_attrs["config"]["lr"])  # the final lr, not the multiplier


def test_digits_goodput_objective(tmp_path, cli):
    db = tmp_path / "g.db"
    space = tmp_path / "space.yaml"  # accumulation 1 (consecutive steps) and 4 (micro-batches) both measure the noise scale
    space.write_text("batch_size: {choices: [32, 64]}\naccumulate_grad_batches: {choices: [1, 4]}\n")
    r = cli("search", EXAMPLES / "digits" / "model.py", "--trials", 4, "--samples", 1024, "--objective", "goodput",
            "--space", space, "--storage", f"sqlite:///{db}", "--out", tmp_path / "g.yaml", check_rc=0)
    study = load(db, "digits")
    assert study.metric_names == ["goodput"]
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert complete[0].user_attrs["baseline"] and complete[0].user_attrs["statistical_efficiency"] == 1.0
    methods = set()
    for t in complete:
        attrs = t.user_attrs
        methods.add(attrs["noise_method"])
        assert attrs["noise_method"] == ("micro_batches" if t.params["accumulate_grad_batches"] > 1 else "consecutive_steps")
        assert 0 < attrs["gradient_noise_scale"] < 1e5
        base = complete[0].user_attrs["effective_batch_size"]
        noise = attrs["gradient_noise_scale"]
        assert attrs["statistical_efficiency"] == pytest.approx((noise + base) / (noise + attrs["effective_batch_size"]))
        assert t.values[0] == pytest.approx(attrs["samples_per_sec"] * attrs["statistical_efficiency"]) == attrs["goodput"]
    best = max((t for t in complete if t.user_attrs["feasible"]), key=lambda t: t.values[0])
    assert f"recommended: trial {best.number}" in r.stdout


def test_confirmation_races_the_best_configs_in_alternating_pairs_stops_early_and_resumes(tmp_path, cli):
    db = tmp_path / "c.db"
    out = tmp_path / "c.yaml"
    space = tmp_path / "space.yaml"  # workers change the speed, not the seeded training: every config is feasible
    space.write_text("num_workers: {choices: [0, 1, 2]}\n")
    slow = {"TINY_SLOW_WORKERS": "0"}  # the baseline's 0 workers: 20 ms more per step
    args = ("search", MODELS / "tiny.py", "--samples", 1024, "--confirm", 2, "--confirm-samples", 1024, "--space", space,
            "--storage", f"sqlite:///{db}", "--out", out)
    # a tiny budget: a pair would pass it, so no race starts and the baseline is recommended
    r = cli(*args, "--trials", 3, "--confirm-share", 0.01, env=slow, check_rc=0)
    assert "plan: 3 trial(s) + up to 24 paired confirmation run(s)" in r.stdout
    assert "the baseline would take confirmation past its budget" in r.stdout
    assert "not raced, and the baseline is recommended" in r.stdout and "# measured: 1.00x: " in out.read_text()
    assert not [t for t in load(db, "tiny").trials if "pair_of" in t.user_attrs]
    assert load(db, "tiny").user_attrs["confirm_unraced_candidates"]  # recorded as left unraced by the budget
    # the same command with room: the candidate races the baseline, wins, and the next candidate races the winner
    r = cli(*args, "--trials", 1, "--confirm-share", 0.9, env=slow, check_rc=0)
    study = load(db, "tiny")
    runs = [t for t in study.trials if "pair_of" in t.user_attrs]
    candidate = runs[0].user_attrs["pair_of"]
    assert study.trials[candidate].params["num_workers"] != 0
    mine = [t for t in runs if t.user_attrs["pair_of"] == candidate]
    for i in range(len(mine) // 2):  # alternation: pair 0 runs the incumbent first, pair 1 the candidate, ...
        pair = sorted((t for t in mine if t.user_attrs["pair_index"] == i), key=lambda t: t.number)
        assert [t.user_attrs["confirm_of"] for t in pair] == ([0, candidate] if i % 2 == 0 else [candidate, 0])
        assert all(t.user_attrs["incumbent"] == 0 and t.user_attrs["confirm_samples"] == 1024 for t in pair)
        assert all(t.state.name == "COMPLETE" and t.params == study.trials[t.user_attrs["confirm_of"]].params for t in pair)
        assert pair[0].user_attrs["pair_run"] == pair[1].user_attrs["pair_run"]  # back to back, in one search run
    assert len({t.user_attrs["pair_run"] for t in runs}) == 1
    second = [t for t in runs if t.user_attrs["pair_of"] != candidate]
    assert second and all(t.user_attrs["incumbent"] == candidate for t in second)  # the winner is the incumbent now
    assert f"race: trial {second[0].user_attrs['pair_of']}'s config" in r.stdout
    assert f"confirming: racing 2 config(s) (trials {candidate}, {second[0].user_attrs['pair_of']}, in that order) against " in r.stdout
    assert "recommended: trial " in r.stdout and "x faster [" in r.stdout
    # a third run continues from the stored races: a decided race is not run again
    r = cli(*args, "--trials", 1, "--confirm-share", 0.9, env=slow, check_rc=0)
    study = load(db, "tiny")
    assert [t.number for t in study.trials if t.user_attrs.get("pair_of") == candidate] == [t.number for t in mine]
    from autotune.study import confirmation, load_study

    _, settings = load_study("tiny", f"sqlite:///{db}")
    confirmed = confirmation(study, settings)
    assert [race.candidate for race in confirmed.races] == [candidate, second[0].user_attrs["pair_of"]]
    assert all(race.verdict.decided for race in confirmed.races) and confirmed.won[0].candidate == candidate


def test_enqueued_known_configs_run_right_after_the_baseline(tmp_path, cli):
    db = tmp_path / "e.db"
    seed = tmp_path / "known.yaml"  # LightningCLI format, as an export
    seed.write_text("trainer:\n  accumulate_grad_batches: 2\ndata:\n  batch_size: 64\n")
    cli("search", MODELS / "tiny.py", "--trials", 3, "--samples", 512, "--enqueue", seed, "--storage", f"sqlite:///{db}", check_rc=0)
    study = load(db, "tiny")
    seeded = study.trials[1]
    assert seeded.user_attrs["seeded_from"] == str(seed)
    assert seeded.user_attrs["config"]["batch_size"] == 64 and seeded.user_attrs["config"]["accumulate_grad_batches"] == 2
    assert seeded.state.name == "COMPLETE" and "seeded_from" not in study.trials[2].user_attrs
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  batch_size: 48\n")
    r = cli("search", MODELS / "tiny.py", "--trials", 1, "--enqueue", bad, "--storage", f"sqlite:///{db}", check_rc=2)
    assert "batch_size = 48 is not one of the space's choices" in r.stderr and len(load(db, "tiny").trials) == 3


def test_oom_frontier_skips_larger_batches_and_survives_a_resume(tmp_path, cli):
    from autotune.study import oom_frontier

    db = tmp_path / "m.db"
    space = tmp_path / "space.yaml"  # above 64 samples per batch the tiny model "runs out of memory"
    space.write_text("batch_size: {choices: [16, 32, 128, 256, 512]}\n")
    args = ["search", MODELS / "tiny.py", "--samples", 1024, "--space", space, "--sampler", "grid", "--storage", f"sqlite:///{db}"]
    first = tmp_path / "first.yaml"
    first.write_text("data:\n  batch_size: 256\n")  # run 256 first: it fails with OOM
    cli(*args, "--trials", 2, "--enqueue", first, env={"TINY_OOM_ABOVE": "64"}, check_rc=0)
    study = load(db, "tiny")
    assert study.trials[1].user_attrs["fail_kind"] == "oom"
    assert oom_frontier(study) == [{"devices": 1, "strategy": "auto", "precision": "32-true", "fits_up_to": 16, "oom_from": 256}]
    r = cli(*args, "--trials", 4, env={"TINY_OOM_ABOVE": "64"}, check_rc=0)  # resumed: the grid proposes 32, 128 and 512
    study = load(db, "tiny")
    ran = [t for t in study.trials if t.state.name in ("COMPLETE", "FAIL")]
    # after the first OOM no batch >= 256 ran again; 512 and (a second) 256 are pruned as predicted OOM
    assert [t.params["batch_size"] for t in ran if t.params["batch_size"] >= 256] == [256]
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned and all(t.user_attrs["fail_kind"] == "predicted_oom" and t.params["batch_size"] >= 256 for t in pruned)
    assert "predicted OOM: trial 1 ran out of memory at per-device batch 256" in pruned[0].user_attrs["fail_reason"]
    assert "OOM frontier: 32-true, 1 device(s), auto: per-device batch <= " in r.stdout
    assert {t.params["batch_size"] for t in study.trials} == {16, 32, 128, 256, 512}  # 128 runs: only batches >= 256 are ruled out


def test_a_batch_larger_than_an_iterable_epoch_is_removed_once_and_never_run_again(tmp_path, cli):
    """14.7a: an IterableDataset of 50 samples (its length unknown at inspection) and batch sizes up to 128."""
    db = tmp_path / "e.db"
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64, 128]}\n")
    args = ["search", MODELS / "tiny.py", "--samples", 512, "--space", space, "--sampler", "grid", "--storage", f"sqlite:///{db}"]
    first = tmp_path / "first.yaml"
    first.write_text("data:\n  batch_size: 128\n")  # run 128 first: the data runs out after 50 samples
    r = cli(*args, "--trials", 3, "--enqueue", first, env={"TINY_ITERABLE": "50"}, check_rc=0)
    assert r.stdout.count("removed batch sizes [64, 128] from the space: trial 1's training data ran out after 50 samples") == 1
    study = load(db, "tiny")
    assert study.trials[1].user_attrs["fail_kind"] == "batch_size_not_applied"
    assert "the training data ran out (an epoch has 50 samples per device)" in study.trials[1].user_attrs["fail_reason"]
    assert study.user_attrs["epoch_samples"] == {"1": {"samples": 50, "trial": 1}}
    r = cli(*args, "--trials", 3, env={"TINY_ITERABLE": "50"}, check_rc=0)  # resumed: the grid proposes the other points
    assert "epoch: 50 samples per device with 1 or more device(s) (trial 1): larger batches are not run" in r.stdout
    assert "removed batch sizes" not in r.stdout
    study = load(db, "tiny")
    ran = [t for t in study.trials if t.state.name in ("COMPLETE", "FAIL")]
    assert [t.number for t in ran if t.params["batch_size"] > 50] == [1]  # tried once, never again
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned and {t.params["batch_size"] for t in pruned} <= {64, 128}
    assert all(t.user_attrs["fail_kind"] == "batch_above_epoch" for t in pruned)
    assert all(t.state.name == "COMPLETE" for t in ran if t.params["batch_size"] <= 50)
    show = cli("show", "tiny", "--storage", f"sqlite:///{db}", check_rc=0)
    assert "epoch: 50 samples per device" in show.stdout


@pytest.mark.parametrize("devices", [1, 2])
def test_a_clearly_slower_trial_is_pruned_and_never_recommended(tmp_path, cli, devices):
    db = tmp_path / "p.db"
    fast = tmp_path / "fast.yaml"
    fast.write_text("data:\n  num_workers: 1\n")  # same training as the baseline: feasible
    slow = tmp_path / "slow.yaml"  # batch 32 sleeps 50 ms a step: far below the others at every milestone
    slow.write_text("data:\n  batch_size: 32\n")
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: {choices: [16, 32]}\nnum_workers: {choices: [0, 1]}\n")
    r = cli("search", MODELS / "tiny.py", "--trials", 3, "--samples", 2048, "--devices", devices, "--space", space,
            "--enqueue", fast, "--enqueue", slow, "--pruner", "median", "--pruner-startup", 2, "--storage", f"sqlite:///{db}",
            env={"TINY_SAMPLE_SLEEP": "0.0005", "TINY_SLOW_BATCH": "32"}, check_rc=0)
    study = load(db, "tiny")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "PRUNED"], [t.user_attrs.get("fail_reason") for t in study.trials]
    pruned = study.trials[2]
    assert pruned.params["batch_size"] == 32 and pruned.user_attrs["fail_kind"] == "pruned"
    assert pruned.user_attrs["fail_reason"].startswith("pruned at 512 of 2048 samples: samples per sec")
    assert "512" in pruned.user_attrs["intermediate"] and "2048" not in pruned.user_attrs["intermediate"]
    assert all("intermediate" in t.user_attrs for t in study.trials[1:])  # recorded while they ran
    assert "recommended: trial 2:" not in r.stdout and "recommended: trial" in r.stdout


def test_memory_model_caps_the_batch_sizes_at_the_limit(tmp_path, cli):
    db = tmp_path / "mm.db"
    space = tmp_path / "space.yaml"
    space.write_text("batch_size: {choices: [16, 32, 64, 128, 256]}\n")
    # 8 MiB or more per sample: 256 samples need over 2 GiB on top of the process, so 256 never fits 90% of 2 GiB
    r = cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 512, "--space", space, "--memory-limit", 2.0,
            "--storage", f"sqlite:///{db}", env={"TINY_MIB_PER_SAMPLE": "8"}, check_rc=0)
    settings = load(db, "tiny").user_attrs["autotune"]
    model = settings["memory_model"]["32-true"]
    assert [b for b, _ in model["probes"]] == [16, 32]
    # the fitted slope is the allocation (8 MiB a sample; the allocator may hold up to two steps' worth)
    assert 7 / 1024 <= model["per_sample_gib"] <= 17 / 1024
    assert model["fixed_gib"] + model["per_sample_gib"] * model["max_batch"] <= 0.9 * 2.0 + 1e-9
    assert model["fixed_gib"] + model["per_sample_gib"] * (model["max_batch"] + 1) > 0.9 * 2.0
    assert 32 <= model["max_batch"] < 256
    kept = [c for c in (16, 32, 64, 128, 256) if c <= model["max_batch"]]
    assert settings["space"]["batch_size"]["choices"] == kept
    assert "removed batch sizes [" in r.stdout and "32-true: " in r.stdout and f"max per-device batch {model['max_batch']}" in r.stdout
    r = cli("search", MODELS / "tiny.py", "--memory-margin", 1.5, "--storage", f"sqlite:///{tmp_path / 'x.db'}", check_rc=2)
    assert "--memory-margin must be a fraction in [0, 1)" in r.stderr


def test_a_search_whose_output_reader_went_away_stores_its_running_trial_as_interrupted(tmp_path):
    """``autotune search ... | head``: when head exits, the search stops as Ctrl-C stops it (exit 141),
    and the trial running in the other job thread is stored as interrupted and queued again, instead of
    staying RUNNING until it goes stale."""
    from autotune.cli import EXIT_BROKEN_PIPE

    db = tmp_path / "pipe.db"
    env = {**os.environ, "TINY_FAULTS": "1:hang"}  # trial 1 still runs when trial 2 ends and prints
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "search", str(MODELS / "tiny.py"), "--trials", "3", "--samples", "512",
                             "--jobs", "2", "--search", "flat", "--confirm", "0", "--storage", f"sqlite:///{db}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen = []
    for line in proc.stdout:  # the reader takes the lines up to trial 2's start, as `| head -n N` would, and goes
        seen.append(line)
        if line.startswith("trial 2:"):
            break
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert seen[-1].startswith("trial 2:"), "".join(seen) + err
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert "stopped by a closed output pipe; finished trials are kept. Resume with:" in err and "Traceback" not in err
    trials = load(db, "tiny").trials
    assert [t.state.name for t in trials[:3]] == ["COMPLETE", "FAIL", "COMPLETE"], [t.state.name for t in trials]
    assert trials[1].user_attrs["fail_reason"] == "interrupted: a closed output pipe in the autotune process"
    assert not _group_alive(trials[1].user_attrs["process_group"])
    assert [(t.state.name, t.user_attrs.get("retry_of")) for t in trials[3:]] == [("WAITING", 1)]  # queued again


def test_a_search_whose_output_and_errors_share_a_pipe_that_closes_exits_141(tmp_path):
    """``autotune search ... 2>&1 | head -3`` (a new user's report): the stop message itself failed on
    standard error, the same closed pipe, and the search exited 1 instead of 141."""
    from autotune.cli import EXIT_BROKEN_PIPE

    proc = subprocess.Popen([sys.executable, "-m", "autotune", "search", str(MODELS / "tiny.py"), "--trials", "2", "--samples", "256",
                             "--confirm", "0", "--storage", f"sqlite:///{tmp_path / 'both.db'}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    first = proc.stdout.readline()
    proc.stdout.close()  # `| head -1` exits
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, first
    assert first.startswith("inspecting tiny.py")


@pytest.mark.parametrize("stop, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_ctrl_c_and_sigterm_keep_finished_trials_and_print_the_resume_command(tmp_path, stop, code, name):
    """SIGTERM (kill, a SLURM time limit, a Kubernetes eviction) is handled as Ctrl-C is."""
    db = tmp_path / "int.db"
    env = {**os.environ, "TINY_FAULTS": "1:hang"}
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "search", str(MODELS / "tiny.py"), "--trials", "3", "--samples", "512",
                             "--storage", f"sqlite:///{db}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            # trial 1 runs once its process group is stored (autotune stores it as the process starts)
            if any(t.state.name == "RUNNING" and t.number == 1 and "process_group" in t.user_attrs for t in load(db, "tiny").trials):
                break
        except Exception:  # the database or the study may not exist yet
            continue
    time.sleep(5)  # let trial 1 reach its hang
    proc.send_signal(signal.SIGUSR1)  # prints the search's stacks and goes on
    time.sleep(1)
    proc.send_signal(stop)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say where it hangs: autotune prints its threads' stacks on SIGUSR1
        processes = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,etime,args"], capture_output=True, text=True).stdout
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a process left behind holds the pipes
            err = "(the pipes stayed open after the search was killed)"
        diag = "\n".join(line for line in processes.splitlines() if "python" in line)
        raise AssertionError(f"no exit within 60 s of {name}\n{diag}\n--- stderr\n{err[-6000:]}") from None
    assert proc.returncode == code, err
    assert "Resume with:" in err and "autotune worker --study-name tiny --storage" in err
    assert "most recent call first" in err.split("Resume with:")[0]  # the SIGUSR1 stacks came first
    trials = load(db, "tiny").trials
    # the queued trial stays for the resume, and the interrupted one is queued again (it measured nothing)
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "WAITING", "WAITING"]
    assert trials[3].user_attrs["retry_of"] == 1 and trials[3].system_attrs["fixed_params"] == trials[1].params
    assert trials[1].user_attrs["fail_kind"] == "interrupted"
    assert trials[1].user_attrs["fail_reason"] == f"interrupted: {name} in the autotune process"
    assert not _group_alive(trials[1].user_attrs["process_group"])  # the interrupted trial's processes are gone


def test_ctrl_c_in_a_pair_is_resumed_by_the_search_running_that_pair_again_back_to_back(tmp_path, cli):
    """helper-34: the incumbent's run of pair 0 completed before Ctrl-C and the candidate's ran after the resume, in
    another process; the race read 0.12x from that pair. The resumed search runs both runs of the pair again, in order."""
    db = tmp_path / "p.db"
    (tmp_path / "space.yaml").write_text("num_workers: {choices: [0, 2]}\n")
    (tmp_path / "known.yaml").write_text("data:\n  num_workers: 2\n")
    args = ["search", MODELS / "tiny.py", "--trials", 2, "--samples", 1024, "--space", "space.yaml", "--enqueue", "known.yaml",
            "--confirm", 1, "--confirm-share", 0.9, "--storage", f"sqlite:///{db}"]
    env = {**os.environ, "TINY_SLOW_WORKERS": "0", "TINY_FAULTS": "3:hang", "AUTOTUNE_STORAGE": ""}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *map(str, args)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
        try:  # pair 0: trial 2 (the baseline's run) completed, trial 3 (the candidate's) hangs in training
            trials = load(db, "tiny").trials
            if len(trials) > 3 and trials[2].state.name == "COMPLETE" and trials[3].state.name == "RUNNING" and "process_group" in trials[3].user_attrs:
                break
        except Exception:  # the database or the study may not exist yet
            continue
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    resume = err.split("Resume with:")[1].strip().splitlines()[0].split()
    assert resume[:2] == ["autotune", "search"], err[-2000:]  # the search races: not a worker's command
    trials = load(db, "tiny").trials
    assert [(t.user_attrs.get("pair_index"), t.user_attrs.get("confirm_of"), t.state.name) for t in trials[2:]] == [
        (0, 0, "COMPLETE"), (0, 1, "FAIL")] and trials[3].user_attrs["fail_kind"] == "interrupted"
    r = cli(*resume[1:], env={"TINY_SLOW_WORKERS": "0"}, check_rc=0)
    trials = load(db, "tiny").trials
    runs = [t for t in trials[4:] if "pair_of" in t.user_attrs]
    assert [(t.user_attrs["pair_index"], t.user_attrs["confirm_of"]) for t in runs[:2]] == [(0, 0), (0, 1)]  # pair 0 again, in order
    assert len({t.user_attrs["pair_run"] for t in runs}) == 1 != len({trials[2].user_attrs["pair_run"], runs[0].user_attrs["pair_run"]})
    from autotune.study import confirmation, load_study

    _, settings = load_study("tiny", f"sqlite:///{db}")
    (race,) = confirmation(load(db, "tiny"), settings).races
    assert race.pairs and all(2 not in p.runs for p in race.pairs) and race.pairs[0].runs == (runs[0].number, runs[1].number)
    assert r.stdout.count("pair 0: trial 1's config") == 1, r.stdout
    from autotune.report import trial_rows

    notes = {row["number"]: row["note"] for row in trial_rows(load(db, "tiny"))}
    assert notes[2].startswith("confirms #0 (pair 0 of #1") and "not counted: the pair's other run ran in a later search run" in notes[2]


def test_ctrl_c_in_stage_1_keeps_the_staged_search_s_whole_budget_and_the_same_command_finishes_it(tmp_path, cli):
    """Issue 17, item 1: the rest of stage 1, the interrupted trial and stage 2 are not lost."""
    db = tmp_path / "staged.db"
    args = ["search", str(MODELS / "tiny.py"), "--search", "staged", "--trials", "5", "--samples", "256", "--storage", f"sqlite:///{db}",
            "--confirm", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=tmp_path, env={**os.environ, "TINY_FAULTS": "1:hang"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # trial 1, the first stage-1 run, hangs once it trains
        time.sleep(1)
        try:
            if any(t.number == 1 and t.state.name == "RUNNING" and "process_group" in t.user_attrs for t in load(db, "tiny").trials):
                break
        except Exception:  # the database or the study may not exist yet
            continue
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # stage 2 is still to add: a worker cannot finish the run, the same search command does
    resume = err.split("Resume with:")[1].strip().splitlines()[0]
    assert resume.endswith("--trials 5 --confirm 0 --search staged"), resume  # the run's own flags, not only the study's
    assert resume.startswith("autotune search ") and "--trials 5" in resume, err
    trials = load(db, "tiny").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "WAITING", "WAITING"], [t.state.name for t in trials]
    assert trials[3].user_attrs["retry_of"] == 1 and trials[3].user_attrs["stage"] == "system"
    r = cli(*resume.split()[1:], check_rc=0)
    assert "continuing the staged search run" in r.stdout and "(interrupted; 0 trial(s) held back, 2 stage-2 run(s) to add)" in r.stdout
    trials = load(db, "tiny").trials
    ran = [t for t in trials if t.user_attrs.get("fail_kind") != "interrupted"]
    # (a stage-2 config whose class failed the loss with more optimizer steps is not run: PRUNED, failed_class)
    done = [t.state.name == "COMPLETE" or t.user_attrs.get("fail_kind") == "failed_class" for t in ran]
    assert len(ran) == 5 and all(done), [(t.number, t.state.name) for t in trials]
    # stage 1's two runs, then stage 2's (at full budget: "full", or sampling every knob once no system config can win)
    assert [t.user_attrs.get("stage") for t in ran[1:3]] == ["system", "system"]
    assert ran[3].user_attrs.get("stage") == "full" or "no system config left that could beat the best feasible trial" in r.stdout
    assert all("trial_samples" not in t.user_attrs for t in ran[3:])
    # a later plain run of the same command adds --trials more, as documented
    r = cli(*resume.split()[1:], "--trials", 1, check_rc=0)
    assert "continuing" not in r.stdout and len(load(db, "tiny").trials) == len(trials) + 1


def test_a_search_killed_during_the_baseline_is_continued_by_the_next_search(tmp_path, cli):
    """SIGKILL: no resume command, but the run's plan goes stale and the same command takes over its rest."""
    db = tmp_path / "killed.db"
    env = {"AUTOTUNE_HEARTBEAT_INTERVAL": "1", "AUTOTUNE_HEARTBEAT_GRACE": "3"}
    args = ["search", str(MODELS / "tiny.py"), "--trials", "3", "--samples", "256", "--storage", f"sqlite:///{db}"]
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=tmp_path, env={**os.environ, **env, "TINY_FAULTS": "0:hang"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            if any(t.number == 0 and t.state.name == "RUNNING" and "process_group" in t.user_attrs for t in load(db, "tiny").trials):
                break
        except Exception:  # the database or the study may not exist yet
            continue
    proc.kill()
    proc.communicate(timeout=60)
    time.sleep(4)  # past the grace period: the run's plan and its baseline trial are stale
    r = cli(*args[:2], "--storage", f"sqlite:///{db}", "--trials", 1, "--confirm", 1, env=env, check_rc=0)
    assert "continuing the flat search run" in r.stdout and "its process stopped sending heartbeats" in r.stdout, r.stdout
    assert "2 trial(s) held back" in r.stdout, r.stdout
    assert re.search(r"plan: \d+ trial\(s\) the stopped run left \+ up to", r.stdout), r.stdout  # not --trials 1's
    trials = load(db, "tiny").trials
    assert trials[0].state.name == "FAIL" and [t.state.name for t in trials[1:]] == ["COMPLETE"] * 3, [t.state.name for t in trials]


@pytest.mark.parametrize(
    "args, message",
    [
        (["search", "missing.py"], "model file 'missing.py' does not exist"),
        (["search", ROOT / "pyproject.toml"], "is not a Python file"),
        (["search", MODELS / "syntax_error.py"], "syntax_error.py:3: syntax error"),
        (["search", MODELS / "no_module.py"], "defines no LightningModule subclass"),
        (["search", MODELS / "two_modules.py"], "several LightningModule classes ['First', 'Second']; choose one with --model"),
        (["search", MODELS / "tiny.py", "--trials", 0], "--trials must be >= 1"),
        (["search", MODELS / "tiny.py", "--storage", "nosuchdb://x/y"], "storage 'nosuchdb://x/y': SQLAlchemy has no URL scheme 'nosuchdb'"),
        (["search", MODELS / "tiny.py", "--space", "bad_space.yaml"], "bad_space.yaml: unknown knob 'batchsize'"),
        (["search", MODELS / "tiny.py", "--loss-tolerance", 2], "--loss-tolerance must be in [0, 1)"),
        (["dashboard", "studies/none.db"], "study database 'studies/none.db' does not exist"),
        (["show", "nostudy"], "does not exist"),
        (["search", MODELS / "tiny.py", "--storage", "sqlite://"], "is an in-memory database"),
        (["search", MODELS / "tiny.py", "--storage", "sqlite:/nowhere/x.db"],
         "is not an SQLite URL: write sqlite:///nowhere/x.db for a path relative to here, or sqlite:////nowhere/x.db for an absolute one"),
        (["search", MODELS / "tiny.py", "--storage", "sqlite:///nope/x.db"], "folder 'nope' does not exist; create it first"),
        (["search", MODELS / "tiny.py", "--config", "typo.yaml"], "typo.yaml: unknown top-level key(s) ['modle']"),
        (["search", MODELS / "tiny.py", "--config", "badvalue.yaml"], 'LightningCLI refused the config: Parser key "model.lr": Expected a'),
        (["search", MODELS / "tiny.py", "--config", "negsteps.yaml"],
         "trainer.max_steps: -5 is not -1 (no limit) or an integer >= 0, which Lightning's Trainer takes; fix --config "),
        (["search", MODELS / "tiny.py", "--config", "noaccum.yaml"], "trainer.accumulate_grad_batches: 0 is not an integer >= 1"),
        (["search", MODELS / "tiny.py", "--out", "."], "is a folder; give a file path"),
        (["search", MODELS / "tiny.py", "--space", "empty.yaml"], "empty.yaml: the space names no knob"),
        (["search", "required_arg.py"], "RequiresHidden needs argument(s) ['hidden'] (no default); give them in a --config YAML under model:"),
        (["search", "exits.py"], "called sys.exit(3) when imported"),
        (["search", "no_optimizer.py"], "NoOptimizer defines no configure_optimizers() and no --config names an optimizer: give the "
         "LightningCLI config that sets optimizer: (--config config.yaml)"),
        (["dashboard", "x.db", "--port", "70000"], "--port must be in 1..65535"),
        (["search", MODELS / "tiny.py", "--num-nodes", 2, "--jobs", 2], "--jobs 2 with --num-nodes 2: a multi-node trial takes whole nodes"),
        (["search", MODELS / "tiny.py", "--num-nodes", 2, "--node-rank", 1], "autotune search runs node rank 0 of a 2-node trial"),
        (["search", MODELS / "tiny.py", "--num-nodes", 2, "--node-rank", 2], "node rank 2 is outside 0..1 for --num-nodes 2"),
        (["search", MODELS / "tiny.py", "--node-rank", 1], "--node-rank 1: autotune search is always node rank 0"),
        (["search", MODELS / "tiny.py", "--trials", "abc"], "argument --trials: expected an integer, got 'abc'"),
        (["search", MODELS / "tiny.py", "--confirm", -1], "--confirm must be >= 0"),
        (["search", MODELS / "tiny.py", "--confirm-repeats", 2], "--confirm-pairs must be >= 3 (the fewest pairs that can show"),
        (["search", MODELS / "tiny.py", "--confirm-share", 1], "--confirm-share must be a fraction of the run's wall time"),
        (["worker", "--node-rank", "abc"], "argument --node-rank: invalid int value: 'abc'"),
        (["search", MODELS / "tiny.py", "--enqueue", "missing.yaml"], "--enqueue 'missing.yaml' does not exist"),
        # checked against the study's space, before the study is created: nothing is left behind
        (["search", MODELS / "tiny.py", "--enqueue", "typo.yaml", "--enqueue", "badvalue.yaml", "--trials", 3], "badvalue.yaml: lr must be a number, got 'fast'"),
        (["search", MODELS / "tiny.py", "--sampler", "grid"], "--sampler grid: knob 'lr' is a continuous range"),
        (["search", MODELS / "tiny.py", "--sampler", "bayes"], "unknown --sampler 'bayes'"),
        (["search", MODELS / "tiny.py", "--sampler", "tpee"], "unknown --sampler 'tpee'; choose one of ['tpe', 'gp', 'cmaes', 'random', 'grid']; did you mean 'tpe'?"),
        (["search", MODELS / "tiny.py", "--search", "stagd"], "unknown --search 'stagd'; choose one of ['staged', 'flat']; did you mean 'staged'?"),
        (["search", MODELS / "tiny.py", "--search", "staged", "--num-nodes", 2], "--search staged with --num-nodes 2: a multi-node study runs flat"),
        (["search", MODELS / "tiny.py", "--pruner", "xyz"], "unknown --pruner 'xyz'"),
        (["search", MODELS / "tiny.py", "--pruner", "medain"], "unknown --pruner 'medain'; choose one of ['median', 'percentile', 'none']; did you mean 'median'?"),
        (["search", MODELS / "tiny.py", "--sampler", "TPE"], "did you mean 'tpe'?"),
        (["search", MODELS / "tiny.py", "--loss-tolerance", "5%"], "argument --loss-tolerance: expected a number, got '5%' (a fraction: 0.05 for 5%)"),
        (["search", MODELS / "tiny.py", "--objective", "thruput"], "not one of ['throughput', 'time-to-quality', 'goodput', 'pareto']; did you mean 'throughput'?"),
        (["search", MODELS / "tiny.py", "--memory-limit", -3], "--memory-limit must be > 0 GiB, got -3.0"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, cli, args, message):
    (tmp_path / "bad_space.yaml").write_text("batchsize:\n  choices: [8]\n")
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    (tmp_path / "typo.yaml").write_text("modle:\n  lr: 0.1\n")
    (tmp_path / "badvalue.yaml").write_text("model:\n  lr: fast\n")
    (tmp_path / "negsteps.yaml").write_text("trainer:\n  max_steps: -5\n")  # helper-36: searched, and exported for a CLI that refuses it
    (tmp_path / "noaccum.yaml").write_text("trainer:\n  accumulate_grad_batches: 0\n")  # searched as 1
    (tmp_path / "required_arg.py").write_text(
        "import lightning.pytorch as pl\n\nclass RequiresHidden(pl.LightningModule):\n"
        "    def __init__(self, hidden, batch_size=8):\n        super().__init__()\n"
    )
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "no_optimizer.py").write_text(  # a new user's `autotune search train.py` without --config failed only at the baseline
        "import torch\nimport lightning.pytorch as pl\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "class NoOptimizer(pl.LightningModule):\n    def __init__(self, lr: float = 0.1, batch_size: int = 8):\n"
        "        super().__init__()\n        self.batch_size = batch_size\n        self.layer = torch.nn.Linear(2, 1)\n\n"
        "    def train_dataloader(self):\n        return DataLoader(TensorDataset(torch.randn(64, 2)), batch_size=self.batch_size)\n"
    )
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("studies/*.db"))  # nothing created for bad input


CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("args, message, before_inspection", [
    (["--jobs", 0], "--jobs must be >= 1 (trials at once), got 0", True),
    (["--jobs", CORES + 1], f"--jobs {CORES + 1} with --devices 1 needs {CORES + 1} CPU cores (one per trial process); this process may "
     f"use {CORES}: lower --jobs or --devices, or set AUTOTUNE_OVERSUBSCRIBE=1", False),
    (["--devices", CORES + 1], f"--jobs 1 with --devices {CORES + 1} needs {CORES + 1} CPU cores (one per trial process); this process "
     f"may use {CORES}: give --devices {CORES} or fewer, or set AUTOTUNE_OVERSUBSCRIBE=1", False),
    (["--seed", 2**32], "--seed must be in 0..4294967295 (the seeds NumPy and Lightning accept), got 4294967296", True),
    (["--seed", -1], "--seed must be in 0..4294967295", True),
    (["--config", "trainer_typo.yaml"], "LightningCLI refused the config: Group 'trainer' does not accept option 'max_epochz'", False),
    (["--storage", "postgres://me:secret@db-host/autotune"], "SQLAlchemy has no URL scheme 'postgres'; write postgresql:// (or postgresql+psycopg://)", True),
    (["--monitor", "val_acc"], "--monitor val_acc reads like a score where higher is better, but --mode defaults to min; pass --mode max "
     "(or --mode min if lower is better)", True),
], ids=["jobs-0", "jobs-above-cores", "devices-above-cores", "seed-2**32", "seed-negative", "config-trainer-key", "storage-postgres",
        "monitor-accuracy-without-mode"])
def test_refused_input_leaves_no_study(tmp_path, cli, args, message, before_inspection):
    """Issue 16: every check that can run before the study is created does, so a refusal leaves no study
    (no database row, not even a waiting baseline) in the storage."""
    (tmp_path / "trainer_typo.yaml").write_text("trainer:\n  max_epochz: 3\n")
    db = tmp_path / "s.db"
    storage = [] if "--storage" in args else ["--storage", f"sqlite:///{db}"]
    r = cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 256, *storage, *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "secret" not in r.stderr
    assert "created study" not in r.stdout
    assert not db.exists() or optuna.get_all_study_names(f"sqlite:///{db}") == []
    assert ("inspecting" not in r.stdout) == before_inspection  # the rest need the inspected machine or classes


def test_oversubscribing_the_cores_is_allowed_with_the_variable(tmp_path, cli):
    db = tmp_path / "o.db"
    r = cli("search", MODELS / "tiny.py", "--trials", 1, "--samples", 256, "--devices", CORES + 1, "--storage", f"sqlite:///{db}",
            env={"AUTOTUNE_OVERSUBSCRIBE": "1"}, check_rc=0)
    assert f"runs {CORES + 1} processes on {CORES} CPU core(s) ($AUTOTUNE_OVERSUBSCRIBE)" in r.stdout + r.stderr
    (baseline,) = load(db, "tiny").trials
    assert baseline.state.name == "COMPLETE" and baseline.user_attrs["config"]["devices"] == CORES + 1


@pytest.mark.parametrize("variable, value, message", [
    ("AUTOTUNE_CONFIRM", "abc", "$AUTOTUNE_CONFIRM='abc' must be an integer >= 0"),
    ("AUTOTUNE_PRUNER", "xyz", "$AUTOTUNE_PRUNER='xyz' must be one of ['median', 'percentile', 'none']"),
])
def test_bad_environment_defaults_stop_before_any_trial(tmp_path, cli, variable, value, message):
    r = cli("search", MODELS / "tiny.py", "--trials", 2, env={variable: value})
    assert r.returncode == 2 and message in r.stderr and "trial 0" not in r.stdout
    assert not list(tmp_path.glob("studies/*.db"))


def test_cli_process_never_imports_torch(tmp_path):
    """Trials are the only processes that import torch and the user's code (the CLI stays CUDA-free)."""
    code = (
        "import sys; from autotune.cli import main;"
        f"rc = main(['search', {str(MODELS / 'tiny.py')!r}, '--trials', '1', '--samples', '256', '--quiet']);"
        "print('RC', rc, 'TORCH', 'torch' in sys.modules, 'LIGHTNING', 'lightning' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "RC 0 TORCH False LIGHTNING False" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "studies" / "tiny.db").is_file() and (tmp_path / "studies" / "tiny.best.yaml").is_file()


def test_failed_baseline_stops_the_search_and_is_rerun_on_resume(tmp_path, cli):
    db = tmp_path / "b.db"
    args = ["search", MODELS / "tiny.py", "--trials", 3, "--samples", 256, "--storage", f"sqlite:///{db}"]
    r = cli(*args, env={"TINY_FAULTS": "0:raise"})
    assert r.returncode == 1
    assert "the baseline trial 0 (the model's own config) failed: exception in user code: ValueError" in r.stderr
    assert "fix the model or its --config so the baseline trains, then" in r.stderr and "--trial-timeout" not in r.stderr  # no timeout
    assert [t.state.name for t in load(db, "tiny").trials] == ["FAIL"]
    cli(*args[:2], "--trials", 1, "--storage", f"sqlite:///{db}", check_rc=0)
    trials = load(db, "tiny").trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"] and trials[1].user_attrs["baseline"] is True
    assert load(db, "tiny").user_attrs["baseline"]["trial"] == 1


POSTGRES = "postgresql+psycopg://root@127.0.0.1:5432/test"


def _postgres_answers():
    try:
        import psycopg

        psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=root", connect_timeout=3).close()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _postgres_answers(), reason="no PostgreSQL server answers on 127.0.0.1:5432 (database test)")
def test_postgres_storage_and_pytorch_lightning_flavour(tmp_path, cli):
    """Any Optuna storage URL works; a model written with `pytorch_lightning` (no validation) too."""
    import uuid

    name = f"ptl-{uuid.uuid4().hex[:8]}"
    r = cli("search", MODELS / "ptl_flavour.py", "--trials", 2, "--samples", 512, "--storage", POSTGRES, "--study-name", name,
            "--out", tmp_path / "ptl.yaml", check_rc=0)
    assert f"created study '{name}'" in r.stdout
    study = optuna.load_study(study_name=name, storage=POSTGRES)
    assert len(study.trials) == 2
    assert all(t.user_attrs.get("loss_source") == "autotune/train_loss" for t in study.trials if t.state.name == "COMPLETE")
    settings = study.user_attrs["autotune"]
    assert (settings["model_class"], settings["data_class"]) == ("PtlModel", "PtlData")
    assert yaml.safe_load((tmp_path / "ptl.yaml").read_text())["data"]["batch_size"] in (16, 32, 64, 128, 256, 512)
    optuna.delete_study(study_name=name, storage=POSTGRES)  # the shared test database stays tidy


def test_config_precision_that_cpu_replaces_is_recorded_as_what_runs(tmp_path, cli):
    (tmp_path / "cfg.yaml").write_text("trainer:\n  precision: 16-mixed\nmodel:\n  lr: 0.02\nseed_everything: 7\n")
    db = tmp_path / "p16.db"
    r = cli("search", MODELS / "tiny.py", "--trials", 1, "--samples", 256, "--config", "cfg.yaml", "--storage", f"sqlite:///{db}",
            "--out", "best.yaml", check_rc=0)
    assert "runs as 'bf16-mixed' on CPU" in r.stdout
    (trial,) = load(db, "tiny").trials
    assert trial.state.name == "COMPLETE" and trial.params["precision"] == "bf16-mixed" == trial.user_attrs["precision_ran"]
    assert trial.params["lr"] == 0.02
    exported = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert exported["seed_everything"] == 7 and exported["trainer"]["precision"] == "bf16-mixed"


def test_a_plain_model_file_s_export_gives_a_run_line_that_trains_with_it_as_is(tmp_path, cli):
    """helper-32: a model file with no LightningCLI script got `python YOUR_LIGHTNING_CLI_SCRIPT.py`, and no
    doc said what to run; the line now hands the file's classes to LightningCLI, from another folder too."""
    import shutil

    (tmp_path / "proj").mkdir()
    shutil.copy(MODELS / "tiny.py", tmp_path / "proj" / "tiny.py")
    cli("search", "proj/tiny.py", "--trials", 1, "--samples", 256, "--out", "best.yaml", check_rc=0)
    header = [line for line in (tmp_path / "best.yaml").read_text().splitlines() if line.startswith("# run: ")]
    assert header == ['# run: PYTHONPATH=proj python -c "from lightning.pytorch.cli import LightningCLI; '
                      'from tiny import TinyModel, TinyData; LightningCLI(TinyModel, TinyData)" fit --config best.yaml'], header
    command = header[0].removeprefix("# run: ") + " --trainer.max_steps 3 --trainer.logger false --trainer.enable_checkpointing false"
    r = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "`Trainer.fit` stopped: `max_steps=3` reached" in r.stderr + r.stdout, r.stderr[-2000:]


def test_a_config_max_epochs_shorter_than_the_budget_does_not_cut_the_trials_short(tmp_path, cli):
    """A new user's config with max_epochs: 15 over 456 samples had cut a 20,000-sample budget to 6,840
    in every trial, silently: trials raise max_epochs to the budget's epochs, the export keeps the user's."""
    (tmp_path / "cfg.yaml").write_text("trainer:\n  max_epochs: 1\n")
    db = tmp_path / "epochs.db"
    r = cli("search", MODELS / "tiny.py", "--trials", 1, "--samples", 8192, "--config", "cfg.yaml", "--storage", f"sqlite:///{db}",
            "--out", "best.yaml", check_rc=0)
    assert "your max_epochs=1 covers 3,584 training samples in whole batches, fewer than --samples 8192: trials raise it to 3 epochs, enough for their budget" in r.stdout
    (trial,) = load(db, "tiny").trials
    assert trial.state.name == "COMPLETE" and trial.user_attrs["samples_seen"] >= 8192, trial.user_attrs.get("samples_seen")
    assert yaml.safe_load((tmp_path / "best.yaml").read_text())["trainer"]["max_epochs"] == 1


def test_each_trial_keeps_its_own_output_bounded_and_show_log_prints_it(tmp_path, cli):
    """Issue 16.11: a print() in training_step is kept for a successful trial too (its last 32 KiB)."""
    from autotune.runner import LOG_KEEP_BYTES

    db = tmp_path / "log.db"
    env = {"TINY_PRINT": "1", "TINY_FAULTS": "1:print_lots"}  # trial 1 prints 256 KiB of filler at its first step
    cli("search", MODELS / "tiny.py", "--trials", 2, "--samples", 128, "--storage", f"sqlite:///{db}", env=env, check_rc=0)
    study = load(db, "tiny")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    steps = 128 // study.trials[0].user_attrs["config"]["batch_size"]
    shown = cli("show", db, 0, "--log", check_rc=0).stdout
    assert [line for line in shown.splitlines() if line.startswith("TINY-MARKER")] == [f"TINY-MARKER trial 0 step {s}" for s in range(steps)]
    loud = cli("show", db, 1, "--log", check_rc=0).stdout
    header, body = loud.split("\n", 1)
    assert header.startswith("[autotune: the first ") and "(at most its last 32,768 are)]" in header
    assert len(body.encode()) <= LOG_KEEP_BYTES and "filler 000000" not in body  # the bound: the start is cut
    assert body.rstrip().splitlines()[-1].startswith("TINY-MARKER trial 1 step ")  # the end is kept
    assert "log" not in json.loads(cli("show", db, 1, "--format", "json", check_rc=0).stdout)[0]["user_attrs"]
    r = cli("show", db, 7, "--log", check_rc=2)
    assert r.stderr.strip() == "autotune: error: study 'tiny' has no trial 7 (its trials are 0..1)"
    r = cli("show", db, "--log", check_rc=2)
    assert "--log prints one trial's output: give its number" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("show", db, 1, "--log", "--format", "json", check_rc=2)  # not silently the plain log
    assert "has no --format json" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_race_of_other_math_stops_its_runs_at_the_baseline_s_loss_target(tmp_path, cli):
    db = tmp_path / "t.db"
    space = tmp_path / "space.yaml"  # another lr: other math, raced on the seconds to the baseline's loss
    space.write_text("lr: {choices: [0.05, 0.2]}\n")
    cli("search", MODELS / "tiny.py", "--samples", 2048, "--trials", 2, "--confirm", 1, "--confirm-samples", 2048,
        "--confirm-share", 0.9, "--space", space, "--storage", f"sqlite:///{db}", env={"AUTOTUNE_CONFIRM": "1"}, check_rc=0)
    study = load(db, "tiny")
    target = study.user_attrs["baseline"]["loss_target"]
    runs = [t for t in study.trials if "pair_of" in t.user_attrs]
    # a pair at least (a large speed-up may win at its first: autotune.paired.judge)
    assert len(runs) >= 2 and all(t.user_attrs["stop_at_target"] == target for t in runs)
    stopped = [t for t in runs if t.user_attrs.get("stopped_at_target")]
    # the candidate (4x the lr) reaches the baseline's loss + 5% long before its budget ends; every run that stopped
    # did so once it had reached the target, at a check from a quarter of its budget on; the others trained it all
    assert any(t.user_attrs["confirm_of"] != 0 for t in stopped), [t.user_attrs.get("samples_seen") for t in runs]
    assert all(t.user_attrs["samples_seen"] == 2048 for t in runs if t not in stopped)
    for t in stopped:
        assert 512 <= t.user_attrs["samples_seen"] < 2048 and t.user_attrs["target_reached"]
        assert t.user_attrs["samples_to_target"] <= t.user_attrs["samples_seen"]
