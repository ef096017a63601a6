"""The request flow's side of per-principal limits: admit or answer 429, headers, settle.

A refusal is OpenAI's 429 (``rate_limit_exceeded`` for a minute window or ``max_concurrent``,
``insufficient_quota`` for a day or month budget) with ``Retry-After`` / ``retry-after-ms`` from
when the limit frees (at most a minute) and the ``x-ratelimit-*`` headers OpenAI sends, which
admitted requests carry too (``docs/governance.md``).
"""

from __future__ import annotations

from edge.governance.limits import Admission, Cell, RateState, format_reset
from edge.openai_api.errors import APIError
from edge.openai_api.exchange import Exchange
from edge.openai_api.responses import Headers
from edge.runtime import EdgeRuntime
from edge.usage import Usage


def admit(
    runtime: EdgeRuntime, exchange: Exchange, usage: Usage, model: str, reserve_tokens: int
) -> Admission:
    """Hold the request's place under its principal's policy, or raise the 429 that refuses it
    (metered with its code)."""
    resolved = runtime.config.resolve_policy(usage.principal_ref, usage.token_ref, model)
    cell = Cell(usage.principal_ref, usage.token_ref, model)
    outcome = runtime.limiter.admit(resolved, cell, reserve_tokens)
    exchange.headers += rate_headers(outcome.rate)
    if isinstance(outcome, Admission):
        return outcome
    usage.status = outcome.code
    raise APIError(429, outcome.message, code=outcome.code, retry_after=outcome.retry_after_s)


def settle(admission: Admission, usage: Usage) -> None:
    """The run ended (any way): its real tokens replace its reservation."""
    admission.settle(usage.prompt_tokens + usage.completion_tokens)


def rate_headers(rate: RateState) -> Headers:
    """OpenAI's ``x-ratelimit-*`` headers for the minute windows the policy sets."""
    headers: Headers = []
    for kind, limit, remaining, reset_s in (
        ("requests", rate.limit_requests, rate.remaining_requests, rate.reset_requests_s),
        ("tokens", rate.limit_tokens, rate.remaining_tokens, rate.reset_tokens_s),
    ):
        if limit is None or remaining is None:
            continue
        headers += [
            (f"x-ratelimit-limit-{kind}".encode(), str(limit).encode()),
            (f"x-ratelimit-remaining-{kind}".encode(), str(remaining).encode()),
            (f"x-ratelimit-reset-{kind}".encode(), format_reset(reset_s).encode()),
        ]
    return headers
