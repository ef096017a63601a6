"""The queue daphne hands each connection's messages through: in order, to any number of
readers, none lost to a reader cancelled while it waited; installed for daphne's server only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import daphne.server
import pytest

from iop_site import daphne_input_queue
from iop_site.daphne_input_queue import InputQueue


async def test_messages_come_out_in_the_order_they_went_in() -> None:
    queue = InputQueue()
    for message in ({"type": "http.request"}, {"type": "http.disconnect"}):
        queue.put_nowait(message)

    assert [await queue.get(), await queue.get()] == [
        {"type": "http.request"},
        {"type": "http.disconnect"},
    ]


async def test_a_waiting_reader_is_woken_by_a_put() -> None:
    queue = InputQueue()
    reading = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not reading.done()

    queue.put_nowait("body")

    assert await asyncio.wait_for(reading, 5) == "body"


async def test_two_readers_take_one_message_each() -> None:
    queue = InputQueue()
    readers = [asyncio.ensure_future(queue.get()) for _ in range(2)]
    await asyncio.sleep(0)

    queue.put_nowait("first")
    queue.put_nowait("second")

    assert sorted(await asyncio.wait_for(asyncio.gather(*readers), 5)) == ["first", "second"]


@pytest.mark.parametrize("woken_first", [False, True])
async def test_a_cancelled_reader_leaves_the_message_to_the_next(woken_first: bool) -> None:
    queue = InputQueue()
    cancelled = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    if woken_first:
        queue.put_nowait("kept")  # woken, but cancelled before it runs
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    if not woken_first:
        queue.put_nowait("kept")

    assert cancelled.cancelled()
    assert await asyncio.wait_for(queue.get(), 5) == "kept"
    assert queue._readers == []


@pytest.fixture
def installed() -> Iterator[None]:
    before = daphne.server.asyncio
    daphne_input_queue.install()
    yield
    daphne.server.asyncio = before


def test_daphne_s_server_makes_its_queues_here_and_nothing_else_changes(installed: None) -> None:
    assert daphne.server.asyncio.Queue is InputQueue
    assert asyncio.Queue is not InputQueue
    assert daphne.server.asyncio.ensure_future is asyncio.ensure_future
    assert daphne.server.asyncio.CancelledError is asyncio.CancelledError
