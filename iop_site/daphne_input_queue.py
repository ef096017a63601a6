"""Each connection's messages reach its ASGI application through a lighter queue than daphne's.

Daphne makes an ``asyncio.Queue`` for every request and websocket it serves, and asks of it only
``put_nowait`` (Twisted's side) and ``get`` (the application's ``receive``). An empty
``asyncio.Queue`` holds four deques (items, getters, putters, its ``Event``'s waiters) and two
dicts: 3.3 KB, against 0.2 KB here, held for as long as the request runs: about 5 MB at 2,000
concurrent streams (docs/benchmarks.md). ``daphne.server`` is given an ``asyncio`` whose
``Queue`` is this one; everything else in it, and everyone else's ``asyncio``, is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import ModuleType
from typing import Any


class InputQueue:
    """Without bounds; any number of readers, each woken at every put to look again, so a
    reader cancelled after it was woken leaves the item to the next.

    The items are a list: a connection sees a handful (its request's body, its disconnect; a
    websocket's frames are read as they come), and an empty deque would hold 600 bytes."""

    __slots__ = ("_items", "_readers")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._readers: list[asyncio.Future[None]] = []

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        if self._readers:
            readers, self._readers = self._readers, []
            for reader in readers:
                if not reader.done():
                    reader.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            reader = asyncio.get_running_loop().create_future()
            self._readers.append(reader)
            try:
                await reader
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):  # a put had taken it off already
                    self._readers.remove(reader)
                raise
        return self._items.pop(0)


class _AsyncioWithInputQueue(ModuleType):
    """``asyncio`` as daphne's server module sees it: the same but for ``Queue``."""

    Queue = InputQueue

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


def install() -> None:
    import daphne.server

    daphne.server.asyncio = _AsyncioWithInputQueue("asyncio")
