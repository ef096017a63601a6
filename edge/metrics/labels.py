"""Label values for the request metrics, each from a bounded set: never a caller's own words.

A series per label value lives as long as the process, so a value a caller (or an upstream)
chooses would let anyone grow the Edge's memory and every scrape without bound. Models, providers,
principals and tokens come from the config; anything else maps to a fixed placeholder, as the
usage rows do for `(anonymous)` and `(unknown token)`.
"""

from __future__ import annotations

from collections.abc import Container

from edge.dispatch import DispatchError
from edge.runs import DEADLINE_EXCEEDED, UPSTREAM_AUTH_FAILED
from edge.runtime import EDGE_DRAINING, EDGE_SHUTTING_DOWN
from nodes import wire
from nodes.sessions import BAD_FRAME, NODE_DISCONNECTED, REQUEST_TOO_LARGE

UNKNOWN_MODEL = "(unknown model)"  # a model name no config defines (the caller's typo)
NONE = "(none)"  # no provider got the request, or a caller without a token_ref
OTHER = "(other)"  # a status no Edge code names, e.g. an upstream's own error code


def _dispatch_codes() -> set[str]:
    codes, classes = set(), [DispatchError]
    while classes:
        cls = classes.pop()
        codes.add(cls.code)
        classes += cls.__subclasses__()
    return codes


# Every status a usage row can hold that the Edge itself names: a run's outcome, its dispatch
# and run errors, the Node's error codes and the OpenAI layer's own refusals. An upstream's own
# error code (kept in the caller's answer and the usage row) is OTHER here, unless it is one of
# these (e.g. `context_length_exceeded`).
KNOWN_STATUSES: frozenset[str] = frozenset(
    {
        "ok",
        "cancelled",
        # the OpenAI layer (edge/openai_api): refusals and its mapping of upstream answers
        "invalid_request",
        "max_tokens_exceeded",
        "model_not_found",
        "internal_error",
        "upstream_rejected",
        "rate_limit_exceeded",
        DEADLINE_EXCEEDED,
        UPSTREAM_AUTH_FAILED,
        EDGE_DRAINING,
        EDGE_SHUTTING_DOWN,
        NODE_DISCONNECTED,
        BAD_FRAME,
        REQUEST_TOO_LARGE,
        *_dispatch_codes(),
        *(value for name, value in vars(wire).items() if name.startswith("ERROR_")),
    }
)


def model_label(model: str, configured: Container[str]) -> str:
    return model if model in configured else UNKNOWN_MODEL


def status_label(status: str) -> str:
    return status if status in KNOWN_STATUSES else OTHER


def ref_label(value: str) -> str:
    """A provider, principal_ref or token_ref (all from the config), or NONE when empty."""
    return value or NONE
