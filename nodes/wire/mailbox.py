"""Items on their way to one reading task, in order (plain Python, one event loop).

What ``asyncio.Queue`` does with a list of waiting getters, a count of unfinished tasks and an
event cleared at every put, one reader needs only a list and its own waiting future for; on the
Edge and the Node this runs for every token of every stream (docs/benchmarks.md).

A list, not a deque: an empty deque holds a block of 64 slots (about 600 bytes), and a stream's
mailbox, one per open stream, is empty most of its life. Taking the first item moves the rest,
which costs as little as a deque's up to a few hundred waiting (70 against 50 ns at 100, 1 µs at
10,000, where a run would be minutes behind its websocket).
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A queue without bounds for one reader; any number of writers on the same loop."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: T) -> None:
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():  # done: its read was cancelled
            waiter.set_result(None)

    async def get(self) -> T:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.pop(0)

    def drain(self) -> list[T]:
        """What has arrived, taken without waiting."""
        items, self._items = self._items, []
        return items
