"""The Node ack recorder: each Node's latest ack kept in memory, written in batches by revision."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from nodes import ack_log
from nodes.ack_log import NodeAckRecorder, RevisionAcks


@pytest.fixture(autouse=True)
def fast_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ack_log, "FLUSH_INTERVAL_S", 0.01)


async def wait_for(condition: Callable[[], Any], timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


class Written:
    """A write callable that keeps what it was given."""

    def __init__(self) -> None:
        self.batches: list[list[RevisionAcks]] = []

    async def __call__(self, batch: list[RevisionAcks]) -> None:
        self.batches.append(batch)

    def by_revision(self) -> list[dict[str, tuple[str, ...]]]:
        return [{acks.revision: acks.node_ids for acks in batch} for batch in self.batches]


async def test_it_writes_acks_in_one_batch_off_the_frame_path() -> None:
    written = Written()
    recorder = NodeAckRecorder(written)
    for node_id in ("node-a", "node-b", "node-c"):
        recorder.record(node_id, "sha256:1")
    assert written.batches == []  # record() never writes by itself

    await wait_for(lambda: written.batches)

    assert written.by_revision() == [{"sha256:1": ("node-a", "node-b", "node-c")}]


async def test_it_groups_a_batch_by_revision_and_keeps_each_nodes_latest_ack() -> None:
    written = Written()
    recorder = NodeAckRecorder(written)
    recorder.record("node-a", "sha256:1")
    recorder.record("node-b", "sha256:1")
    recorder.record("node-c", "sha256:2")
    recorder.record("node-a", "sha256:2")  # node-a's newer ack replaces its first

    await recorder.flush()

    assert written.by_revision() == [{"sha256:1": ("node-b",), "sha256:2": ("node-a", "node-c")}]


async def test_a_revisions_time_is_its_last_ack() -> None:
    written = Written()
    recorder = NodeAckRecorder(written)
    before = datetime.now(UTC)
    recorder.record("node-a", "sha256:1")
    recorder.record("node-b", "sha256:1")
    after = datetime.now(UTC)

    await recorder.flush()

    [[acks]] = written.batches
    assert before <= acks.acked_at <= after and acks.acked_at.tzinfo is UTC


async def test_it_writes_at_most_a_batch_of_nodes_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ack_log, "MAX_BATCH", 2)
    written = Written()
    recorder = NodeAckRecorder(written)
    for index in range(5):
        recorder.record(f"node-{index}", "sha256:1")

    await recorder.flush()

    assert [len(acks.node_ids) for [acks] in written.batches] == [2, 2, 1]


async def test_acks_arriving_during_a_write_wait_for_the_next_one() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    written = Written()

    async def slow_write(batch: list[RevisionAcks]) -> None:
        await written(batch)
        started.set()
        await release.wait()

    recorder = NodeAckRecorder(slow_write)
    recorder.record("node-a", "sha256:1")
    await started.wait()
    recorder.record("node-a", "sha256:2")
    recorder.record("node-b", "sha256:2")
    release.set()

    await wait_for(lambda: len(written.batches) == 2)
    assert written.by_revision() == [{"sha256:1": ("node-a",)}, {"sha256:2": ("node-a", "node-b")}]


async def test_a_failing_write_is_logged_and_the_recorder_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempts: list[dict[str, tuple[str, ...]]] = []

    async def down_once(batch: list[RevisionAcks]) -> None:
        attempts.append({acks.revision: acks.node_ids for acks in batch})
        if len(attempts) == 1:
            raise RuntimeError("database down")

    recorder = NodeAckRecorder(down_once)
    recorder.record("node-a", "sha256:1")
    await wait_for(lambda: attempts)
    assert "node acks: could not write 1 acks" in caplog.text

    recorder.record("node-b", "sha256:1")
    await wait_for(lambda: len(attempts) == 2)
    assert attempts == [{"sha256:1": ("node-a",)}, {"sha256:1": ("node-b",)}]
