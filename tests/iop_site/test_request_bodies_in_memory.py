"""An operator request's body stays in memory up to its limit: Django never spools it to disk."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

CHUNK = 64 * 1024


async def read_body(size: int) -> Any:
    chunks = [b"x" * CHUNK] * (size // CHUNK)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": chunks.pop(), "more_body": bool(chunks)}

    return await ASGIHandler().read_body(receive)


async def test_a_fleet_sized_refresh_body_is_read_without_a_file() -> None:
    # 6 MiB: a refresh of 3,000 nodes; Django's default would have rolled over at 2.5 MB.
    body = await read_body(6 * 1024 * 1024)

    assert not body._rolled  # a SpooledTemporaryFile that never wrote to disk
    assert len(body.read()) == 6 * 1024 * 1024


def test_the_whole_operator_limit_fits_in_memory() -> None:
    assert settings.FILE_UPLOAD_MAX_MEMORY_SIZE >= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
