import pytest

from autotune.errors import UsageError
from autotune.hardware import Hardware
from autotune.jobs import plan_slots

CPU8 = Hardware("cpu", 0, "cpu", 8, True, 16.0)
GPU4 = Hardware("gpu", 4, "H200", 16, True, 139.0)


def test_one_job_has_the_whole_machine():
    (slot,) = plan_slots(CPU8, 1, 1, list(range(8)))
    assert slot.env == {}


def test_cpu_jobs_get_disjoint_cores():
    slots = plan_slots(CPU8, 2, 3, list(range(8)))
    cores = [set(map(int, s.env["AUTOTUNE_CPUS"].split(","))) for s in slots]
    assert cores == [{0, 1}, {2, 3}, {4, 5}]
    assert slots[0].description == "job 0: cores 0-1"


def test_gpu_jobs_get_disjoint_device_groups():
    slots = plan_slots(GPU4, 2, 2, list(range(16)))
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    assert [s.env["AUTOTUNE_CPUS"] for s in slots] == [",".join(map(str, range(8))), ",".join(map(str, range(8, 16)))]


@pytest.mark.parametrize("hardware, devices, jobs, match", [
    (GPU4, 2, 3, r"--jobs 3 with --devices 2 needs 6 GPUs; this machine has 4 \(at most --jobs 2\)"),
    (CPU8, 2, 5, r"--jobs 5 with --devices 2 needs 10 CPU cores"),
    (CPU8, 1, 0, r"--jobs must be >= 1"),
])
def test_too_many_jobs(hardware, devices, jobs, match):
    with pytest.raises(UsageError, match=match):
        plan_slots(hardware, devices, jobs, list(range(hardware.cpu_count)))


CPU2 = Hardware("cpu", 0, "cpu", 2, True, 16.0)


def test_one_job_on_a_cpu_needs_a_core_per_device():
    # one rule for --jobs and --devices: jobs x devices trial processes, one core each
    with pytest.raises(UsageError, match=r"--jobs 1 with --devices 4 needs 4 CPU cores .*give --devices 2 or fewer, or set AUTOTUNE_OVERSUBSCRIBE=1"):
        plan_slots(CPU2, 4, 1, [0, 1])
    (slot,) = plan_slots(CPU2, 2, 1, [0, 1])  # DDP over both cores, as the tests run it
    assert slot.env == {}


def test_oversubscribing_shares_the_cores_in_turn():
    slots = plan_slots(CPU2, 1, 5, [0, 1], oversubscribe=True)
    assert [s.env["AUTOTUNE_CPUS"] for s in slots] == ["0", "1", "0", "1", "0"]
    (slot,) = plan_slots(CPU2, 4, 1, [0, 1], oversubscribe=True)
    assert slot.env == {}


def test_gpu_jobs_are_not_limited_by_the_cores():
    slots = plan_slots(GPU4, 1, 4, [0, 1])
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "2", "3"]


@pytest.mark.parametrize("value, allowed", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_oversubscribe_reads_its_variable(monkeypatch, value, allowed):
    from autotune.jobs import ENV_OVERSUBSCRIBE, oversubscribe

    if value is None:
        monkeypatch.delenv(ENV_OVERSUBSCRIBE, raising=False)
    else:
        monkeypatch.setenv(ENV_OVERSUBSCRIBE, value)
    assert oversubscribe() is allowed
