"""openai_http runs through a real Edge and Node against a small real upstream HTTP server.

The upstream is a threaded ``http.server`` in the test process speaking OpenAI chat completions
(SSE with a final usage chunk and ``[DONE]``, ``GET /v1/models`` for the Node's health probe). What
it does depends on the last user message: ``fail <status>`` answers an HTTP error, ``slow ...``
streams one chunk every 100 ms for 10 s and records when its client hangs up.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.e2e.harness import EdgeProcess, NodeProcess, Tokens, echo_config, wait_until
from tests.e2e.nodes_support import (
    DONE,
    chat_body,
    client_headers,
    sse_payload,
    sse_payloads,
    status,
    streamed_content,
    two_ports,
    wait_idle,
    wait_node_ready,
)

NODE = "node-up"
PROVIDER = "up-1"
SERVED = "llama-8b"  # the route's target: the name the upstream must receive
UPSTREAM_KEY = "sk-upstream-test-key"
SLOW_CHUNKS = 100
SLOW_INTERVAL_S = 0.1  # so a slow stream lasts 10 s when nobody hangs up

UPSTREAM_PROMPT_TOKENS = 11


@dataclass
class SlowStream:
    started: float
    chunks_sent: int = 0
    hung_up: float | None = None  # when the upstream saw its client's connection close


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]  # names lower-cased


@dataclass
class Upstream:
    port: int
    requests: list[Received] = field(default_factory=list)
    slow: dict[str, SlowStream] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def last_request_saying(self, text: str) -> Received:
        with self.lock:
            return next(r for r in reversed(self.requests) if last_user_text(r.body) == text)

    def hung_up(self, text: str) -> SlowStream | None:
        """The slow stream for ``text`` once the upstream saw its client hang up."""
        with self.lock:
            record = self.slow.get(text)
        return record if record is not None and record.hung_up is not None else None


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def chunk(content: str | None, finish_reason: str | None = None) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": SERVED,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def upstream_usage(completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": UPSTREAM_PROMPT_TOKENS,
        "completion_tokens": completion_tokens,
        "total_tokens": UPSTREAM_PROMPT_TOKENS + completion_tokens,
    }


def upstream_reply(text: str) -> list[str]:
    return [f"{word} " for word in f"upstream says {text}".split()]


class UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked streaming: like vLLM behind uvicorn
    server: UpstreamServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": SERVED, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.upstream.lock:
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.server.upstream.requests.append(Received(body, headers))
        text = last_user_text(body)
        if text.startswith("fail "):
            status = int(text.split()[1])
            self._json(status, {"error": {"message": f"upstream refused ({status})"}})
        elif text.startswith("slow"):
            self._slow(text)
        elif body.get("stream") is True:
            self._stream(text)
        else:
            self._complete(text)

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, payload: Any) -> None:
        data = f"data: {payload if payload == DONE else json.dumps(payload)}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _complete(self, text: str) -> None:
        words = upstream_reply(text)
        self._json(
            200,
            {
                "id": "chatcmpl-upstream",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": SERVED,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(words)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": upstream_usage(len(words)),
            },
        )

    def _stream(self, text: str) -> None:
        words = upstream_reply(text)
        self._start_sse()
        for word in words:
            self._event(chunk(word))
        self._event(chunk(None, "stop"))
        self._event(
            {
                "id": "chatcmpl-upstream",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": SERVED,
                "choices": [],
                "usage": upstream_usage(len(words)),
            }
        )
        self._event(DONE)
        self._end_chunked()

    def _slow(self, text: str) -> None:
        record = SlowStream(started=time.monotonic())
        with self.server.upstream.lock:
            self.server.upstream.slow[text] = record
        self._start_sse()
        try:
            for index in range(SLOW_CHUNKS):
                self._event(chunk(f"t{index} "))
                record.chunks_sent += 1
                if self._peer_closed_within(SLOW_INTERVAL_S):
                    break
            else:
                self._event(chunk(None, "stop"))
                self._event(DONE)
                self._end_chunked()
                return
        except (BrokenPipeError, ConnectionResetError):
            pass
        record.hung_up = time.monotonic()
        self.close_connection = True

    def _peer_closed_within(self, seconds: float) -> bool:
        """Pace the stream; True as soon as the client's side of the connection is closed."""
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except ConnectionResetError:
            return True


class UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: Upstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = UpstreamServer(("127.0.0.1", 0), UpstreamHandler)
    server.upstream = Upstream(port=server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="upstream", daemon=True)
    thread.start()
    yield server.upstream
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@dataclass
class HttpStack:
    edge: EdgeProcess
    node: NodeProcess
    upstream: Upstream


@pytest.fixture(scope="module")
def http_stack(
    tokens: Tokens,
    upstream: Upstream,
    edge_factory: Callable[..., EdgeProcess],
    node_factory: Callable[..., NodeProcess],
) -> HttpStack:
    public, admin = two_ports()
    config = echo_config(
        tokens,
        public,
        admin,
        node_id=NODE,
        adapters=[
            {
                "id": "up",
                "type": "openai_http",
                "base_url": upstream.base_url,
                "api_key_env": "UPSTREAM_API_KEY",
            }
        ],
        providers=[{"id": PROVIDER, "adapter": "up", "served_models": [SERVED], "capacity": 4}],
        models=[{"id": "chat", "providers": {PROVIDER: SERVED}}],
    )
    edge = edge_factory(config, name="nodes-openai-http")
    node = node_factory(edge, NODE, env={"UPSTREAM_API_KEY": UPSTREAM_KEY})
    return HttpStack(edge, node, upstream)


@pytest.fixture
def stack(http_stack: HttpStack) -> HttpStack:
    wait_node_ready(http_stack.edge, NODE)
    wait_until(
        lambda: status(http_stack.edge)["providers"][PROVIDER]["healthy"],
        what="the upstream provider to be healthy",
    )
    return http_stack


def test_a_non_streamed_request_reaches_the_upstream_as_its_served_model(
    stack: HttpStack, tokens: Tokens
) -> None:
    response = httpx.post(
        stack.edge.completions_url,
        json=chat_body("chat", "plain question", max_tokens=32),
        headers=client_headers(tokens),
        timeout=10,
    )

    assert response.status_code == 200, response.text
    assert response.headers["x-iop-provider"] == PROVIDER
    assert response.headers["x-iop-node"] == NODE
    body = response.json()
    assert body["model"] == "chat"
    assert body["choices"][0]["message"]["content"] == "upstream says plain question "
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == upstream_usage(4)

    sent = stack.upstream.last_request_saying("plain question")
    assert sent.body["model"] == SERVED
    assert sent.body["max_tokens"] == 32
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # from api_key_env
    wait_idle(stack.edge, PROVIDER)


def test_a_streamed_request_relays_the_upstream_chunks(stack: HttpStack, tokens: Tokens) -> None:
    body = chat_body("chat", "stream this", stream=True, stream_options={"include_usage": True})
    with httpx.stream(
        "POST", stack.edge.completions_url, json=body, headers=client_headers(tokens), timeout=10
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-iop-provider"] == PROVIDER
        assert response.headers["x-iop-node"] == NODE
        events = sse_payloads(response.iter_lines())

    assert events[-1] == DONE
    chunks = events[:-1]
    assert streamed_content(chunks) == "upstream says stream this "
    assert all(c["model"] == "chat" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["usage"] == upstream_usage(4)
    sent = stack.upstream.last_request_saying("stream this").body
    assert sent["model"] == SERVED
    assert sent["stream"] is True
    assert sent["stream_options"]["include_usage"] is True
    wait_idle(stack.edge, PROVIDER)


@pytest.mark.parametrize("upstream_status", [500, 503])
def test_an_upstream_http_error_is_a_502_naming_the_upstream_status_and_message(
    stack: HttpStack, tokens: Tokens, upstream_status: int
) -> None:
    response = httpx.post(
        stack.edge.completions_url,
        json=chat_body("chat", f"fail {upstream_status}"),
        headers=client_headers(tokens),
        timeout=10,
    )

    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_error"
    assert error["type"] == "server_error"
    assert str(upstream_status) in error["message"]
    assert f"upstream refused ({upstream_status})" in error["message"]
    assert response.headers["x-iop-provider"] == PROVIDER
    wait_idle(stack.edge, PROVIDER)


def test_an_upstream_that_rejects_the_request_is_a_400_not_a_retryable_502(
    stack: HttpStack, tokens: Tokens
) -> None:
    response = httpx.post(
        stack.edge.completions_url,
        json=chat_body("chat", "fail 400"),
        headers=client_headers(tokens),
        timeout=10,
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("upstream_rejected", "invalid_request_error")
    assert error["message"] == "upstream refused (400)"  # the upstream's own words
    wait_idle(stack.edge, PROVIDER)


def test_a_streamed_request_failing_upstream_gets_the_upstream_status_and_message(
    stack: HttpStack, tokens: Tokens
) -> None:
    with httpx.stream(
        "POST",
        stack.edge.completions_url,
        json=chat_body("chat", "fail 429", stream=True),
        headers=client_headers(tokens),
        timeout=10,
    ) as response:
        response.read()

    # Whether the Edge answers before committing to a stream (429) or ends the stream with the
    # error event is the OpenAI API's choice; either way the caller gets the upstream's reason.
    if response.status_code == 200:
        events = sse_payloads(response.text.splitlines())
        assert DONE not in events
        error = events[-1]["error"]
    else:
        assert response.status_code == 429, response.text
        error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "429" in error["message"]
    assert "upstream refused (429)" in error["message"]
    wait_idle(stack.edge, PROVIDER)


def test_a_caller_that_goes_away_cancels_the_run_and_the_upstream_sees_its_connection_close(
    stack: HttpStack, tokens: Tokens
) -> None:
    text = "slow story please"
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST",
            stack.edge.completions_url,
            json=chat_body("chat", text, stream=True),
            headers=client_headers(tokens),
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()  # held open: dropping the iterator closes the response
        first = next(event for line in lines if (event := sse_payload(line)) is not None)
        assert streamed_content([first]) == "t0 "
        assert status(stack.edge)["providers"][PROVIDER]["in_flight"] == 1
    # Leaving both blocks closed the caller's connection mid-stream.
    left_at = time.monotonic()

    record = wait_until(
        lambda: stack.upstream.hung_up(text),
        timeout=5,
        what="the upstream to see its connection closed",
    )
    assert record.hung_up - left_at < 3
    assert record.chunks_sent < SLOW_CHUNKS / 2, "the upstream should stop well before the end"
    wait_idle(stack.edge, PROVIDER)
    # Events the Node had in flight before it read the cancel are dropped, not refused.
    assert "refused run.event" not in stack.edge.log()
