"""Items on their way to one reader: in order, the reader woken, none lost to a cancelled read."""

from __future__ import annotations

import asyncio

from nodes.wire.mailbox import Mailbox


async def test_a_waiting_reader_is_woken_and_takes_the_items_in_order() -> None:
    mailbox: Mailbox[int] = Mailbox()
    reader = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    assert not reader.done()

    mailbox.put(1)
    mailbox.put(2)

    assert await reader == 1
    assert await mailbox.get() == 2


async def test_an_item_put_after_a_read_was_cancelled_waits_for_the_next_read() -> None:
    mailbox: Mailbox[str] = Mailbox()
    reader = asyncio.create_task(mailbox.get())
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)

    mailbox.put("done")

    assert reader.cancelled()
    assert await asyncio.wait_for(mailbox.get(), 1) == "done"


async def test_drain_takes_what_has_arrived_without_waiting() -> None:
    mailbox: Mailbox[int] = Mailbox()
    assert mailbox.drain() == []

    mailbox.put(1)
    mailbox.put(2)

    assert mailbox.drain() == [1, 2]
    assert mailbox.drain() == []
