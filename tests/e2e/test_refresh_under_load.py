"""Apply under load through real processes: 500 clients while 20 applies reshape the pool.

One Edge (daphne) with two real echo Nodes, two providers each, one model routed to all four.
500 concurrent clients send chat completions (half streamed, a fifth long-context) through the
Edge while 20 sequential `POST /refresh` applies set random capacities (1-6), priorities,
`enabled` flags and long-context slots — never leaving a context class without a provider. Each
client sends one run, then more until the last apply is in, and one more stream is held open
across every apply: the load lasts as long as the applies do, and each apply finds the Edge
holding runs, however fast or slow the machine. No run may fail, every apply is applied and acked
by the Nodes it changed, and afterwards every counter is back at zero.

Two details of the client keep the load one concurrent wave on a small machine:

- The runs go through 20 httpx clients of 25 connections, not one of 500: httpx's pool scans
  its connections and queued requests on every request and release, so a pool of 500 stalls the
  test's event loop for seconds, and the applies (sent from the same loop) trail behind the load.
- Every connection is opened before the load, 25 at a time. Twisted listens with a backlog of
  50, so 500 simultaneous connects overflow it and the kernel drops the extra SYNs: a third of
  the runs would arrive 1 s and 3 s late (SYN retries) instead of together.

The exact admission invariant (never above the capacity in force) is checked in process by
`tests/refresh/test_refresh_admission_under_load.py`; here the whole stack must hold up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from edge.dispatch import estimate_input_tokens
from tests.e2e.harness import EdgeProcess, NodeProcess, Tokens, echo_config, sha256_hex
from tests.e2e.nodes_support import (
    DONE,
    astatus,
    await_until,
    chat_body,
    client_headers,
    sse_payloads,
    streamed_content,
    two_ports,
    wait_node_ready,
)
from tests.refresh.load_pool import MODEL, NODES, PROVIDERS, initial_settings, provider

SEED = 7_500_020
CLIENTS = 500  # concurrent, each sending runs one after the other
APPLIES = 20
# Apply ``i`` waits for ``i * RUNS_PER_APPLY`` answers, so the applies spread over the load.
RUNS_PER_APPLY = 5
PER_CLIENT = 25  # connections per httpx client (see above)
LONG_EVERY = 5  # every fifth run is long-context
THRESHOLD = 20
TOKEN_DELAY_MS = 10
# Every config keeps this many slots enabled (and long slots), so no config, the last one
# included, slows the remaining load down to a crawl.
MIN_SLOTS = 6
MIN_LONG_SLOTS = 3
WAIT_S = 30.0
# The held stream's reply would take longer than the whole load may (its text is echoed a word
# every TOKEN_DELAY_MS): it is only ever cut short.
HELD_PROMPT = " ".join(f"held{n:04}" for n in range(int(WAIT_S * 1000 / TOKEN_DELAY_MS) + 1000))


def node(tokens: Tokens, node_id: str, settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": node_id,
        "token_hash_sha256": sha256_hex(tokens.node(node_id)),
        "adapters": [{"id": "echo", "type": "echo", "token_delay_ms": TOKEN_DELAY_MS}],
        "providers": [provider(pid, settings[pid]) for pid in NODES[node_id]],
    }


def config_with(
    tokens: Tokens, public: int, admin: int, settings: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Two echo Nodes, two providers each, one model routed to all four; generous queues."""
    first, second = NODES
    config = echo_config(
        tokens,
        public,
        admin,
        node_id=first,
        adapters=node(tokens, first, settings)["adapters"],
        providers=node(tokens, first, settings)["providers"],
        models=[{"id": MODEL, "providers": dict.fromkeys(PROVIDERS, "echo-small")}],
        extra_nodes=[node(tokens, second, settings)],
        threshold=THRESHOLD,
    )
    config["queue"] = {"max_queue": CLIENTS, "queue_timeout_s": 60}
    return config


def random_settings(rng: random.Random) -> dict[str, dict[str, Any]]:
    """Capacities 1-6, priorities 0-2, ``enabled`` and long slots at random, keeping some
    enabled capacity for both context classes: no run is ever left without a provider."""
    while True:
        settings = {}
        for pid in PROVIDERS:
            capacity = rng.randint(1, 6)
            settings[pid] = {
                "capacity": capacity,
                "priority": rng.randint(0, 2),
                "enabled": rng.random() < 0.7,
                "long_context_slots": rng.choice([None, 0, *range(1, capacity + 1)]),
            }
        enabled = [s for s in settings.values() if s["enabled"]]
        slots = sum(s["capacity"] for s in enabled)
        long_slots = sum(
            s["capacity"] if s["long_context_slots"] is None else s["long_context_slots"]
            for s in enabled
        )
        if slots >= MIN_SLOTS and long_slots >= MIN_LONG_SLOTS:
            return settings


@dataclass
class LoadStack:
    edge: EdgeProcess
    nodes: list[NodeProcess]
    ports: tuple[int, int]


@pytest.fixture(scope="module")
def load_stack(
    tokens: Tokens,
    edge_factory: Callable[..., EdgeProcess],
    node_factory: Callable[..., NodeProcess],
) -> LoadStack:
    public, admin = two_ports()
    edge = edge_factory(
        config_with(tokens, public, admin, initial_settings()), name="refresh-under-load"
    )
    nodes = [node_factory(edge, node_id) for node_id in NODES]
    for node_id in NODES:
        wait_node_ready(edge, node_id)
    return LoadStack(edge, nodes, (public, admin))


# -- the runs -----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int = 0
    content: str | None = None
    context_class: str | None = None
    problem: str | None = None


def is_long(i: int) -> bool:
    return i % LONG_EVERY == 1  # streamed and not: runs alternate


def prompt(i: int) -> str:
    """The prompt of run ``i``, of one length for every ``i``: only ``is_long`` sets its class."""
    words = " ".join(f"long{n:02}" for n in range(10)) if is_long(i) else "alpha beta gamma delta"
    return f"run {i:06} {words}"


async def chat(client: httpx.AsyncClient, body: dict[str, Any]) -> Answer:
    """One chat completion; a streamed one must end with ``[DONE]`` and carry no error."""
    if not body["stream"]:
        response = await client.post("/v1/chat/completions", json=body)
        answer = Answer(
            response.status_code, context_class=response.headers.get("x-iop-context-class")
        )
        if response.status_code == 200:
            answer.content = response.json()["choices"][0]["message"]["content"]
        else:
            answer.problem = response.text
        return answer
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        answer = Answer(
            response.status_code, context_class=response.headers.get("x-iop-context-class")
        )
        lines = [line async for line in response.aiter_lines()]
    if response.status_code != 200:
        answer.problem = "\n".join(lines)
        return answer
    events = sse_payloads(lines)
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    if errors or not events or events[-1] != DONE:
        answer.problem = json.dumps(events[-3:])
    answer.content = streamed_content(events)
    return answer


async def hold_a_run(client: httpx.AsyncClient, admitted: asyncio.Event) -> None:
    """Stream the held run until cancelled; ``admitted`` is set once its first chunk arrives
    (or once it fails)."""
    body = chat_body(MODEL, HELD_PROMPT, stream=True)
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200, await response.aread()
            async for _ in response.aiter_lines():
                admitted.set()
    finally:
        admitted.set()


async def open_connections(client: httpx.AsyncClient, count: int) -> None:
    """Leave ``count`` keep-alive connections in the client's pool: ``count`` requests at once
    each open their own connection, and leave it idle in the pool once answered."""
    responses = await asyncio.gather(*(client.get("/v1/models") for _ in range(count)))
    assert {r.status_code for r in responses} == {200}


def busy(state: dict[str, Any]) -> int:
    """Runs the Edge holds: in flight on a provider or waiting in a queue."""
    return sum(p["in_flight"] for p in state["providers"].values()) + sum(
        m["queue_depth"] for m in state["models"].values()
    )


def idle(state: dict[str, Any]) -> bool:
    """No counter above zero: nothing in flight, long or not, and nobody waiting."""
    providers = state["providers"].values()
    models = state["models"].values()
    return all((p["in_flight"], p["long_in_flight"]) == (0, 0) for p in providers) and all(
        (m["queue_depth"], m["long_queue_depth"]) == (0, 0) for m in models
    )


def in_force(state: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        pid: (p["capacity"], p["long_context_slots"], p["enabled"], p["listed"])
        for pid, p in state["providers"].items()
    }


def configured(config: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        item["id"]: (item["capacity"], item.get("long_context_slots"), item["enabled"], True)
        for node_config in config["nodes"]
        for item in node_config["providers"]
    }


async def test_applies_under_load_fail_no_run_and_leave_every_counter_at_zero(
    load_stack: LoadStack, tokens: Tokens
) -> None:
    edge, (public, admin) = load_stack.edge, load_stack.ports
    rng = random.Random(SEED)
    for i in range(LONG_EVERY):
        estimate = estimate_input_tokens(chat_body(MODEL, prompt(i)))
        assert (estimate >= THRESHOLD) == is_long(i), (i, estimate)

    answers: dict[int, Answer | None] = {}
    progress = asyncio.Condition()
    done = 0
    applies_done = asyncio.Event()
    run_numbers = itertools.count()

    async def client_runs(client: httpx.AsyncClient) -> None:
        """One run, then more until the applies are done: the load outlasts the last apply."""
        nonlocal done
        while True:
            i = next(run_numbers)
            answers[i] = None  # stays None if the run raises
            try:
                answers[i] = await chat(client, chat_body(MODEL, prompt(i), stream=i % 2 == 0))
            finally:
                async with progress:
                    done += 1
                    progress.notify_all()
            if applies_done.is_set():
                return

    applied: list[tuple[dict[str, Any], dict[str, Any]]] = []
    after_apply: list[dict[str, Any]] = []

    async def applies(operator: httpx.AsyncClient) -> None:
        for i in range(APPLIES):
            async with progress:
                await progress.wait_for(lambda i=i: done >= max(1, i * RUNS_PER_APPLY))
            config = config_with(tokens, public, admin, random_settings(rng))
            body = {"mode": "apply", "config_yaml": yaml.safe_dump(config)}
            response = await operator.post("/refresh", json=body)
            assert response.status_code == 200, response.text
            applied.append((config, response.json()))
            # What the Edge runs and holds right after the apply.
            after_apply.append((await operator.get("/status")).json())
        applies_done.set()

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=edge.base_url,
                    headers=client_headers(tokens),
                    limits=httpx.Limits(
                        max_connections=PER_CLIENT, max_keepalive_connections=PER_CLIENT
                    ),
                    timeout=httpx.Timeout(WAIT_S),
                )
            )
            for _ in range(CLIENTS // PER_CLIENT)
        ]
        operator = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{admin}",
                headers=edge.operator_headers(),
                timeout=WAIT_S,
            )
        )
        holder = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=edge.base_url, headers=client_headers(tokens), timeout=WAIT_S
            )
        )
        for client in clients:
            await open_connections(client, PER_CLIENT)
        admitted = asyncio.Event()
        held = asyncio.create_task(hold_a_run(holder, admitted))
        async with asyncio.timeout(WAIT_S):
            await admitted.wait()
        assert not held.done(), held.result()  # result() raises what ended it
        runs = [asyncio.create_task(client_runs(clients[i % len(clients)])) for i in range(CLIENTS)]
        try:
            async with asyncio.timeout(WAIT_S):
                await asyncio.gather(applies(operator), *runs)
        finally:
            for task in [held, *runs]:
                task.cancel()
            await asyncio.gather(held, *runs, return_exceptions=True)

    # No run failed: every one got a provider, finished and carried the whole echo.
    assert len(answers) >= CLIENTS
    problems = {
        i: (a.status, a.problem)
        for i, a in answers.items()
        if a is None or a.status != 200 or a.problem
    }
    assert problems == {}
    finished = {i: a for i, a in answers.items() if a is not None}
    wrong = {i: a.content for i, a in finished.items() if a.content != f"echo: {prompt(i)}"}
    assert wrong == {}
    classes = {i: a.context_class for i, a in finished.items()}
    assert classes == {i: "long" if is_long(i) else "normal" for i in answers}

    # Every apply was applied while the Edge held runs (the held one at least), took effect at
    # once, and was acked by every Node whose config it changed.
    statuses = [result["status"] for _, result in applied]
    assert set(statuses) <= {"applied", "no_change"} and "applied" in statuses, statuses
    assert all(busy(state) > 0 for state in after_apply), [busy(s) for s in after_apply]
    for (config, result), state in zip(applied, after_apply, strict=True):
        assert state["revision"] == result["candidate_revision"]
        assert in_force(state) == configured(config)
    pushes = [push for _, result in applied for push in result["node_pushes"]]
    assert pushes and all(push["status"] == "acked" for push in pushes), pushes
    acked = {
        push["node"]: result["candidate_revision"]
        for _, result in applied
        for push in result["node_pushes"]
    }

    # Afterwards every counter is back at zero and the Edge runs the last config applied.
    async def idle_status() -> dict[str, Any] | None:
        state = await astatus(edge)
        return state if idle(state) else None

    state = await await_until(idle_status, timeout=10, what="every counter back at zero")
    last_config, last = applied[-1]
    assert state["revision"] == last["candidate_revision"]
    assert in_force(state) == configured(last_config)
    assert {
        node_id: (n["ready"], n["acked_revision"]) for node_id, n in state["nodes"].items()
    } == {node_id: (True, acked[node_id]) for node_id in NODES}
    assert all(node.process.poll() is None for node in load_stack.nodes)
