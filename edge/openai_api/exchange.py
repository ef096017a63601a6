"""One HTTP exchange on the OpenAI API: what every step of a request reads and adds to."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edge.config.schema import PrincipalToken
from edge.openai_api.responses import Headers
from edge.usage import Usage

Receive = Callable[[], Awaitable[dict[str, Any]]]


def new_request_id() -> str:
    """A request id of 24 hex digits: the time in milliseconds, then 48 random bits.

    An Edge's ids sort by the millisecond they were made, so each usage row goes in at the end
    of the request-id index instead of at a random page of it: a random id dirtied a page of
    that index per row, and the metering writer spent half its time on it (docs/benchmarks.md).
    """
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(6).hex()}"


class Exchange:
    """One request: its id, caller, the headers every answer carries and what to meter."""

    __slots__ = ("first_token_at", "headers", "principal", "request_id", "started", "usage")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.started = time.monotonic()
        self.headers: Headers = [(b"x-request-id", request_id.encode())]
        self.principal: PrincipalToken | None = None
        self.usage: Usage | None = None  # metered from the model lookup on
        self.first_token_at: float | None = None  # a stream's first chunk sent (monotonic)

    def first_token_s(self) -> float | None:
        """A stream's time to its first chunk; None when nothing was streamed."""
        return None if self.first_token_at is None else self.first_token_at - self.started
