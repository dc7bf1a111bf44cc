"""The machine a measurement runs on: device, dtypes, last-level cache, CPU load."""

from __future__ import annotations

import glob

import pytest
import torch

from helpers.measuring import machine

MiB = 2**20


def test_torch_dtype_names():
    assert machine.torch_dtype("fp32") is torch.float32
    assert machine.torch_dtype("bf16") is torch.bfloat16
    assert machine.torch_dtype("fp16") is torch.float16
    with pytest.raises(ValueError, match="'fp8'.*fp32, bf16, fp16"):
        machine.torch_dtype("fp8")


def test_check_device_accepts_cpu_and_names_bad_devices():
    assert machine.check_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="'tpu'"):
        machine.check_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_check_device_refuses_cuda_when_there_is_none():
    with pytest.raises(ValueError, match="no CUDA device"):
        machine.check_device("cuda")


def test_device_name_and_memory_on_cpu():
    assert machine.device_name("cpu").strip()
    assert machine.device_memory_bytes("cpu") > 2**28


def test_cpu_memory_is_what_linux_calls_available():
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f
                         if line.startswith("MemAvailable:"))  # fmt: skip
    # the two readings are a moment apart on a machine where others allocate
    assert abs(machine.device_memory_bytes("cpu") - available) < 2**30


@pytest.mark.parametrize(
    "text, expected",
    [("32768K", 32 * MiB), ("1024K\n", MiB), ("32 MiB", 32 * MiB), ("2M", 2 * MiB),
     ("524288", 524288), ("n/a", None)],
)  # fmt: skip
def test_parse_size(text, expected):
    assert machine._parse_size(text) == expected


def test_cpu_last_level_cache_is_the_largest_sysfs_cache(monkeypatch):
    monkeypatch.delenv(machine.LLC_ENV, raising=False)
    llc = machine.last_level_cache_bytes("cpu")
    assert isinstance(llc, int)
    sizes = []
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        with open(f"{index}/type") as f:
            if f.read().strip() == "Instruction":
                continue
        with open(f"{index}/size") as f:
            sizes.append(machine._parse_size(f.read()))
    if sizes:
        assert llc == max(sizes)
    else:
        assert llc > 0


@pytest.mark.parametrize("value, expected", [("8MiB", 8 * MiB), ("1GiB", 2**30),
                                             ("12345678", 12345678), ("300 MiB", 300 * MiB)])
def test_the_cache_size_can_be_overridden_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(machine.LLC_ENV, value)
    assert machine.last_level_cache_bytes("cpu") == expected


@pytest.mark.parametrize("value", ["big", "0", "-5MiB", "8 parsecs"])
def test_a_bad_cache_override_is_an_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(machine.LLC_ENV, value)
    with pytest.raises(ValueError, match=f"{machine.LLC_ENV}=.*not a cache size"):
        machine.last_level_cache_bytes("cpu")


def test_busy_cores_is_a_share_of_the_machine():
    busy = machine.busy_cores(0.05)
    assert busy is None or busy >= 0.0


def test_others_cores_subtracts_this_process_and_divides_by_the_wall_clock():
    start = machine.CpuSeconds(machine_s=10.0, own_s=1.0, wall_s=100.0)
    end = machine.CpuSeconds(machine_s=14.0, own_s=2.0, wall_s=102.0)
    assert machine.others_cores(start, end) == pytest.approx(1.5)  # (4 - 1) s over 2 s
    # this process's own time never makes the others' negative
    assert machine.others_cores(start, machine.CpuSeconds(10.5, 1.5, 101.0)) == 0.0
    assert machine.others_cores(None, end) is None
    assert machine.others_cores(end, start) is None  # no time has passed


def test_load_note_calls_a_window_under_a_tenth_of_a_second_too_short_to_judge():
    # /proc/stat counts 10 ms ticks: over 20 ms one tick is half a core.
    assert "too short to judge (20 ms timed" in machine.load_note(1.5, 2, total=2, seconds=0.02)
    assert "unreliable" in machine.load_note(1.5, 2, total=2, seconds=0.5)
    assert "quiet enough for 1 timing thread" in machine.load_note(0.5, 1, total=2, seconds=0.5)
    assert "unreliable" in machine.load_note(1.5, 2, total=2)  # no window given: judged


def test_others_load_records_its_window_and_whether_it_was_too_short():
    import time

    with machine.OthersLoad() as short:
        pass
    with machine.OthersLoad() as long:
        time.sleep(machine.MIN_LOAD_WINDOW_S * 1.5)
    if short.seconds is None:  # no /proc/stat: then no window either
        assert machine.cpu_seconds() is None and long.seconds is None
        return
    assert short.too_short and short.seconds < machine.MIN_LOAD_WINDOW_S
    assert not long.too_short and long.seconds >= machine.MIN_LOAD_WINDOW_S
