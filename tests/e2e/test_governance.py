"""Per-principal limits on a real Edge, called with the official openai SDK.

`team-a` (tokens app-1, app-2) may send REQUESTS_PER_MINUTE requests a minute; `team-b` (token
app-b) has a day budget. The minute window makes the count exact whatever the machine's speed:
the requests are sent at once, and all of them reach the Edge well within the minute.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import Tokens, echo_config, sha256_hex, wait_until

REQUESTS_PER_MINUTE = 5
EXTRA = 3
DAY_BUDGET = 60


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    config = echo_config(tokens, public, admin)
    config["openai"]["principal_tokens"].append(
        {
            "token_ref": "app-b",
            "token_hash_sha256": sha256_hex(tokens.client("app-b")),
            "principal_ref": "team-b",
        }
    )
    config["openai"]["policies"] = [
        {"principal_ref": "team-a", "requests_per_minute": REQUESTS_PER_MINUTE},
        {"principal_ref": "team-b", "tokens_per_day": DAY_BUDGET},
    ]
    return config


@pytest.fixture(scope="module")
def stack(openai_stack_factory):
    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    return stack


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_exactly_n_of_n_plus_k_requests_are_admitted_per_minute(stack) -> None:
    client = stack.client("app-1")

    def send(index: int) -> Any:
        try:
            return client.chat.completions.with_raw_response.create(
                model="echo", messages=user(f"hello {index}")
            )
        except openai.RateLimitError as error:
            return error

    with ThreadPoolExecutor(REQUESTS_PER_MINUTE + EXTRA) as pool:
        outcomes = list(pool.map(send, range(REQUESTS_PER_MINUTE + EXTRA)))

    refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    admitted = [o for o in outcomes if not isinstance(o, openai.RateLimitError)]
    assert len(admitted) == REQUESTS_PER_MINUTE
    assert len(refused) == EXTRA
    for answer in admitted:
        assert answer.headers["x-ratelimit-limit-requests"] == str(REQUESTS_PER_MINUTE)
        assert answer.parse().choices[0].message.content
    remaining = sorted(int(a.headers["x-ratelimit-remaining-requests"]) for a in admitted)
    assert remaining == list(range(REQUESTS_PER_MINUTE))
    for error in refused:
        assert error.code == "rate_limit_exceeded"
        headers = error.response.headers
        assert 1 <= int(headers["retry-after"]) <= 60
        assert 0 < int(headers["retry-after-ms"]) <= 60_000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"].endswith("s")

    # The other token of the principal shares its window; the refusals are metered as such.
    with pytest.raises(openai.RateLimitError):
        stack.client("app-2").chat.completions.create(model="echo", messages=user("again"))
    rows = stack.wait_usage(EXTRA + 1, status="rate_limit_exceeded")
    assert {row["principal_ref"] for row in rows} == {"team-a"}
    principal = stack.status()["principals"]["team-a"]
    assert (principal["admitted"], principal["limited"]) == (REQUESTS_PER_MINUTE, EXTRA + 1)
    metrics = httpx.get(
        f"{stack.edge.operator_url}/metrics", headers=stack.edge.operator_headers(), timeout=30
    ).text
    assert f'iop_principal_limited_total{{principal="team-a"}} {EXTRA + 1}.0' in metrics
    assert f'iop_principal_admitted_total{{principal="team-a"}} {REQUESTS_PER_MINUTE}.0' in metrics


def spend_day_budget(stack) -> int:
    """Send as team-b until the budget refuses; the tokens metered for its answers."""
    client = stack.client("app-b")
    answered = 0
    for _ in range(DAY_BUDGET):
        try:
            client.chat.completions.create(model="echo", messages=user("spend some tokens"))
            answered += 1
        except openai.RateLimitError as error:
            assert error.code == "insufficient_quota"
            assert 1 <= int(error.response.headers["retry-after"]) <= 60
            break
    else:
        raise AssertionError("the day budget never refused a request")
    ok = stack.wait_usage(answered, principal_ref="team-b", status="ok")
    return sum(row["prompt_tokens"] + row["completion_tokens"] for row in ok)


def test_a_day_budget_survives_an_edge_restart(stack) -> None:
    spent = spend_day_budget(stack)
    assert 0 < spent <= DAY_BUDGET
    wait_until(
        lambda: stack.status()["principals"]["team-b"]["tokens_per_day_remaining"]
        == DAY_BUDGET - spent,
        what="the budget settled",
    )
    stack.wait_usage(1, principal_ref="team-b", status="insufficient_quota")

    stack.edge.stop()
    stack.edge.start()

    principal = wait_until(lambda: stack.status()["principals"].get("team-b"), what="status")
    assert principal["tokens_per_day_remaining"] == DAY_BUDGET - spent
    with pytest.raises(openai.RateLimitError) as refused:
        stack.client("app-b").chat.completions.create(
            model="echo", messages=user("spend some tokens")
        )
    assert refused.value.code == "insufficient_quota"
