"""A body over the limit is refused as soon as it can be known, never stored.

A real Edge (its OpenAI API served by daphne, then by uvicorn) with its own temporary directory,
and a raw socket client: it can send what an HTTP library would not (a huge Content-Length with
no body, a chunked body that never ends) and read the answer while it is still sending.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodes import wire
from tests.e2e.conftest import OpenAIStack
from tests.e2e.harness import echo_config

LIMIT = wire.MAX_BODY_BYTES  # the Edge runs with the default IOP_MAX_BODY_BYTES
CHUNK = 256 * 1024
READ_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def tmpdir_of_edge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("edge-tmp")


@pytest.fixture(scope="module")
def stack(
    openai_stack_factory: Callable[..., OpenAIStack], tmpdir_of_edge: Path, openai_server: str
) -> OpenAIStack:
    stack = openai_stack_factory(
        echo_config, env={"TMPDIR": str(tmpdir_of_edge)}, server=openai_server
    )
    stack.start_node("node-a")
    return stack


def files_of_edge_in(stack: OpenAIStack, directory: Path) -> list[str]:
    """What the Edge holds open under ``directory`` (unlinked temp files included) or left there."""
    held = []
    for fd in Path(f"/proc/{stack.edge.process.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed while listing
            continue
        if target.startswith(str(directory)):
            held.append(target)
    return held + [str(path) for path in directory.iterdir()]


def head(headers: dict[str, str], path: str = "/v1/chat/completions") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response: status, headers (lowercased names), body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        received = sock.recv(65536)
        if not received:
            raise AssertionError(f"connection closed before a response: {data!r}")
        data += received
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        received = sock.recv(65536)
        if not received:
            break
        body += received
    return int(status_line.split()[1]), headers, body


def exchange(
    stack: OpenAIStack, headers: dict[str, str], body: Iterable[bytes] = ()
) -> tuple[int, dict[str, str], bytes]:
    """Send a request head and ``body`` (as it comes), then read the answer."""
    with socket.create_connection(("127.0.0.1", stack.edge.openai_port), timeout=10) as sock:
        sock.settimeout(READ_TIMEOUT_S)
        sock.sendall(head(headers))
        for piece in body:
            sock.sendall(piece)
        return read_response(sock)


def chunked(data: bytes, *, end: bool) -> Iterable[bytes]:
    for start in range(0, len(data), CHUNK):
        piece = data[start : start + CHUNK]
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    if end:
        yield b"0\r\n\r\n"


def assert_body_too_large(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "error": {
            "message": f"The request body exceeds {LIMIT} bytes.",
            "type": "invalid_request_error",
            "param": None,
            "code": "body_too_large",
        }
    }


JSON = {"Content-Type": "application/json"}


def test_a_huge_content_length_is_refused_before_a_byte_of_body_is_read(
    stack: OpenAIStack, tmpdir_of_edge: Path
) -> None:
    # No credentials, 300 MiB announced, nothing sent: the answer cannot wait for the body.
    headers = {**JSON, "Content-Length": str(300 * 1024 * 1024)}

    assert_body_too_large(*exchange(stack, headers))
    assert files_of_edge_in(stack, tmpdir_of_edge) == []


def test_a_client_waiting_for_100_continue_gets_the_413_instead(stack: OpenAIStack) -> None:
    headers = {**JSON, "Content-Length": str(LIMIT + 1), "Expect": "100-continue"}

    assert_body_too_large(*exchange(stack, headers))


def test_a_chunked_body_is_refused_as_it_passes_the_limit(
    stack: OpenAIStack, tmpdir_of_edge: Path
) -> None:
    # With credentials, so that the body is read (uvicorn's listener asks for them first).
    token = stack.tokens.client("app-1")
    headers = {**JSON, "Transfer-Encoding": "chunked", "Authorization": f"Bearer {token}"}
    # Past the limit and never finished: only a server that counts as it reads can answer.
    body = chunked(b"x" * (LIMIT + 4 * CHUNK), end=False)

    assert_body_too_large(*exchange(stack, headers, body))
    assert files_of_edge_in(stack, tmpdir_of_edge) == []


def test_a_client_that_sends_its_whole_oversized_body_still_reads_the_413(
    stack: OpenAIStack,
) -> None:
    headers = {**JSON, "Content-Length": str(LIMIT + CHUNK)}

    assert_body_too_large(*exchange(stack, headers, [b"x" * (LIMIT + CHUNK)]))


def test_the_sdk_gets_the_413_with_its_error_code(stack: OpenAIStack) -> None:
    import openai

    client = stack.client()
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "x" * LIMIT}]
        )

    assert caught.value.status_code == 413
    assert caught.value.body["code"] == "body_too_large"  # type: ignore[index]


def chat(text: str) -> bytes:
    body: dict[str, Any] = {"model": "echo", "messages": [{"role": "user", "content": text}]}
    return json.dumps(body).encode()


@pytest.mark.parametrize("transfer", ["content-length", "chunked"])
def test_a_body_within_the_limit_is_served(
    stack: OpenAIStack, tmpdir_of_edge: Path, transfer: str
) -> None:
    text = "word " * (400 * 1024)  # 2 MiB: Twisted would have stored it in a file
    body = chat(text)
    # An iterator makes httpx send the body chunked.
    content = body if transfer == "content-length" else iter([body[:CHUNK], body[CHUNK:]])

    response = httpx.post(
        stack.edge.completions_url,
        content=content,
        headers={**JSON, "Authorization": f"Bearer {stack.tokens.client('app-1')}"},
        timeout=30,
    )

    assert response.status_code == 200, response.text[:500]
    assert response.json()["choices"][0]["message"]["content"] == f"echo: {text.strip()}"
    assert files_of_edge_in(stack, tmpdir_of_edge) == []


def test_a_head_past_the_limit_is_refused(stack: OpenAIStack, openai_server: str) -> None:
    # 64 KiB of one header, sent in pieces: neither server holds more than its limit of a head.
    with socket.create_connection(("127.0.0.1", stack.edge.openai_port), timeout=10) as sock:
        sock.settimeout(READ_TIMEOUT_S)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        try:
            for _ in range(16):
                sock.sendall(b"x" * 4096)
        except (BrokenPipeError, ConnectionResetError):
            pass  # cut off while sending: what was answered is still to be read
        try:
            answer = sock.recv(65536)
        except ConnectionResetError:
            answer = b""

    if openai_server == "uvicorn":  # the listener answers, naming the limit
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "head_too_large"
    else:  # Twisted drops a connection whose header line passes 16 KiB
        assert answer == b""
