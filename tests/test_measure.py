import math

import pytest
import torch

from autotune.measure import (
    TrialFault,
    batch_length,
    classify_exception,
    classify_traceback,
    forked_rank_index,
    merge_ranks,
    steady_state_start,
    summarize,
    warmup_batches,
)


@pytest.mark.parametrize("total, accumulate, expected", [(0, 1, 0), (3, 1, 0), (5, 1, 2), (100, 1, 10), (100, 4, 12), (8, 4, 4)])
def test_warmup_batches(total, accumulate, expected):
    w = warmup_batches(total, accumulate)
    assert w == expected
    assert w % accumulate == 0 and (total - w >= 3 or w == 0)


def test_batch_length_handles_nested_batches():
    assert batch_length(torch.zeros(7, 3)) == 7
    assert batch_length((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_length({"x": [torch.zeros(4, 1)], "y": torch.zeros(4)}) == 4
    assert batch_length(["no tensors"]) is None


def _record(n=20, warmup=4, interval=0.01, wait=0.002, size=32, world=1):
    return {
        "intervals": [0.5] * warmup + [interval] * (n - warmup),
        "waits": [0.1] * warmup + [wait] * (n - warmup),
        "sizes": [size] * n,
        "losses": [float(n - i) for i in range(n)],
        "warmup": warmup,
        "window_seconds": None,
        "world_size": world,
    }


def test_summarize_excludes_warmup():
    s = summarize(_record())
    assert s["samples"] == 16 * 32
    assert s["seconds"] == pytest.approx(0.16)
    assert s["samples"] / s["seconds"] == pytest.approx(3200)
    assert s["step_time_median"] == pytest.approx(0.01)
    assert s["data_wait_fraction"] == pytest.approx(0.2)
    assert s["loss_curve"][0] == [32, 20.0] and s["loss_curve"][-1] == [640, 1.0]
    assert s["train_loss_final"] == pytest.approx(1.5)  # mean of the last tenth (2 points)


def test_summarize_uses_the_synchronised_window_when_given():
    record = _record()
    record["window_seconds"] = 0.32
    assert summarize(record)["seconds"] == 0.32


def test_merge_ranks_uses_the_slowest_rank():
    fast = {**summarize(_record(world=2)), "rank": 0, "peak_memory_gib": 1.0, "metrics": {"val_loss": 0.4}}
    slow = {**summarize(_record(interval=0.02, world=2)), "rank": 1, "peak_memory_gib": 1.5, "metrics": {"val_loss": 0.6}}
    merged = merge_ranks([fast, slow], "cpu_rss")
    assert merged["samples_per_sec"] == pytest.approx(2 * 16 * 32 / 0.32)
    assert merged["device/samples_per_sec"] == pytest.approx(merged["samples_per_sec"] / 2)
    assert merged["metrics"]["val_loss"] == pytest.approx(0.5)
    assert merged["peak_memory_gib"] == 2.5
    assert merge_ranks([fast, slow], "cuda_max_allocated")["peak_memory_gib"] == 1.5
    assert merged["loss_curve"][0] == [64, 20.0]  # global samples: 32 per rank x 2 ranks
    assert not math.isnan(merged["step_time_p90"])


def _series(warm: int, steady: int, seed: int = 0, level: float = 0.01, noise: float = 0.1):
    """Step times: an exponentially decaying warm-up of ``warm`` steps, then ``steady`` noisy steps."""
    import random

    rng = random.Random(seed)
    head = [level * (1 + 20 * 0.6**i) for i in range(warm)]
    tail = [level * (1 + noise * rng.uniform(-1, 1)) for _ in range(steady)]
    return head + tail


@pytest.mark.parametrize("warm, steady", [(8, 40), (12, 200), (3, 30), (30, 300)])
def test_steady_state_start_finds_the_end_of_a_warm_up(warm, steady):
    w = steady_state_start(_series(warm, steady))
    # the decaying head falls inside the noise after about warm/2 .. warm steps
    assert warm // 3 <= w <= warm + 10


def test_steady_state_start_on_a_flat_series_discards_only_the_first_step():
    assert steady_state_start(_series(0, 100, noise=0.05)) <= 10
    assert steady_state_start([0.01] * 40) == 1


def test_steady_state_start_keeps_a_late_spike_and_respects_step_boundaries():
    series = _series(10, 100)
    series[-5] = 1.0  # a pause near the end (garbage collection, a checkpoint): not warm-up
    w = steady_state_start(series)
    assert 3 <= w <= 20
    w4 = steady_state_start(_series(40, 160), accumulate_grad_batches=4)
    assert w4 % 4 == 0 and 8 <= w4 <= 60
    assert steady_state_start([1.0, 0.1, 0.1]) == 0  # too short to cut: keep min_steady batches
    assert steady_state_start([]) == 0


def _user_code_raises(error):
    """The formatted traceback of ``error`` raised from a frame of this (user) file."""
    import traceback

    try:
        raise error
    except BaseException:
        return traceback.format_exc()


def test_a_forked_rank_s_exception_is_classified_from_its_traceback_text():
    # what torch's ProcessRaisedException carries to the launching process: the rank's traceback as text
    from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

    text = "\n\n-- Process 1 terminated with the following error:\n" + _user_code_raises(ValueError("boom at step 3\nmore"))
    error = ProcessRaisedException(text, 1, 4242)
    kind, reason = classify_exception(error)
    assert kind == "exception"
    assert reason.startswith("exception in user code: ValueError: boom at step 3 at test_measure.py:")
    assert "more" not in reason and forked_rank_index(error) == 1
    assert forked_rank_index(ValueError("x")) is None
    # a fault autotune detected in the rank keeps its kind (its note is in the text)
    fault = _user_code_raises(TrialFault("batch_size_not_applied", "batch_size not applied: 16, not 32"))
    assert classify_traceback(fault) == ("batch_size_not_applied", "batch_size not applied: 16, not 32")
    # out of memory, by type or by Lightning's messages
    oom = 'Traceback (most recent call last):\n  File "/x/site-packages/torch/a.py", line 3, in f\n    g()\n'
    assert classify_traceback(oom + "torch.OutOfMemoryError: CUDA out of memory. Tried")[0] == "oom"
    assert classify_traceback(oom + "RuntimeError: CUDA error: out of memory") == ("oom", "out of memory: CUDA error: out of memory")
    assert classify_traceback(oom + "RuntimeError: shapes differ") == ("exception", "exception in user code: RuntimeError: shapes differ")
    # a chained exception: the last traceback is what ended the rank
    chained = _user_code_raises(KeyError("k")) + "\nDuring handling of the above exception, another exception occurred:\n\n"
    assert "TypeError: late" in classify_traceback(chained + _user_code_raises(TypeError("late")))[1]
    assert classify_traceback("not a traceback") == ("exception", "exception in a DDP rank: not a traceback")
    killed = ProcessExitedException("process 1 terminated with signal SIGKILL", 1, 4242, -9, "SIGKILL")
    assert classify_exception(killed) == ("killed", "killed: DDP rank process 1 was killed by SIGKILL")
    crashed = ProcessExitedException("process 0 terminated with exit code 3", 0, 4242, 3)
    assert classify_exception(crashed) == ("crashed", "crashed: DDP rank process 0 exited with code 3")


def test_a_dataloader_worker_s_exception_is_classified_from_what_the_worker_raised():
    # torch re-raises it in the main process as "Caught OSError in DataLoader worker process 0." with
    # the worker's traceback as text: the reason names the worker's own message and the user's line
    from torch._utils import ExceptionWrapper

    def worker_raises(error):
        try:
            raise error
        except BaseException:
            wrapper = ExceptionWrapper(where="in DataLoader worker process 1")
        try:
            wrapper.reraise()
        except BaseException as reraised:
            return reraised

    kind, reason = classify_exception(worker_raises(OSError("corrupt record 1617")))
    assert kind == "exception" and reason.startswith("exception in user code: OSError: corrupt record 1617 at test_measure.py:")
    assert reason.endswith(" (in DataLoader worker process 1)") and "Caught" not in reason
    kind, reason = classify_exception(worker_raises(KeyError("label")))  # torch wraps a KeyError's message apart
    assert kind == "exception" and "KeyError: 'label'" in reason and reason.endswith("(in DataLoader worker process 1)")
    assert classify_exception(OSError("Caught OSError in DataLoader worker process 0."))[1].endswith("process 0.")  # no traceback: as is


# --- item 14.7d: a peak is never below what a trial achieved (MFU never above 100%)


def test_merge_ranks_raises_a_peak_below_what_the_trial_achieved():
    from autotune.flops import mfu

    ranks = [{**summarize(_record(world=2)), "rank": r, "peak_memory_gib": 1.0, "metrics": {}, "flops_per_sample": 1e6,
              "peak_flops": 3.5e8 if r == 0 else None, "peak_flops_source": "cached" if r == 0 else None} for r in range(2)]
    merged = merge_ranks(ranks, "cpu_rss")
    per_device = 1e6 * merged["device/samples_per_sec"]  # 3.2e9 FLOP/s achieved, above the cached 3.5e8
    assert (merged["peak_flops"], merged["peak_flops_source"]) == (pytest.approx(per_device), "achieved")
    assert mfu(merged["flops_per_sample"], merged["samples_per_sec"], merged["peak_flops"], 2) == pytest.approx(1.0)
    ranks[0]["peak_flops"] = 1e12  # a plausible peak stays as measured
    assert (merge_ranks(ranks, "cpu_rss")["peak_flops"], merge_ranks(ranks, "cpu_rss")["peak_flops_source"]) == (1e12, "cached")


def test_a_thinned_loss_curve_keeps_the_window_means_of_the_whole_curve():
    import random

    from autotune.measure import MAX_CURVE_POINTS, summarize
    from autotune.objective import smooth_curve, time_to_target

    # a batch-1 run of 8,192 batches: a slowly falling loss under per-sample noise as large as the loss
    rng = random.Random(0)
    losses = [0.02 - 0.01 * i / 8192 + rng.gauss(0.0, 0.01) for i in range(8192)]
    raw = [(i + 1, v) for i, v in enumerate(losses)]
    record = {"intervals": [0.001] * 8192, "waits": [0.0] * 8192, "sizes": [1] * 8192, "losses": losses, "warmup": 0}
    thinned = summarize(record)["loss_curve"]
    assert len(thinned) == MAX_CURVE_POINTS and thinned[-1][0] == 8192
    whole = dict(smooth_curve(raw, 819))
    for x, y in smooth_curve(thinned, 819):  # each point within a block's worth of the whole curve's mean
        assert abs(y - whole[x]) < 0.0002, (x, y, whole[x])
    # so the time to a target is the whole curve's, not the first lucky dip of 20 picked losses
    target = 0.014
    assert time_to_target(thinned, target, 1000.0, 8192).samples == pytest.approx(time_to_target(raw, target, 1000.0, 8192).samples, rel=0.1)
