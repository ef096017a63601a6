"""An upstream's failures as ``AdapterError``s: its non-2xx answers, their hints, its words."""

from __future__ import annotations

import email.utils
import json
import math
from datetime import UTC, datetime
from typing import Any

import aiohttp

from nodes import wire
from nodes.agent.adapters.base import AdapterError
from nodes.wire.frames import MAX_CODE_CHARS

_ERROR_BODY_LIMIT = 64 * 1024
_MAX_RETRY_AFTER_S = 86_400.0  # a day: past that, a hint is no longer a hint


async def upstream_error(response: aiohttp.ClientResponse) -> AdapterError:
    body = await response.content.read(_ERROR_BODY_LIMIT)
    envelope: Any = None
    try:
        envelope = json.loads(body)
        message = error_message(envelope)
    except ValueError:
        message = body[:500].decode(errors="replace").strip()
    message = message or response.reason or ""
    return AdapterError(
        wire.ERROR_UPSTREAM,
        wire.upstream_error_message(response.status, message),
        status=response.status,
        retry_after=_retry_after(response.headers.get("Retry-After")),
        upstream_code=error_code(envelope),
    )


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delay-seconds or an HTTP date; None if neither."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None  # not an HTTP date (those are always GMT)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S)


def error_code(envelope: Any) -> str | None:
    """The ``error.code`` of an OpenAI error envelope, when it is a short string."""
    error = envelope.get("error") if isinstance(envelope, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and 0 < len(code) <= MAX_CODE_CHARS:
        return code
    return None


def error_message(body: Any) -> str:
    """The message of an OpenAI error envelope ``{"error": {"message": ...}}`` or a near shape."""
    if not isinstance(body, dict):
        return str(body)[:500]
    error = body.get("error", body)
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if error.get(key):
                return str(error[key])
        return json.dumps(error)[:500]
    return str(error)


def describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
