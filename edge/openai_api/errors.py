"""OpenAI's error envelope, and what the API answers for its own, dispatch's and runs' errors."""

from __future__ import annotations

import json
from typing import Any

from edge.dispatch import DispatchError
from edge.runs import DEADLINE_EXCEEDED, RunFailed

# The `type` OpenAI's clients expect for each status class.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
}

# Upstream answers that blame the request itself (e.g. a prompt over the context length): a 4xx,
# so clients do not retry what cannot succeed.
UPSTREAM_REJECTIONS = frozenset({400, 413, 422})


class APIError(Exception):
    """An error answered with OpenAI's envelope: `{"error": {message, type, param, code}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
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

    @classmethod
    def from_dispatch(cls, error: DispatchError) -> APIError:
        param = "model" if error.status == 404 else None
        return cls(
            error.status, error.message, code=error.code, param=param, retry_after=error.retry_after
        )

    @classmethod
    def from_run_failure(cls, failure: RunFailed) -> APIError:
        status, code = (504 if failure.code == DEADLINE_EXCEEDED else 502), failure.code
        message = failure.message
        if failure.upstream_status is not None:
            message = f"Upstream returned {failure.upstream_status}: {message}"
            if failure.upstream_status in UPSTREAM_REJECTIONS:
                status, code = 400, "upstream_rejected"
        return cls(status, message, code=code)


def invalid(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, code="invalid_request", param=param)
