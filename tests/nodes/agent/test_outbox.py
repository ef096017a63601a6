"""The outbox: frames one by one until batching starts, then what gathered since the last write
as one batch frame, always in the order sent, within the batch limits."""

from __future__ import annotations

import asyncio

import pytest

from nodes import wire
from nodes.agent.outbox import Outbox


class Link:
    """Records what the outbox writes; can be made to fail like a closed connection."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.failure: Exception | None = None

    async def send_text(self, text: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.written.append(text)

    def frames(self) -> list[list[str]]:
        """Each write as the frame texts it carried."""
        out = []
        for text in self.written:
            frame = wire.decode(text)
            out.append(frame["frames"] if frame["type"] == "batch" else [text])
        return out


def ping(n: int) -> str:
    return wire.encode(wire.ping(float(n)))


async def settle(outbox: Outbox) -> None:
    async with asyncio.timeout(5):
        await outbox.flush()


async def test_it_writes_each_frame_by_itself_before_batching_starts() -> None:
    link = Link()
    outbox = Outbox(link.send_text)

    await outbox.send([ping(1)])
    await outbox.send([ping(2), ping(3)])

    assert link.written == [ping(1), ping(2), ping(3)]
    assert not outbox.batching


async def test_it_writes_what_gathered_in_one_turn_as_one_batch_in_order() -> None:
    link = Link()
    outbox = Outbox(link.send_text)
    outbox.start_batching()

    for n in range(5):
        await outbox.send([ping(n)])
    await settle(outbox)
    await outbox.send([ping(5)])
    await settle(outbox)
    await outbox.aclose()

    assert link.frames() == [[ping(n) for n in range(5)], [ping(5)]]
    assert link.written[1] == ping(5)  # a lone frame goes as itself, not in a batch


async def test_a_large_frame_goes_alone_between_batches() -> None:
    link = Link()
    outbox = Outbox(link.send_text)
    outbox.start_batching()
    large = wire.encode(wire.error("big", "x" * 8000))
    texts = [ping(1), *[large] * 20, ping(2)]  # 20 large ones: past MAX_BATCH_CHARS together

    for text in texts:
        await outbox.send([text])
    await settle(outbox)
    await outbox.aclose()

    written = link.frames()
    assert [text for frame in written for text in frame] == texts
    assert len(written) > 1
    for frame in written:
        assert len(frame) == 1 or sum(map(len, frame)) <= wire.MAX_BATCH_CHARS


async def test_a_batch_holds_at_most_max_batch_frames() -> None:
    link = Link()
    outbox = Outbox(link.send_text)
    outbox.start_batching()
    texts = [ping(n) for n in range(wire.MAX_BATCH_FRAMES + 10)]

    for text in texts:
        await outbox.send([text])
    await settle(outbox)
    await outbox.aclose()

    written = link.frames()
    assert [len(frame) for frame in written] == [wire.MAX_BATCH_FRAMES, 10]
    assert [text for frame in written for text in frame] == texts


async def test_once_the_connection_fails_senders_get_its_error() -> None:
    link = Link()
    link.failure = ConnectionError("closed")
    outbox = Outbox(link.send_text)
    outbox.start_batching()

    await outbox.send([ping(1)])
    await settle(outbox)  # returns: nothing more will be written
    with pytest.raises(ConnectionError, match="closed"):
        await outbox.send([ping(2)])
    await outbox.aclose()
