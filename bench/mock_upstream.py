"""A fast mock OpenAI upstream for benchmarks: raw asyncio, fixed answers, keep-alive.

`python bench/mock_upstream.py PORT` serves `POST /v1/chat/completions` (JSON or SSE when the
body asks for `"stream": true`) and `GET /v1/models`.
"""

from __future__ import annotations

import asyncio
import json
import sys

CHUNKS = ["Hello", " from", " the", " mock", " upstream", "."]


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _completion() -> bytes:
    body = {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": "mock",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(CHUNKS)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 8, "completion_tokens": len(CHUNKS), "total_tokens": 14},
    }
    return _response("200 OK", "application/json", json.dumps(body).encode())


def _stream() -> bytes:
    events = []
    for index, text in enumerate(CHUNKS):
        delta = {"role": "assistant", "content": text} if index == 0 else {"content": text}
        chunk = {
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        events.append(f"data: {json.dumps(chunk)}\n\n")
    final = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": len(CHUNKS), "total_tokens": 14},
    }
    events.append(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n")
    return _response("200 OK", "text/event-stream", "".join(events).encode())


COMPLETION, STREAM = _completion(), _stream()
MODELS = _response("200 OK", "application/json", b'{"object":"list","data":[{"id":"mock"}]}')


def next_request(buffer: bytes) -> tuple[str, bytes, bytes] | None:
    """The first whole request in ``buffer``: its head, its body and the bytes after it; None
    until it has all arrived."""
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = buffer[:head_end].decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    end = head_end + 4 + length
    if len(buffer) < end:
        return None
    return head, buffer[head_end + 4 : end], buffer[end:]


def wants_stream(body: bytes) -> bool:
    return b'"stream": true' in body or b'"stream":true' in body


class MockProtocol(asyncio.Protocol):
    """Answers every request at once: the model list, a whole completion or a whole stream."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := next_request(self.buffer)) is not None:
            head, body, self.buffer = request
            if head.startswith("GET"):
                self.transport.write(MODELS)
            elif wants_stream(body):
                self.stream()
            else:
                self.transport.write(COMPLETION)

    def stream(self) -> None:
        self.transport.write(STREAM)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(MockProtocol, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
