"""Weighted fair share through HTTP: a real Edge and Node, one slot, two backlogged principals.

The slot is held by a stream while the requests queue one by one (each seen queued in
`GET /status` before the next is sent), so the order they are served in follows from the
weights alone; the usage rows, written in the order runs end, show it.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import Tokens, echo_config, sha256_hex, wait_until

PER_PRINCIPAL = 6
HOLDER_TEXT = " ".join(f"w{i}" for i in range(3000))  # streams for minutes unless closed


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    config = echo_config(
        tokens,
        public,
        admin,
        adapters=[{"id": "slow", "type": "echo", "token_delay_ms": 20}],
        providers=[{"id": "slow-1", "adapter": "slow", "served_models": ["e"], "capacity": 1}],
        models=[{"id": "slow", "providers": {"slow-1": "e"}}],
    )
    config["queue"]["queue_timeout_s"] = 300
    config["queue"]["max_queue"] = 32
    for token_ref in ("app-x", "app-y"):
        config["openai"]["principal_tokens"].append(
            {
                "token_ref": token_ref,
                "token_hash_sha256": sha256_hex(tokens.client(token_ref)),
                "principal_ref": f"team-{token_ref[-1]}",
            }
        )
    config["openai"]["policies"] = [
        {"principal_ref": "team-x", "weight": 3},
        {"principal_ref": "team-y", "weight": 1},
    ]
    return config


def chat(stack: OpenAIStack, token_ref: str, text: str, **body: Any) -> dict[str, Any]:
    return {
        "url": stack.edge.completions_url,
        "headers": {"Authorization": f"Bearer {stack.tokens.client(token_ref)}"},
        "json": {"model": "slow", "messages": [{"role": "user", "content": text}], **body},
        "timeout": 300,
    }


def hold_the_slot(stack: OpenAIStack, started: threading.Event, stop: threading.Event) -> None:
    with httpx.stream("POST", **chat(stack, "app-1", HOLDER_TEXT, stream=True)) as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            started.set()
            if stop.is_set():
                return  # closing the stream ends the run and frees the slot


def queued(stack: OpenAIStack, principal: str) -> int:
    return stack.status()["principals"].get(principal, {}).get("queued", 0)


def test_backlogged_principals_are_served_by_weight_through_http(openai_stack_factory) -> None:
    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    started, stop = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2 * PER_PRINCIPAL + 1) as pool:
        holder = pool.submit(hold_the_slot, stack, started, stop)
        assert started.wait(60), "the holding stream never started"
        answers: list[Future[httpx.Response]] = []
        for index in range(PER_PRINCIPAL):
            for token_ref, principal in (("app-x", "team-x"), ("app-y", "team-y")):
                answers.append(
                    pool.submit(httpx.post, **chat(stack, token_ref, "same ask", max_tokens=8))
                )
                wait_until(
                    lambda p=principal, n=index + 1: queued(stack, p) == n,
                    timeout=30,
                    what=f"{principal}'s request {index + 1} queued",
                )
        stop.set()
        holder.result(timeout=60)
        assert all(answer.result(timeout=120).status_code == 200 for answer in answers)

    rows = [
        row["principal_ref"]
        for row in stack.wait_usage(2 * PER_PRINCIPAL, status="ok")
        if row["principal_ref"] in ("team-x", "team-y")
    ]
    # Equal charges, weights 3:1: x's tags step a third as far as y's, so of the first eight
    # served six are x's; once x's backlog is done, y's goes on alone.
    assert Counter(rows[:8]) == {"team-x": 6, "team-y": 2}
    assert rows[8:] == ["team-y"] * 4
