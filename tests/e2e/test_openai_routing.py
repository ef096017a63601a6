"""Where requests go, seen through the SDK and the decision headers of a real Edge and Node.

Model `rr`: two providers share priority 10, a third waits at priority 50. Model `lc`: a
provider with `long_context_slots: 0` at priority 10 and one with a single long slot at
priority 50; the long-context threshold is 50 estimated tokens (DESIGN §4).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from itertools import pairwise
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import Tokens, echo_config

THRESHOLD = 50
SLOW_DELAY_MS = 150
SLOW_TEXT = " ".join(["w"] * 80)  # 159 chars: normal; ~12 s of reply unless closed earlier
LONG_TEXT = " ".join(f"lorem{i:02d}" for i in range(60))  # 479 chars: ~127 estimated tokens
TIER_ONE = {"rr-a", "rr-b"}


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    served = {"served_models": ["echo-small"]}
    return echo_config(
        tokens,
        public,
        admin,
        threshold=THRESHOLD,
        adapters=[
            {"id": "echo", "type": "echo"},
            {"id": "slow", "type": "echo", "token_delay_ms": SLOW_DELAY_MS},
        ],
        providers=[
            {"id": "rr-a", "adapter": "slow", "capacity": 2, "priority": 10, **served},
            {"id": "rr-b", "adapter": "slow", "capacity": 2, "priority": 10, **served},
            {"id": "rr-c", "adapter": "slow", "capacity": 4, "priority": 50, **served},
            {
                "id": "lc-none",
                "adapter": "echo",
                "capacity": 4,
                "priority": 10,
                "long_context_slots": 0,
                **served,
            },
            {
                "id": "lc-long",
                "adapter": "slow",
                "capacity": 4,
                "priority": 50,
                "long_context_slots": 1,
                "queue_timeout_s": 0.5,
                **served,
            },
        ],
        models=[
            {
                "id": "rr",
                "providers": {"rr-a": "echo-small", "rr-b": "echo-small", "rr-c": "echo-small"},
            },
            {"id": "lc", "providers": {"lc-none": "echo-small", "lc-long": "echo-small"}},
            {"id": "lc-short-only", "providers": {"lc-none": "echo-small"}},
        ],
    )


@pytest.fixture(scope="module")
def stack(openai_stack_factory):
    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return stack.client("app-1")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def ask(client: openai.OpenAI, model: str, text: str = "x", **extra: Any) -> httpx.Headers:
    """One non-streaming request; its decision headers (the reply is checked to be the echo)."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=user(text), max_tokens=1, **extra
    )
    assert raw.parse().choices[0].message.content == "echo:"
    return raw.headers


@contextmanager
def held(client: openai.OpenAI, model: str, text: str = SLOW_TEXT) -> Iterator[httpx.Headers]:
    """A slow stream holding its slot (headers come after the lease) until the block ends."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=user(text), stream=True
    )
    stream = raw.parse()
    try:
        yield raw.headers
    finally:
        stream.close()


# -- round-robin and priority tiers ----------------------------------------------------------


def test_sequential_requests_alternate_between_the_top_tier_providers(stack, client):
    providers = [ask(client, "rr")["x-iop-provider"] for _ in range(6)]
    assert set(providers) == TIER_ONE, providers
    assert all(a != b for a, b in pairwise(providers)), providers
    assert Counter(providers) == {"rr-a": 3, "rr-b": 3}
    stack.wait_idle("rr-a", "rr-b", "rr-c")


def test_concurrent_requests_fill_the_top_tier_before_the_next_one(stack, client):
    with ExitStack() as holders:
        tier_one = [holders.enter_context(held(client, "rr"))["x-iop-provider"] for _ in range(4)]
        # Capacity 2 each: the four streams fill rr-a and rr-b, taking turns.
        assert Counter(tier_one) == {"rr-a": 2, "rr-b": 2}
        status = stack.status()["providers"]
        assert (status["rr-a"]["in_flight"], status["rr-b"]["in_flight"]) == (2, 2)
        assert status["rr-c"]["in_flight"] == 0

        # Tier 1 is full, tier 2 has room: the next requests go there rather than wait.
        spill = holders.enter_context(held(client, "rr"))
        assert spill["x-iop-provider"] == "rr-c"
        assert float(spill["x-iop-queue-ms"]) == 0.0
        assert ask(client, "rr")["x-iop-provider"] == "rr-c"
    stack.wait_idle("rr-a", "rr-b", "rr-c")

    # With room again in tier 1, tier 2 is left alone.
    assert {ask(client, "rr")["x-iop-provider"] for _ in range(4)} == TIER_ONE
    stack.wait_idle("rr-a", "rr-b", "rr-c")


# -- long context ------------------------------------------------------------------------------


def test_short_prompts_are_normal_and_go_to_the_top_priority(client):
    headers = ask(client, "lc", "short prompt")
    assert headers["x-iop-context-class"] == "normal"
    assert headers["x-iop-provider"] == "lc-none"


def test_the_threshold_is_inclusive(client):
    # Estimate = 3 (reply) + 4 (one message) + ceil(chars / 4): 168 chars -> 49, 169 -> 50.
    assert ask(client, "lc", "a" * 168)["x-iop-context-class"] == "normal"
    headers = ask(client, "lc", "a" * 169)
    assert headers["x-iop-context-class"] == "long"
    assert headers["x-iop-provider"] == "lc-long"


def test_long_prompts_go_to_the_provider_with_long_slots(stack, client):
    request_ids = [f"req-{uuid.uuid4().hex[:12]}" for _ in range(3)]
    for request_id in request_ids:
        headers = ask(client, "lc", LONG_TEXT, extra_headers={"x-request-id": request_id})
        assert headers["x-iop-context-class"] == "long"
        assert headers["x-iop-provider"] == "lc-long"
        assert headers["x-iop-node"] == "node-a"
    stack.wait_idle("lc-long")
    for request_id in request_ids:
        [row] = stack.wait_usage(request_id=request_id)
        assert (row["context_class"], row["provider"], row["status"]) == ("long", "lc-long", "ok")
        assert row["prompt_tokens"] == 120  # the echo Node's own count: ceil(479 / 4)


def test_a_provider_with_zero_long_slots_never_takes_a_long_request(stack, client):
    with held(client, "lc", LONG_TEXT) as holder:
        assert (holder["x-iop-provider"], holder["x-iop-context-class"]) == ("lc-long", "long")
        status = stack.status()["providers"]
        assert status["lc-long"]["long_in_flight"] == 1
        assert status["lc-none"]["in_flight"] == 0

        # lc-none has four free slots but takes no long request: the next long one waits for
        # lc-long's only long slot and times out (lc-long's queue_timeout_s is 0.5).
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError) as caught:
            ask(client, "lc", LONG_TEXT)
        assert time.monotonic() - started >= 0.4
        assert caught.value.body["code"] == "queue_timeout"
        assert caught.value.response.headers["retry-after"]
        assert stack.in_flight("lc-none") == 0

        # Normal requests are not held up by the long queue.
        assert ask(client, "lc")["x-iop-provider"] == "lc-none"
    stack.wait_idle("lc-long", "lc-none")

    rows = stack.wait_usage(1, provider="lc-none")
    assert {row["context_class"] for row in stack.usage_rows(provider="lc-none")} == {"normal"}
    assert rows


def test_a_long_request_no_provider_would_ever_serve_gets_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, "lc-short-only", LONG_TEXT)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert ask(client, "lc-short-only")["x-iop-provider"] == "lc-none"
