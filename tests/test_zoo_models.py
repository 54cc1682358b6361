"""The model zoo of benchmarks/zoo.py: every zoo model file trains (one fast_dev_run each), and the
benchmark's pure pieces (the baseline YAML, the tuner's speed-up, the CPU hog's cleanup) do what they say."""

import importlib.util
import inspect
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
ZOO_FILES = sorted((BENCHMARKS / "zoo").glob("*.py"))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"zoo_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _zoo_bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return _load(BENCHMARKS / "zoo.py")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_zoo_has_at_least_eight_model_files_and_the_benchmark_lists_them_all():
    zoo = _zoo_bench()
    assert len(ZOO_FILES) >= 8
    assert {p.resolve() for p in ZOO_FILES} <= {p.resolve() for p in zoo.ZOO.values()}
    assert all(p.is_file() for p in zoo.ZOO.values())
    assert set(zoo.QUICK_MODELS) <= set(zoo.ZOO)


@pytest.mark.parametrize("path", ZOO_FILES, ids=[p.stem for p in ZOO_FILES])
def test_each_zoo_model_trains_one_fast_dev_run_at_its_defaults(path, tmp_path):
    import lightning.pytorch as pl
    import torch

    module = _load(path)
    classes = [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
    (model_cls,) = [c for c in classes if issubclass(c, pl.LightningModule)]  # autotune needs exactly one
    (data_cls,) = [c for c in classes if issubclass(c, pl.LightningDataModule)]  # benchmarks/standalone.py needs one
    data = data_cls()
    assert data.batch_size >= 1 and data.num_workers == 0  # the knobs autotune sets, as constructor arguments
    model = model_cls()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = pl.Trainer(
        fast_dev_run=True, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=data)
    assert trainer.state.finished and trainer.global_step >= 1
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))  # it trained
    if "val_loss" in trainer.callback_metrics:
        assert torch.isfinite(trainer.callback_metrics["val_loss"])


def test_the_baseline_yaml_keeps_the_export_s_paths_with_the_baseline_s_values_and_drops_what_the_tuner_added():
    zoo = _zoo_bench()
    export = {
        "trainer": {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed", "accumulate_grad_batches": 2, "benchmark": True},
        "model": {"class_path": "m.Net", "init_args": {"lr": 0.004}},
        "data": {"batch_size": 128, "num_workers": 2, "pin_memory": True},
    }
    base = {"batch_size": 32, "num_workers": 0, "lr": 0.001, "precision": "32-true", "accumulate_grad_batches": 1,
            "accelerator": "cpu", "devices": 1, "strategy": "auto"}
    got = zoo.baseline_yaml(export, base)
    assert got == {
        "model": {"class_path": "m.Net", "init_args": {"lr": 0.001}},
        "data": {"batch_size": 32, "num_workers": 0},
        "trainer": {"accelerator": "cpu", "devices": 1, "strategy": "auto", "precision": "32-true", "accumulate_grad_batches": 1},
    }
    assert export["data"]["batch_size"] == 128  # the export itself is untouched


def test_the_tuner_s_speedup_comes_from_the_header_s_measured_line_else_from_the_trials():
    zoo = _zoo_bench()
    header = ("# study: d, trial 4 of 8\n# measured: median 3,702 samples/s ... vs the baseline's median 2,000 samples/s: speedup 1.85x\n"
              "# time to the baseline's training loss (1.4): 0.5 s vs 0.9 s for the baseline = 1.80x faster")
    assert zoo.tuner_speedup(header, []) == (1.85, "export header")
    paired = "# measured: the config of trial 7 is 1.62x faster [1.41x, 1.86x] over 4 pair(s) of runs vs the baseline"
    assert zoo.tuner_speedup(paired, []) == (1.62, "export header")
    assert zoo.tuner_speedup("# measured: 1.00x: the baseline is recommended, no candidate having won", []) == (1.0, "export header")
    rows = [{"number": 0, "samples_per_sec": 100.0, "note": "baseline", "user_attrs": {"baseline": True}},
            {"number": 3, "samples_per_sec": 250.0, "note": "recommended", "user_attrs": {"baseline": False}}]
    assert zoo.tuner_speedup("# study: d, trial 3 of 4", rows) == (2.5, "show: recommended over baseline trial")
    assert zoo.tuner_speedup("# nothing", rows[:1]) == (None, "none")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie not yet reaped counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_the_cpu_hog_is_pinned_to_one_core_and_stopped_even_when_the_block_raises():
    zoo = _zoo_bench()
    with zoo.cpu_hog(False, 10) as core:
        assert core is None
    import multiprocessing

    with pytest.raises(RuntimeError, match="boom"), zoo.cpu_hog(True, 60) as core:
        (hog,) = multiprocessing.active_children()
        deadline = time.monotonic() + 10
        while os.sched_getaffinity(hog.pid) != {core} and time.monotonic() < deadline:
            time.sleep(0.05)
        pinned = os.sched_getaffinity(hog.pid)
        raise RuntimeError("boom")
    assert pinned == {core} and core == max(os.sched_getaffinity(0))
    assert not _alive(hog.pid)


def _fake_runs(zoo, monkeypatch, base_seconds, rec_seconds):
    """Replace the standalone runs: the reference run ends at loss 0.5; then each config's next time to target."""
    calls = []
    times = {"base.yaml": iter(base_seconds), "rec.yaml": iter(rec_seconds)}

    def fake(folder, model, config, samples, target=None, window=None):
        calls.append((Path(config).name, target))
        if target is None:
            return {"loss_curve_tail": 0.5, "samples": samples}
        return {"seconds_to_target": next(times[Path(config).name]), "samples_per_sec": 100.0}

    monkeypatch.setattr(zoo, "_standalone", fake)
    return calls


@pytest.mark.parametrize(
    ("base", "rec", "same", "speedup", "wrong", "verdict"),
    [
        ([2.0, 2.0, 2.0], [1.0, 1.0, 4.0], False, 2.0, False, "ok"),
        ([2.0, 2.0, 2.0], [4.0, 4.0, 1.0], False, 0.5, True, "slower: 2 of 3 pairs"),
        ([2.0, 2.0, 2.0], [None, None, 1.0], False, 2.0, True, "worse loss: missed the target in 2 of 3 runs"),
        ([2.0, 2.0, 2.0], [2.1, 2.1, 2.1], False, 2.0 / 2.1, False, "ok"),  # slower, but within the 10% margin
        ([2.0, 1.0, 2.0], [1.0, 2.0, 2.0], True, 1.0, False, "A/A: recommended the baseline's config"),
    ],
)
def test_the_paired_check_alternates_the_order_and_judges_wrong_calls_on_the_pairs(monkeypatch, tmp_path, base, rec, same, speedup,
                                                                                     wrong, verdict):
    zoo = _zoo_bench()
    calls = _fake_runs(zoo, monkeypatch, base, rec)
    got = zoo.paired_check(tmp_path, Path("m.py"), Path("base.yaml"), Path("rec.yaml"), 1000, 3, 0.10, same)
    assert calls[0] == ("base.yaml", None)  # the reference run sets the target
    assert [c[0] for c in calls[1:]] == ["base.yaml", "rec.yaml", "rec.yaml", "base.yaml", "base.yaml", "rec.yaml"]
    assert all(c[1] == pytest.approx(0.5 * 1.05) for c in calls[1:])  # the reference's loss plus the default 5% tolerance
    assert got["speedup"] == pytest.approx(speedup)
    assert (got["wrong_call"], got["verdict"]) == (wrong, verdict)
    if same:
        assert got["measured_speedup"] == pytest.approx(1.0)  # median of 2.0, 0.5, 1.0: what the A/A pairs measured


def test_the_paired_checks_target_is_the_reference_loss_plus_the_tolerance(monkeypatch, tmp_path):
    zoo = _zoo_bench()
    calls = _fake_runs(zoo, monkeypatch, [2.0], [1.0])
    got = zoo.paired_check(tmp_path, Path("m.py"), Path("base.yaml"), Path("rec.yaml"), 1000, 1, 0.10, False, tolerance=0.0)
    assert got["target_loss"] == 0.5 and calls[1][1] == 0.5 and got["tolerance"] == 0.0
    calls = _fake_runs(zoo, monkeypatch, [2.0], [1.0])
    got = zoo.paired_check(tmp_path, Path("m.py"), Path("base.yaml"), Path("rec.yaml"), 1000, 1, 0.10, False, tolerance=0.2)
    assert got["target_loss"] == pytest.approx(0.6) and calls[1][1] == pytest.approx(0.6)
