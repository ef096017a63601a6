"""OpenAI's error envelope, and what the API answers for its own, dispatch's and runs' errors."""

from __future__ import annotations

import json
import math
from typing import Any

from edge.dispatch import DispatchError, NoProviderAvailable
from edge.dispatch.errors import QUEUE_RETRY_AFTER_S
from edge.ha.role import EDGE_STANDBY
from edge.runs import DEADLINE_EXCEEDED, UPSTREAM_AUTH_FAILED, RunFailed
from edge.runtime import EDGE_SHUTTING_DOWN
from nodes import wire
from nodes.sessions import REQUEST_TOO_LARGE

# The `type` OpenAI's clients expect for each status class.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
}

# Runs the Edge itself ended; any other failure is the upstream's or its Node's (502).
_RUN_FAILURE_STATUSES = {
    DEADLINE_EXCEEDED: 504,
    EDGE_SHUTTING_DOWN: 503,
    EDGE_STANDBY: 503,  # the Edge stopped leading while the run went on (edge.ha)
    REQUEST_TOO_LARGE: 413,
}

# Upstream answers that blame the request itself (e.g. a prompt over the context length): a 4xx,
# so clients do not retry what cannot succeed. The upstream's own code (e.g.
# `context_length_exceeded`) is kept, so clients recognise it.
UPSTREAM_REJECTIONS = frozenset({400, 413, 422})
UPSTREAM_REJECTED = "upstream_rejected"
RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
MAX_RETRY_AFTER_S = 60
# The gateway's own credentials were refused upstream: nothing changes until an operator acts.
NOT_RETRYABLE = frozenset({UPSTREAM_AUTH_FAILED})


class APIError(Exception):
    """An error answered with OpenAI's envelope: `{"error": {message, type, param, code}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "server_error" if self.status >= 500 else "api_error")

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def body(self) -> bytes:
        return json.dumps(self.envelope()).encode()

    def retry_headers(self) -> list[tuple[bytes, bytes]]:
        """`Retry-After` in whole seconds (rounded up) and `retry-after-ms`, which the OpenAI
        SDKs read first; never over a minute, since openai-node ignores longer hints. An error
        that a retry cannot fix says so (`x-should-retry: false`, which the SDKs obey)."""
        if self.code in NOT_RETRYABLE:
            return [(b"x-should-retry", b"false")]
        if self.retry_after is None:
            return []
        seconds = min(self.retry_after, MAX_RETRY_AFTER_S)
        return [
            (b"retry-after", str(math.ceil(seconds)).encode()),
            (b"retry-after-ms", str(round(seconds * 1000)).encode()),
        ]

    @classmethod
    def from_dispatch(cls, error: DispatchError) -> APIError:
        if isinstance(error, NoProviderAvailable) and _all_auth_failed(error):
            # Not a provider coming back soon: the gateway's credentials need fixing.
            return cls(502, error.message, code=UPSTREAM_AUTH_FAILED)
        param = {404: "model", 400: "messages"}.get(error.status)
        return cls(
            error.status, error.message, code=error.code, param=param, retry_after=error.retry_after
        )

    @classmethod
    def from_run_failure(cls, failure: RunFailed) -> APIError:
        """The caller's answer for a run that failed (docs/api.md, "Errors")."""
        upstream = failure.status
        if failure.code == UPSTREAM_AUTH_FAILED:
            return cls(502, failure.message, code=UPSTREAM_AUTH_FAILED)
        if upstream == 429:
            retry_after = failure.retry_after
            return cls(
                429,
                failure.message,
                code=RATE_LIMIT_EXCEEDED,
                retry_after=QUEUE_RETRY_AFTER_S if retry_after is None else retry_after,
            )
        if upstream in UPSTREAM_REJECTIONS:
            # The upstream's own words, so clients that parse them (context overflow) still can.
            message = wire.upstream_words(upstream, failure.message)
            return cls(400, message, code=failure.upstream_code or UPSTREAM_REJECTED)
        status = _RUN_FAILURE_STATUSES.get(failure.code, 502)
        return cls(status, failure.message, code=failure.code, retry_after=failure.retry_after)


def _all_auth_failed(error: NoProviderAvailable) -> bool:
    return bool(error.reasons) and all(why == UPSTREAM_AUTH_FAILED for _, why in error.reasons)


def invalid(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, code="invalid_request", param=param)
