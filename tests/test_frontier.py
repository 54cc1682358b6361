"""The OOM frontier rules (pure)."""

from autotune.frontier import MemoryEvent, event_of, frontier_summary, predicted_oom


def _c(batch, precision="32-true", devices=1, strategy="auto"):
    return {"batch_size": batch, "precision": precision, "devices": devices, "num_nodes": 1, "strategy": strategy}


OOM_256 = MemoryEvent(256, "32-true", 1, "auto", oom=True, trial=4)
FIT_64 = MemoryEvent(64, "32-true", 1, "auto", oom=False, trial=2)


def test_an_oom_makes_larger_batches_and_wider_dtypes_infeasible():
    events = [OOM_256, FIT_64]
    assert predicted_oom(_c(256), events).startswith("predicted OOM: trial 4 ran out of memory at per-device batch 256 with 32-true")
    assert predicted_oom(_c(512), events) is not None
    assert predicted_oom(_c(512, "64-true"), events) is not None  # wider dtype
    assert predicted_oom(_c(128), events) is None  # smaller batch: unknown, so run it
    assert predicted_oom(_c(512, "bf16-mixed"), events) is None  # narrower dtype may fit
    assert predicted_oom(_c(512, devices=2, strategy="ddp"), events) is None  # other devices: other memory per device


def test_events_come_from_finished_trials_only():
    config = _c(256)
    assert event_of(4, "FAIL", {"config": config, "fail_kind": "oom"}) == MemoryEvent(256, "32-true", 1, "auto", True, 4)
    assert event_of(5, "COMPLETE", {"config": config}).oom is False
    assert event_of(6, "FAIL", {"config": config, "fail_kind": "exception"}) is None
    assert event_of(7, "PRUNED", {"config": config}) is None and event_of(8, "FAIL", {}) is None


def test_frontier_summary_per_setting():
    events = [OOM_256, FIT_64, MemoryEvent(128, "32-true", 1, "auto", False), MemoryEvent(512, "32-true", 1, "auto", True)]
    assert frontier_summary(events) == [{"devices": 1, "strategy": "auto", "precision": "32-true", "fits_up_to": 128, "oom_from": 256}]
