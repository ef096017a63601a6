from __future__ import annotations

import asyncio
import platform

import pytest

from edge import usage as usage_module
from edge.memory import return_free_memory
from edge.usage import Usage, UsageRecorder


def make_usage(index: int) -> Usage:
    return Usage(request_id=f"r{index}", model="m", status="ok")


@pytest.fixture(autouse=True)
def fast_flushes(monkeypatch):
    monkeypatch.setattr(usage_module, "FLUSH_INTERVAL_S", 0.01)


async def wait_for(condition, timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def test_it_writes_records_in_batches_off_the_request_path():
    batches: list[list[str]] = []

    async def write(batch):
        batches.append([u.request_id for u in batch])

    recorder = UsageRecorder(write)
    for index in range(3):
        recorder.record(make_usage(index))
    assert batches == []  # record() never writes by itself

    await wait_for(lambda: batches)
    assert batches == [["r0", "r1", "r2"]]


async def test_it_writes_at_most_a_batch_at_a_time(monkeypatch):
    monkeypatch.setattr(usage_module, "MAX_BATCH", 2)
    batches: list[int] = []

    async def write(batch):
        batches.append(len(batch))

    recorder = UsageRecorder(write)
    for index in range(5):
        recorder.record(make_usage(index))
    await recorder.flush()

    assert batches == [2, 2, 1]


async def test_records_arriving_during_a_write_wait_for_the_next_flush():
    started, release = asyncio.Event(), asyncio.Event()
    batches: list[list[str]] = []

    async def slow_write(batch):
        batches.append([u.request_id for u in batch])
        started.set()
        await release.wait()

    recorder = UsageRecorder(slow_write)
    recorder.record(make_usage(0))
    flushing = asyncio.create_task(recorder.flush())
    await started.wait()
    recorder.record(make_usage(1))
    release.set()
    await flushing

    assert batches == [["r0"]]  # one snapshot, not a loop chasing new arrivals


async def test_it_keeps_serving_when_a_write_fails(caplog):
    attempts: list[int] = []

    async def broken(batch):
        attempts.append(len(batch))
        raise RuntimeError("database down")

    recorder = UsageRecorder(broken)
    recorder.record(make_usage(0))
    await recorder.flush()

    assert attempts == [1]
    assert "could not write 1 records" in caplog.text


async def test_it_drops_records_when_the_database_is_far_behind(monkeypatch):
    monkeypatch.setattr(usage_module, "MAX_PENDING", 2)

    async def write(batch):
        return None

    recorder = UsageRecorder(write)
    for index in range(3):
        recorder.record(make_usage(index))

    assert recorder.dropped == 1


async def test_it_calls_on_quiet_once_when_traffic_stops():
    quiet: list[bool] = []

    async def write(batch):
        return None

    recorder = UsageRecorder(write, on_quiet=lambda: quiet.append(True))
    recorder.record(make_usage(0))
    await wait_for(lambda: quiet)
    await asyncio.sleep(0.05)  # more quiet intervals pass: no second call

    assert quiet == [True]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_returning_free_memory_trims_the_heap_on_glibc():
    scratch = [bytearray(64 * 1024) for _ in range(256)]  # 16 MB of heap, then freed
    del scratch

    assert return_free_memory()
