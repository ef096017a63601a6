"""Slow and greedy clients of a real Edge (its OpenAI API served by daphne, then by uvicorn): a
request must be read whole within the read deadline, one peer holds at most its cap of
connections (counted across the listeners), and the open-files limit is raised.

Raw sockets do what an HTTP library would not: trickle a header a byte at a time, hold many
connections open. The settings are small here (the Edge's environment) so the tests are short.
"""

from __future__ import annotations

import resource
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import Tokens, echo_config, wait_until

READ_TIMEOUT_S = 1.5
MAX_CONNECTIONS_PER_PEER = 8
TRICKLE_INTERVAL_S = 0.25  # well within the deadline: an idle timeout would never fire
WAIT_S = 30.0  # what the tests wait for at most; never what they assert


def slow_echo_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    return echo_config(
        tokens,
        public,
        admin,
        adapters=[{"id": "slow", "type": "echo", "token_delay_ms": 200}],
        providers=[{"id": "slow-1", "adapter": "slow", "served_models": ["slow"], "capacity": 2}],
        models=[{"id": "echo", "providers": {"slow-1": "slow"}}],
    )


@pytest.fixture(scope="module")
def deadline_stack(
    openai_stack_factory: Callable[..., OpenAIStack], openai_server: str
) -> OpenAIStack:
    env = {"IOP_REQUEST_READ_TIMEOUT_S": str(READ_TIMEOUT_S)}
    stack = openai_stack_factory(slow_echo_config, env=env, name="deadline", server=openai_server)
    stack.start_node("node-a")
    return stack


@pytest.fixture(scope="module")
def lowered_soft_limit() -> Iterator[int]:
    """The soft open-files limit of processes started meanwhile: below their hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(1024, hard // 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        yield lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def capped_stack(
    openai_stack_factory: Callable[..., OpenAIStack], lowered_soft_limit: int, openai_server: str
) -> OpenAIStack:
    # Loopback is the only peer a test has: capped here as a remote host would be.
    env = {
        "IOP_MAX_CONNECTIONS_PER_PEER": str(MAX_CONNECTIONS_PER_PEER),
        "IOP_CAP_LOOPBACK_PEERS": "true",
    }
    # Inherits the low limit.
    stack = openai_stack_factory(echo_config, env=env, name="capped", server=openai_server)
    stack.start_node("node-a")
    return stack


def connect(stack: OpenAIStack) -> socket.socket:
    return socket.create_connection(("127.0.0.1", stack.edge.openai_port), timeout=WAIT_S)


def closed_by_edge(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_a_request_trickled_a_byte_at_a_time_is_cut_at_the_deadline(
    deadline_stack: OpenAIStack,
) -> None:
    with connect(deadline_stack) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        give_up = time.monotonic() + WAIT_S
        while time.monotonic() < give_up:
            readable, _, _ = select.select([sock], [], [], TRICKLE_INTERVAL_S)
            if readable:
                assert closed_by_edge(sock)
                return
            try:
                sock.sendall(b"x")  # one more byte of a header that never ends
            except (BrokenPipeError, ConnectionResetError):
                return
    raise AssertionError(f"the Edge still held a trickling connection after {WAIT_S} s")


def test_a_stream_longer_than_the_deadline_is_not_cut(deadline_stack: OpenAIStack) -> None:
    words = " ".join(f"w{i}" for i in range(int(READ_TIMEOUT_S / 0.2) * 2))  # ~2x the deadline
    stream = deadline_stack.client().chat.completions.create(
        model="echo", messages=[{"role": "user", "content": words}], stream=True
    )

    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    assert text == f"echo: {words}"


def test_the_node_websocket_outlives_the_deadline(deadline_stack: OpenAIStack) -> None:
    # The stream above took longer than the deadline; the Node's socket is the one it opened.
    deadline_stack.wait_ready("node-a")
    assert "node node-a: disconnected" not in deadline_stack.edge.log()
    assert deadline_stack.edge.log().count("node node-a: connected") == 1


def test_a_keep_alive_client_is_served_within_the_deadline(deadline_stack: OpenAIStack) -> None:
    client: openai.OpenAI = deadline_stack.client()
    # Two requests on one pooled connection, each sent as a whole.
    assert [model.id for model in client.models.list()] == ["echo"]
    assert [model.id for model in client.models.list()] == ["echo"]


def models_request(stack: OpenAIStack) -> bytes:
    token = stack.tokens.client("app-1")
    return (
        f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()


def served(sock: socket.socket, request: bytes) -> bool:
    """Whether the Edge answers ``request`` on ``sock`` (the connection stays open after)."""
    try:
        sock.sendall(request)
        head = sock.recv(65536)
    except ConnectionResetError:
        return False
    if not head:
        return False
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return True


def test_a_peer_past_its_cap_is_refused_and_served_again_once_it_closes_some(
    capped_stack: OpenAIStack,
) -> None:
    request = models_request(capped_stack)
    held: list[socket.socket] = []
    try:
        # The Node holds one connection from this address already.
        for _ in range(MAX_CONNECTIONS_PER_PEER + 1):
            sock = connect(capped_stack)
            if not served(sock, request):
                sock.close()
                break
            held.append(sock)
        else:
            raise AssertionError(f"{len(held)} connections served, over the cap")
        assert 1 <= len(held) <= MAX_CONNECTIONS_PER_PEER - 1
        assert all(served(sock, request) for sock in held)  # those open are still served
        wait_until(lambda: "refusing more" in capped_stack.edge.log(), what="the refusal logged")
    finally:
        for sock in held:
            sock.close()

    def answered() -> bool:
        with connect(capped_stack) as sock:
            return served(sock, request)

    wait_until(answered, timeout=WAIT_S, what="a connection served again")
    capped_stack.wait_ready("node-a")
    assert "node node-a: disconnected" not in capped_stack.edge.log()


def test_the_edge_raises_its_soft_open_files_limit_to_the_hard_one(
    capped_stack: OpenAIStack, lowered_soft_limit: int
) -> None:
    limits = Path(f"/proc/{capped_stack.edge.process.pid}/limits").read_text()
    (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
    soft, hard = (int(value) for value in line.split()[3:5])

    assert soft == hard > lowered_soft_limit
    assert f"open files limit: {soft}" in capped_stack.edge.log()


def test_a_normal_request_is_served_under_the_cap(capped_stack: OpenAIStack) -> None:
    response = httpx.get(
        f"{capped_stack.edge.openai_url}/v1/models",
        headers={"Authorization": f"Bearer {capped_stack.tokens.client('app-1')}"},
        timeout=10,
    )

    assert response.status_code == 200
