"""What the caller is told for a failed run: status, code, message and retry hints."""

from __future__ import annotations

import pytest

from edge.openai_api.errors import APIError
from edge.runs import RunFailed
from nodes import wire


@pytest.mark.parametrize(
    ("failure", "status", "code", "message"),
    [
        (
            RunFailed("upstream_error", wire.upstream_error_message(400, "too long"), 400),
            400,
            "upstream_rejected",
            "too long",
        ),
        (
            RunFailed(
                "upstream_error",
                wire.upstream_error_message(400, "max context is 4096"),
                400,
                upstream_code="context_length_exceeded",
            ),
            400,
            "context_length_exceeded",
            "max context is 4096",
        ),
        (RunFailed("request_too_large", "the run does not fit"), 413, "request_too_large", None),
        (RunFailed("deadline_exceeded", "too slow"), 504, "deadline_exceeded", None),
        (
            RunFailed("upstream_error", wire.upstream_error_message(503, "busy"), 503),
            502,
            "upstream_error",
            "upstream HTTP 503: busy",
        ),
    ],
)
def test_it_maps_a_run_failure(
    failure: RunFailed, status: int, code: str, message: str | None
) -> None:
    error = APIError.from_run_failure(failure)

    assert (error.status, error.code) == (status, code)
    assert error.message == (failure.message if message is None else message)


def test_it_sends_an_upstream_retry_hint_in_seconds_and_milliseconds() -> None:
    failure = RunFailed("upstream_error", "slow down", 429, retry_after=2.5)

    error = APIError.from_run_failure(failure)

    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    assert error.retry_headers() == [(b"retry-after", b"3"), (b"retry-after-ms", b"2500")]


def test_it_never_hints_a_retry_further_than_a_minute_away() -> None:
    # openai-node ignores a longer Retry-After and retries at once instead.
    error = APIError(429, "slow down", code="rate_limit_exceeded", retry_after=3600)

    assert error.retry_headers() == [(b"retry-after", b"60"), (b"retry-after-ms", b"60000")]


def test_it_tells_the_sdks_not_to_retry_refused_gateway_credentials() -> None:
    error = APIError.from_run_failure(RunFailed("upstream_auth_failed", "check the key", 401))

    assert (error.status, error.code) == (502, "upstream_auth_failed")
    assert error.retry_headers() == [(b"x-should-retry", b"false")]
