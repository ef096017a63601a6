"""Failover before the first byte and passive health, through the official SDK, a real Edge,
two real Nodes and the scripted upstream.

Node `node-a` carries the failing providers, `node-b` the ones that answer. A run whose upstream
is overloaded or says nothing in time goes to the other Node; a provider whose runs keep failing
leaves the pool and comes back half-open for one trial run; and when `node-a` is killed
(SIGKILL) while runs wait on it, they are answered by `node-b` instead of failing. The kill comes
last: it takes `node-a` away for the rest of the module.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.e2e.harness import Tokens, echo_config, sha256_hex, wait_until

PASSIVE_HEALTH = {"failures": 2, "window_s": 3600, "cooldown_s": 3600}


def user(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def provider(pid: str, adapter: str, served: str, priority: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": pid,
        "adapter": adapter,
        "served_models": [served],
        "priority": priority,
        "queue_timeout_s": 60,
        **extra,
    }


def make_config(base_url: str) -> Callable[[Tokens, int, int], dict[str, Any]]:
    def build(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
        upstream = {"type": "openai_http", "base_url": base_url}
        config = echo_config(
            tokens,
            public,
            admin,
            adapters=[
                {"id": "up", **upstream},
                # Says nothing for a second: the Node gives up (upstream_timeout).
                {"id": "up-impatient", **upstream, "timeout_s": 1},
            ],
            providers=[
                provider("a-hang", "up", "hang", 1, capacity=2),
                provider("sick", "up", "status-503", 1, capacity=4),
                provider("ill", "up", "status-503", 1, capacity=4),
                provider("mute", "up-impatient", "hang", 1, capacity=4),
            ],
            extra_nodes=[
                {
                    "id": "node-b",
                    "token_hash_sha256": sha256_hex(tokens.node("node-b")),
                    "adapters": [{"id": "up", **upstream}],
                    "providers": [
                        provider("b-slow", "up", "slow-100", 2, capacity=1),
                        provider("backup", "up", "ok", 2, capacity=4),
                    ],
                }
            ],
            models=[
                {"id": "chaos", "providers": {"a-hang": "hang", "b-slow": "slow-100"}},
                {"id": "flaky", "providers": {"sick": "status-503", "backup": "ok"}},
                {"id": "ill", "providers": {"ill": "status-503", "backup": "ok"}},
                {"id": "first-byte", "providers": {"mute": "hang", "backup": "ok"}},
            ],
        )
        config["passive_health"] = dict(PASSIVE_HEALTH)
        return config

    return build


@pytest.fixture(scope="module")
def upstream(scripted_upstream_factory):
    return scripted_upstream_factory()


@pytest.fixture(scope="module")
def stack(openai_stack_factory, upstream):
    stack = openai_stack_factory(make_config(upstream.base_url))
    stack.start_node("node-a")
    stack.start_node("node-b")
    return stack


def served_requests(upstream, served: str) -> int:
    return sum(1 for r in upstream.requests() if r["model"] == served)


def tried(client: openai.OpenAI, model: str, request_id: str) -> str:
    """Answer one non-stream request; the providers it went to."""
    response = client.chat.completions.with_raw_response.create(
        model=model, messages=user(), extra_headers={"x-request-id": request_id}
    )
    assert response.parse().choices[0].message.content == "echo: hello"
    return response.headers["x-iop-providers-tried"]


def test_an_overloaded_upstream_sends_the_run_to_the_other_node(stack):
    client = stack.client()

    response = client.chat.completions.with_raw_response.create(
        model="flaky", messages=user(), extra_headers={"x-request-id": "flaky-1"}
    )

    assert response.parse().choices[0].message.content == "echo: hello"
    assert (response.headers["x-iop-node"], response.headers["x-iop-attempts"]) == ("node-b", "2")
    row = stack.wait_usage(1, request_id="flaky-1")[0]
    assert (row["status"], row["attempts"], row["providers_tried"]) == ("ok", 2, "sick,backup")


def test_an_upstream_that_says_nothing_in_time_sends_the_stream_elsewhere(stack):
    client = stack.client()

    with client.chat.completions.with_streaming_response.create(
        model="first-byte", messages=user(), stream=True
    ) as response:
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )

    assert text == "echo: hello"
    assert response.headers["x-iop-providers-tried"] == "mute,backup"


def test_a_provider_whose_runs_keep_failing_leaves_and_comes_back_half_open(stack, upstream):
    client = stack.client()
    assert tried(client, "ill", "ill-1") == "ill,backup"
    assert stack.status()["providers"]["ill"]["passive_state"] == "closed"  # 1 failure of 2
    assert tried(client, "ill", "ill-2") == "ill,backup"
    ill = stack.status()["providers"]["ill"]
    assert (ill["passive_state"], ill["passive_reason"], ill["healthy"]) == (
        "open",
        "upstream_error (HTTP 503)",
        False,
    )
    assert ill["reopens_in_s"] > 0

    before = served_requests(upstream, "status-503")
    assert tried(client, "ill", "ill-3") == "backup"  # out: straight to the other provider
    assert served_requests(upstream, "status-503") == before

    # A live refresh shortens the cooldown; the provider comes back half-open.
    config = yaml.safe_load(stack.edge.config_path.read_text())
    shorter = copy.deepcopy(config)
    shorter["passive_health"]["cooldown_s"] = 0.2
    reply = httpx.post(
        f"{stack.edge.operator_url}/refresh",
        headers=stack.edge.operator_headers(),
        json={"mode": "apply", "config_yaml": yaml.safe_dump(shorter)},
        timeout=30,
    )
    assert reply.json()["status"] == "applied", reply.text
    assert [c["path"] for c in reply.json()["changes"]] == ["passive_health.cooldown_s"]
    wait_until(
        lambda: stack.status()["providers"]["ill"]["passive_state"] == "half_open",
        what="ill to be half-open",
    )

    assert tried(client, "ill", "ill-4") == "ill,backup"  # the one trial run, failed
    assert served_requests(upstream, "status-503") == before + 1


def test_runs_waiting_on_a_killed_node_are_answered_by_the_other_node(stack, upstream):
    client = stack.client()
    outcomes: dict[str, Any] = {}

    def stream(name: str) -> None:
        try:
            with client.chat.completions.with_streaming_response.create(
                model="chaos", messages=user(name), stream=True
            ) as response:
                text = "".join(
                    chunk.choices[0].delta.content or ""
                    for chunk in response.parse()
                    if chunk.choices
                )
                outcomes[name] = (text, response.headers["x-iop-providers-tried"])
        except Exception as exc:  # reported by the assertions below
            outcomes[name] = exc

    def complete(name: str) -> None:
        try:
            response = client.chat.completions.with_raw_response.create(
                model="chaos", messages=user(name)
            )
            text = response.parse().choices[0].message.content
            outcomes[name] = (text, response.headers["x-iop-providers-tried"])
        except Exception as exc:
            outcomes[name] = exc

    hanging, slow = served_requests(upstream, "hang"), served_requests(upstream, "slow-100")
    # Two streams start on node-a's provider, whose upstream never answers ...
    threads = [threading.Thread(target=stream, args=(f"s{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: served_requests(upstream, "hang") == hanging + 2, what="two runs at the upstream"
    )
    # ... then two whole requests: one on node-b's single slot, one waiting in the queue.
    more = [threading.Thread(target=complete, args=(f"c{i}",)) for i in range(2)]
    for thread in more:
        thread.start()
    wait_until(
        lambda: stack.status()["models"]["chaos"]["queue_depth"] >= 1
        or served_requests(upstream, "slow-100") == slow + 2,
        what="the whole requests to be admitted or waiting",
    )

    stack.nodes["node-a"].kill()
    for thread in [*threads, *more]:
        thread.join(timeout=60)

    assert set(outcomes) == {"s0", "s1", "c0", "c1"}
    for name, outcome in outcomes.items():
        assert not isinstance(outcome, Exception), f"{name}: {outcome!r}"
        text, providers = outcome
        assert text == f"echo: {name}"
        assert providers.endswith("b-slow")
    assert outcomes["s0"][1] == outcomes["s1"][1] == "a-hang,b-slow"
    stack.wait_idle("b-slow")
