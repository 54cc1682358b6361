"""The measurement callback's collaborators, fed fake clocks and tensors, and one real short fit."""

import json
import os
import time
import types

import pytest
import torch

from autotune.callback import (
    LossLog,
    check_batch_size,
    check_num_workers,
    measure_callback_class,
)
from autotune.flop_probe import FlopProbe
from autotune.host_load import HOST_LOAD_KEYS
from autotune.measure import TrialFault
from autotune.noise import noise_terms
from autotune.noise_probe import GradientNoiseProbe
from autotune.progress import (
    PROGRESS_FILE_ENV,
    ProgressWriter,
    read_progress,
    write_progress,
)
from autotune.rank_report import read_rank_reports, write_rank_report
from autotune.step_timer import StepTimer


def _run(timer, starts_ends, synced=None):
    """Feed ``timer`` batches as ``(start, end)`` host times; returns whether each was the last."""
    lasts = []
    for i, (start, end) in enumerate(starts_ends):
        timer.batch_start(start, 4)
        lasts.append(timer.batch_end(end, True if synced is None else synced[i]))
    return lasts


def test_step_timer_records_waits_intervals_and_ends_the_window_at_the_last_planned_batch():
    wall = iter([1000.0, 1001.0])
    timer = StepTimer(total_batches=3, accumulate_grad_batches=1, wall_clock=lambda: next(wall))
    timer.start(10.0)
    assert _run(timer, [(10.5, 11.0), (11.25, 12.0), (12.0, 12.5)]) == [False, False, True]
    assert timer.waits == [0.5, 0.25, 0.0] and timer.intervals == [1.0, 1.0, 0.5] and timer.sizes == [4, 4, 4]
    assert timer.ended and timer.first_batch_time == 1000.0 and timer.train_end_time == 1001.0
    timer.cut_warmup()
    assert timer.warmup == 0 and timer.window_seconds == pytest.approx(2.5)  # a run this short is measured whole


def test_step_timer_cuts_the_warm_up_and_the_window_starts_at_a_synchronised_step():
    intervals = [1.0, 0.5] + [0.1] * 38
    timer = StepTimer(total_batches=40, accumulate_grad_batches=1)
    timer.start(0.0)
    ends, now = [], 0.0
    for x in intervals:
        ends.append((now, now + x))
        now += x
    synced = [i % 4 == 3 for i in range(40)]  # as on CUDA: only every 4th batch ends synchronised
    _run(timer, ends, synced)
    timer.cut_warmup()
    assert timer.warmup == 4  # MSER cuts 2 batches; the next synchronised end is batch 4's
    assert timer.window_seconds == pytest.approx(sum(intervals[4:]))


def test_step_timer_sync_points_fall_on_optimizer_steps_and_on_the_last_batch():
    timer = StepTimer(total_batches=410, accumulate_grad_batches=4)
    assert timer.sync_every == 12
    timer.start(0.0)
    due = []
    for i in range(410):
        due.append(timer.sync_due())
        timer.batch_start(float(i), 1)
        timer.batch_end(i + 1.0, True)
    assert [i + 1 for i, d in enumerate(due) if d][:3] == [12, 24, 36] and due[-1]


def test_step_timer_stopped_early_ends_where_told_and_the_preview_rate_waits_for_the_warm_up():
    timer = StepTimer(total_batches=100, accumulate_grad_batches=1)
    assert timer.warmup == 10
    timer.start(0.0)
    _run(timer, [(i, i + 1.0) for i in range(12)])
    assert timer.steady_rate(10, 10.0, 2) is None
    assert timer.steady_rate(12, 12.0, 2) == pytest.approx(2 * 4 * 2 / 2.0)  # batches 10-11, 4 samples each, 2 ranks
    assert not timer.ended
    timer.end(12.0)
    timer.cut_warmup()
    assert timer.ended and timer.window_seconds == pytest.approx(12.0 - timer.ends[timer.warmup - 1])


def test_progress_file_round_trip_and_missing_or_bad_files(tmp_path):
    path = tmp_path / "progress-3.json"
    assert read_progress(str(path)) is None and read_progress(None) is None
    preview = {"batches": 4, "planned": 10, "samples": 64, "samples_per_sec": None, "loss": 0.5}
    assert write_progress(str(path), preview)
    assert read_progress(str(path)) == preview and not (tmp_path / "progress-3.json.tmp").exists()
    path.write_text("{half")
    assert read_progress(str(path)) is None
    path.write_text("[1, 2]")
    assert read_progress(str(path)) is None
    assert not write_progress(str(tmp_path / "no" / "such" / "folder.json"), preview)


def test_progress_writer_writes_twice_a_second_and_always_the_last(tmp_path):
    path = tmp_path / "p.json"
    writer = ProgressWriter.from_env({PROGRESS_FILE_ENV: str(path)})
    assert writer.due(1.0)
    writer.write(1.0, {"batches": 1, "planned": 3, "samples": 8, "samples_per_sec": None})
    assert not writer.due(1.2) and writer.due(1.2, last=True) and writer.due(1.6)
    assert read_progress(str(path))["batches"] == 1
    assert not ProgressWriter.from_env({}).due(5.0, last=True)


def test_rank_reports_round_trip_keep_the_first_error_and_skip_partial_files(tmp_path):
    assert write_rank_report(str(tmp_path), 1, {"rank": 1, "ok": True, "samples": torch.tensor(3), "device": torch.device("cpu")})
    assert write_rank_report(str(tmp_path), 0, {"rank": 0, "ok": False, "error": {"kind": "oom", "message": "m"}})
    assert not write_rank_report(str(tmp_path), 0, {"rank": 0, "ok": True}, overwrite=False)
    (tmp_path / "rank2.json").write_text("{")
    reports = read_rank_reports(tmp_path)
    assert [r["rank"] for r in reports] == [0, 1] and reports[0]["error"]["kind"] == "oom"
    assert reports[1]["samples"] == 3.0 and reports[1]["device"] == "cpu"


def test_loss_log_unscales_checks_finiteness_and_averages_the_recent_losses():
    log = LossLog(accumulate_grad_batches=2, check_every=3)
    log.add(torch.tensor(1.0))
    log.add({"loss": torch.tensor(2.0)})
    log.add(None)
    assert log.values() == [2.0, 4.0, None] and log.recent() == 3.0 and log.recent(1) is None
    assert log.check_due(3) and not log.check_due(4)
    log.check_finite([8, 8, 8], 2)
    log.add(torch.tensor(float("nan")))
    with pytest.raises(TrialFault, match=r"non-finite loss \(nan\) at batch 3 after 64 samples") as caught:
        log.check_finite([8, 8, 8, 8], 2)
    assert caught.value.kind == "nonfinite_loss"


def test_a_loss_check_reads_only_the_batches_since_the_last_and_keeps_them_as_floats():
    log = LossLog(accumulate_grad_batches=1, check_every=16)
    for b in range(32):
        log.add(torch.tensor(float(b)))
    log.check_finite([1] * 32, 1)
    assert all(type(v) is float for v in log._losses)  # read once (one device sync), never stacked again
    log._losses[3] = torch.tensor(float("nan"))  # an already-checked batch is not read again by the next check
    for b in range(32, 48):
        log.add(torch.tensor(float("inf") if b == 40 else float(b)))
    with pytest.raises(TrialFault, match=r"at batch 40 after 41 samples"):
        log.check_finite([1] * 48, 1)
    assert log.tail(3) == [45.0, 46.0, 47.0] and log.recent(2) == 46.5


def test_loss_log_reads_the_monitor_s_logged_values_when_training_step_returns_no_loss():
    # manual optimization: training_step returns nothing and logs its losses (callback_metrics)
    log = LossLog(accumulate_grad_batches=1, logged_name="g_loss")
    first, second = torch.tensor(0.9), torch.tensor(0.7)
    log.add(None, {})  # the first batch: nothing logged yet
    log.add(None, {"g_loss": first, "d_loss": torch.tensor(5.0)})
    log.add(None, {"g_loss": first})  # the same tensor again (a value logged per epoch): stale, not kept twice
    log.add(None, {"g_loss_step": second, "g_loss": first})  # on_step and on_epoch: the step's value
    log.add(torch.tensor(0.5), {"g_loss": torch.tensor(9.0)})  # a returned loss comes first
    assert log.values() == pytest.approx([None, 0.9, None, 0.7, 0.5], nan_ok=True)
    # a validation metric is never read as a per-batch training loss, nor is anything without a name
    for name in ("val_loss", "valid_loss", "test_acc", None):
        other = LossLog(1, logged_name=name)
        other.add(None, {"val_loss": torch.tensor(1.0), "valid_loss": torch.tensor(1.0), "test_acc": torch.tensor(1.0)})
        assert other.values() == [None]


def test_batch_and_worker_checks():
    check_batch_size(32, 32, None)
    check_batch_size(None, 32, None)  # a batch autotune cannot measure is not checked
    loader = types.SimpleNamespace(dataset=list(range(10)), num_workers=2)
    with pytest.raises(TrialFault, match=r"had 10 samples, the trial asked for 32: the training data ran out") as caught:
        check_batch_size(10, 32, loader)
    assert caught.value.kind == "batch_size_not_applied" and caught.value.details == {"epoch_samples": 10}
    with pytest.raises(TrialFault, match=r"(?m)had 16 samples, the trial asked for 32$") as caught:  # (?m): pytest matches the kind note too
        check_batch_size(16, 32, types.SimpleNamespace())
    assert caught.value.details == {}
    # an iterable dataset (no length) from a DataLoader with the trial's batch size: the data ran out (14.7a)
    with pytest.raises(TrialFault, match=r"(?m)an epoch has 50 samples per device\)$") as caught:
        check_batch_size(50, 64, types.SimpleNamespace(dataset=iter(()), batch_size=64))
    assert caught.value.details == {"epoch_samples": 50}
    with pytest.raises(TrialFault, match=r"(?m)asked for 64$") as caught:  # the DataLoader has another batch size: not applied
        check_batch_size(16, 64, types.SimpleNamespace(dataset=iter(()), batch_size=16))
    assert caught.value.details == {}
    check_num_workers(loader, 2)
    check_num_workers(loader, None)
    with pytest.raises(TrialFault, match="the train DataLoader has 2, the trial asked for 4") as caught:
        check_num_workers(loader, 4)
    assert caught.value.kind == "num_workers_not_applied"


def test_flop_probe_counts_a_matmul_and_never_fails():
    probe = FlopProbe()
    probe.start()
    torch.ones(4, 8) @ torch.ones(8, 2)
    probe.stop()
    probe.stop()  # idempotent (on_exception after the first batch)
    assert probe.first_batch_flops == 2 * 4 * 8 * 2
    trainer = types.SimpleNamespace(global_rank=1)
    assert probe.report(trainer, 4, "32-true") == {"flops_per_sample": 32.0, "peak_flops": None, "peak_flops_source": None}
    assert FlopProbe().report(trainer, 4, "32-true")["flops_per_sample"] is None


class _Params(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))

    def set_grad(self, values):
        self.w.grad = torch.tensor(values)


def _trainer(accumulate=1):
    module = types.SimpleNamespace(automatic_optimization=True)
    return types.SimpleNamespace(lightning_module=module, precision_plugin=types.SimpleNamespace(), accumulate=accumulate)


def test_noise_probe_consecutive_steps_pairs_two_steps_against_their_mean():
    probe = GradientNoiseProbe(batch_size=8, accumulate_grad_batches=1, total_batches=32)
    probe.attach(_trainer(), world_size=1)
    assert probe.method == "consecutive_steps" and probe.every == 2
    module = _Params()
    grads = [[1.0, 0.0, 0.0], [9.0, 9.0, 9.0], [1.0, 2.0, 2.0], [3.0, 0.0, 4.0]]
    for g in grads:  # step 0 is never measured; step 2 opens a pair, step 3 closes it
        module.set_grad(g)
        probe.before_optimizer_step(None, module)
    a, b = torch.tensor(grads[2]), torch.tensor(grads[3])
    grad_sq, trace = noise_terms(float((a.square().sum() + b.square().sum()) / 2), 8, float((a + b).square().sum() / 4), 16)
    report = probe.report()
    assert report["method"] == "consecutive_steps" and report["measurements"] == 1
    assert report["grad_sq"] == pytest.approx(grad_sq) and report["trace"] == pytest.approx(trace)


def test_noise_probe_micro_batches_and_no_measurement_under_manual_optimization():
    probe = GradientNoiseProbe(batch_size=4, accumulate_grad_batches=2, total_batches=4)
    trainer = _trainer()
    probe.attach(trainer, world_size=1)
    assert probe.method == "micro_batches" and probe.every == 1
    module = _Params()
    module.set_grad([1.0, 1.0, 1.0])
    probe.before_optimizer_step(trainer, module)  # step 0: not measured
    for accumulated in ([0.5, 0.0, 0.0], [1.0, 1.0, 0.0]):  # gradients of loss/2: micro-batches (1,0,0) and (1,2,0)
        module.set_grad(accumulated)
        probe.after_backward(trainer, module)
    probe.before_optimizer_step(trainer, module)
    expected = noise_terms((1.0 + 5.0) / 2, 4, 2.0, 8)
    report = probe.report()
    assert report["measurements"] == 1 and report["grad_sq"] == pytest.approx(expected[0]) and report["trace"] == pytest.approx(expected[1])
    manual = GradientNoiseProbe(batch_size=4, accumulate_grad_batches=1, total_batches=4)
    manual.attach(types.SimpleNamespace(lightning_module=types.SimpleNamespace(automatic_optimization=False)), world_size=1)
    manual.before_optimizer_step(None, module)
    assert manual.method is None and manual.report() is None


def test_noise_probe_skips_steps_without_gradients_and_pairs_only_the_same_parameters():
    probe = GradientNoiseProbe(batch_size=8, accumulate_grad_batches=1, total_batches=32)
    probe.attach(_trainer(), world_size=1)
    module = _Params()
    for g in ([1.0, 0.0, 0.0], None, [1.0, 2.0, 2.0], None, [3.0, 0.0, 4.0]):
        module.w.grad = None if g is None else torch.tensor(g)  # None: training_step returned None, no backward
        probe.before_optimizer_step(None, module)
    # step 2 (measured) opens a pair, the step without gradients waits, step 4 closes it
    a, b = torch.tensor([1.0, 2.0, 2.0]), torch.tensor([3.0, 0.0, 4.0])
    grad_sq, trace = noise_terms(float((a.square().sum() + b.square().sum()) / 2), 8, float((a + b).square().sum() / 4), 16)
    report = probe.report()
    assert report["measurements"] == 1 and report["grad_sq"] == pytest.approx(grad_sq) and report["trace"] == pytest.approx(trace)

    deferred = GradientNoiseProbe(batch_size=8, accumulate_grad_batches=1, total_batches=32)
    deferred.attach(_trainer(), world_size=1)
    for g in ([1.0, 0.0, 0.0], [1.0, 1.0, 1.0], None, [1.0, 2.0, 2.0], [3.0, 0.0, 4.0]):
        module.w.grad = None if g is None else torch.tensor(g)
        deferred.before_optimizer_step(None, module)
    # the measured step 2 had no gradients: steps 3 and 4 are measured instead
    assert deferred.report()["grad_sq"] == pytest.approx(grad_sq)

    two = torch.nn.Linear(2, 1)  # a pair whose second step has gradients for other parameters starts again
    mixed = GradientNoiseProbe(batch_size=8, accumulate_grad_batches=1, total_batches=16)
    mixed.attach(_trainer(), world_size=1)
    for weight, bias in ((None, None), ([[1.0, 0.0]], [1.0]), (None, [2.0]), ([[0.0, 1.0]], None)):
        two.weight.grad = None if weight is None else torch.tensor(weight)
        two.bias.grad = None if bias is None else torch.tensor(bias)
        mixed.before_optimizer_step(None, two)
    assert mixed.report() is None  # no two consecutive steps had gradients for the same parameters

    never = GradientNoiseProbe(batch_size=8, accumulate_grad_batches=1, total_batches=8)
    never.attach(_trainer(), world_size=1)
    module.w.grad = None
    for _ in range(8):  # every training_step returned None
        never.before_optimizer_step(None, module)
    assert never.method == "consecutive_steps" and never.report() is None


def test_noise_probe_drops_a_micro_batch_measurement_when_a_parameter_first_gets_a_gradient():
    probe = GradientNoiseProbe(batch_size=4, accumulate_grad_batches=2, total_batches=4)
    trainer = _trainer()
    probe.attach(trainer, world_size=1)
    two = torch.nn.Linear(2, 1)
    probe.before_optimizer_step(trainer, two)  # step 0: not measured
    two.weight.grad, two.bias.grad = torch.tensor([[1.0, 0.0]]), None
    probe.after_backward(trainer, two)
    two.bias.grad = torch.tensor([1.0])  # the second micro-batch reaches the bias too
    probe.after_backward(trainer, two)
    probe.before_optimizer_step(trainer, two)
    assert probe.report() is None


def _skipping_fit(tmp_path, skip):
    """A short real fit whose ``training_step`` returns None on the batches ``skip`` picks; the rank report."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Skipping(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            return None if skip(batch_idx) else loss  # None: Lightning skips this batch's backward and step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    tmp_path.mkdir()
    data = TensorDataset(torch.randn(512, 4), torch.randn(512, 1))
    callback = measure_callback_class(pl)(batch_size=8, num_workers=0, total_batches=40, accumulate_grad_batches=1,
                                          out_dir=str(tmp_path), static={"config": {"precision": "32-true"}})
    trainer = pl.Trainer(callbacks=[callback], accelerator="cpu", max_epochs=-1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Skipping(), DataLoader(data, batch_size=8))
    (report,) = read_rank_reports(tmp_path)
    return report


@pytest.mark.filterwarnings("ignore:.*training_step. returned .None.")
def test_a_training_step_that_returns_none_is_trained_and_measured_without_it(tmp_path):
    some = _skipping_fit(tmp_path / "some", lambda batch_idx: batch_idx % 3 == 1)
    assert some["ok"] and some["batches"] == 40
    assert some["noise"]["method"] == "consecutive_steps" and some["noise"]["measurements"] >= 8
    every = _skipping_fit(tmp_path / "every", lambda batch_idx: True)
    assert every["ok"] and every["batches"] == 40 and every["samples"] > 0
    assert every["noise"] is None  # no step had gradients: the gradient noise was not measured


def test_the_callback_measures_a_short_cpu_fit_and_writes_a_complete_report(tmp_path, monkeypatch):
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monkeypatch.setenv(PROGRESS_FILE_ENV, str(tmp_path / "progress.json"))
    data = TensorDataset(torch.randn(512, 4), torch.randn(512, 1))
    callback = measure_callback_class(pl)(batch_size=8, num_workers=0, total_batches=40, accumulate_grad_batches=1,
                                          out_dir=str(tmp_path), static={"config": {"precision": "32-true"}})
    trainer = pl.Trainer(callbacks=[callback], accelerator="cpu", max_epochs=-1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Net(), DataLoader(data, batch_size=8))
    (report,) = read_rank_reports(tmp_path)
    assert report["ok"] and report["rank"] == 0 and report["batches"] == 40 and report["samples_seen"] == 320
    assert report["samples"] > 0 and report["seconds"] > 0 and report["lr_ran"] == 0.1 and report["first_batch_size"] == 8
    assert report["noise"]["method"] == "consecutive_steps" and report["flops_per_sample"] > 0
    assert report["peak_memory_kind"] == "cpu_rss" and report["applied"]["parameters"] == 5
    assert len(report["loss_curve"]) == 40 and report["first_batch_time"] <= report["train_end_time"]
    assert set(report["host"]) == set(HOST_LOAD_KEYS) and report["host"]["host_cpus"] == os.cpu_count()
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["batches"] == progress["planned"] == 40 and progress["samples"] == 320 and progress["loss"] is not None


def test_a_rank_that_fails_in_training_keeps_the_host_load_up_to_its_failure(tmp_path):
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Failing(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            time.sleep(0.2)  # a window long enough for the CPU shares (autotune.host_load.MIN_WINDOW_JIFFIES)
            if batch_idx == 3:
                raise ValueError("boom")
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    callback = measure_callback_class(pl)(batch_size=8, num_workers=0, total_batches=8, accumulate_grad_batches=1,
                                          out_dir=str(tmp_path), static={"config": {"precision": "32-true"}})
    trainer = pl.Trainer(callbacks=[callback], accelerator="cpu", max_epochs=-1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match="boom"):
        trainer.fit(Failing(), DataLoader(data, batch_size=8))
    (report,) = read_rank_reports(tmp_path)
    assert not report["ok"] and report["error"]["kind"] == "exception"
    host = report["host"]
    assert set(host) == set(HOST_LOAD_KEYS) and host["host_load"] >= 0 and host["gpu_other_processes"] is None
    if os.path.exists("/proc/stat"):  # Linux: 0.8 s of window on this process's CPUs
        assert 0.0 <= host["steal_fraction"] <= 1.0 and 0.0 <= host["other_cpu_fraction"] <= 1.0


def test_window_loss_is_the_smoothed_curve_s_last_point():
    from autotune.callback import window_loss
    from autotune.objective import smooth_curve

    sizes = [8] * 10
    losses = [2.0, 1.9, 1.7, None, 1.5, 1.4, float("nan"), 1.2, 1.1, 1.0]
    curve = [(8 * (i + 1), v) for i, v in enumerate(losses) if v is not None]
    assert window_loss(lambda n: losses[-n:], sizes, 24) == pytest.approx(smooth_curve(curve, 24)[-1][1])  # 1.2, 1.1, 1.0
    assert window_loss(lambda n: losses[-n:], sizes, 30) == pytest.approx((1.2 + 1.1 + 1.0) / 3)  # the NaN batch is skipped
    assert window_loss(lambda n: losses[-n:], sizes, 81) is None  # fewer samples than the window so far
    assert window_loss(lambda n: [None] * n, sizes, 16) is None


@pytest.mark.parametrize("target, stops", [(0.05, True), (-1.0, False)])
def test_a_run_given_a_loss_target_stops_once_its_smoothed_loss_reaches_it(tmp_path, target, stops):
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(4096, 4)
    data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))  # learnable: the loss falls to ~0
    callback = measure_callback_class(pl)(batch_size=8, num_workers=0, total_batches=400, accumulate_grad_batches=1,
                                          out_dir=str(tmp_path), static={"config": {"precision": "32-true"}},
                                          stop_at_loss=(target, 320.0))
    trainer = pl.Trainer(callbacks=[callback], accelerator="cpu", max_epochs=-1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Net(), DataLoader(data, batch_size=8))
    (report,) = read_rank_reports(tmp_path)
    assert report["ok"] and report["stopped_at_target"] is stops
    if stops:  # checked every 16 batches, from a quarter of the run on; the window's mean is at the target
        assert 100 <= report["batches"] < 400 and report["batches"] % 16 == 0
        tail = [loss for _, loss in report["loss_curve"][-40:]]
        assert sum(tail) / len(tail) <= target
        assert report["samples"] > 0 and report["seconds"] > 0  # measured up to the stop
    else:
        assert report["batches"] == 400
