"""Items on their way to one reading task, in order (plain Python, one event loop).

What ``asyncio.Queue`` does with a list of waiting getters, a count of unfinished tasks and an
event cleared at every put, one reader needs only a deque and its own waiting future for; on the
Edge and the Node this runs for every token of every stream (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A queue without bounds for one reader; any number of writers on the same loop."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
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
        return self._items.popleft()

    def drain(self) -> list[T]:
        """What has arrived, taken without waiting."""
        items = list(self._items)
        self._items.clear()
        return items
