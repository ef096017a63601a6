"""A mock OpenAI upstream that paces its streamed answers like a model generating tokens.

`python bench/paced_upstream.py PORT [--tokens-per-s 20] [--tokens 200]` answers every
`POST /v1/chat/completions` with a stream of ``--tokens`` content chunks, one every
1/``--tokens-per-s`` seconds (a non-stream request gets the fast mock's fixed answer).

Each chunk's content is a stamp: ``@SENT`` (``time.monotonic()`` when the chunk was written, the
same clock in every process on the machine), the first one ``@SENT@RECEIVED`` (when the request
had arrived). A client reading through a gateway subtracts the upstream's own gaps and its own
time to the first token, so what is left is what the gateway added.

Thousands of streams stay cheap: time is cut into ticks of ``TICK_S``, each stream belongs to
the tick phase it arrived in, and each tick writes one shared chunk to every stream of its phase
(one timer per tick, not one per token). A stream's chunks are still exactly one period apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from mock_upstream import MockProtocol

from edge.ports import raise_open_files_limit

TICK_S = 0.005


def _event(chunk: dict) -> bytes:
    data = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)  # one HTTP/1.1 chunk


def _token(content: str, *, first: bool = False) -> bytes:
    delta = {"role": "assistant", "content": content} if first else {"content": content}
    return _event(
        {
            "id": "chatcmpl-paced",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
    )


def _tail(tokens: int) -> bytes:
    final = {
        "id": "chatcmpl-paced",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens},
    }
    done = b"data: [DONE]\n\n"
    return _event(final) + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


class _Stream:
    __slots__ = ("left", "protocol", "received")

    def __init__(self, protocol: PacedProtocol, received: float, tokens: int) -> None:
        self.protocol = protocol
        self.received = received
        self.left = tokens


class Pacer:
    """The streams in flight, by tick phase; one timer writes a phase's chunks each tick."""

    def __init__(self, tokens_per_s: float, tokens: int) -> None:
        self.tokens = tokens
        self.phases = max(1, round(1 / tokens_per_s / TICK_S))
        self.streams: list[list[_Stream]] = [[] for _ in range(self.phases)]
        self.tick = 0
        self.tail = _tail(tokens)
        self.loop = asyncio.get_running_loop()
        self.next_at = self.loop.time()
        self._schedule()

    def start(self, protocol: PacedProtocol) -> None:
        received = time.monotonic()
        # Joins the next tick's phase: its first chunk goes out within one tick.
        self.streams[self.tick % self.phases].append(_Stream(protocol, received, self.tokens))

    def _schedule(self) -> None:
        self.next_at += TICK_S
        self.loop.call_at(self.next_at, self._on_tick)

    def _on_tick(self) -> None:
        phase = self.streams[self.tick % self.phases]
        self.tick += 1
        self._schedule()
        if not phase:
            return
        now = time.monotonic()
        shared = _token(f"@{now:.6f}")
        kept = []
        for stream in phase:
            transport = stream.protocol.transport
            if transport.is_closing():
                continue
            if stream.left == self.tokens:
                transport.write(_token(f"@{now:.6f}@{stream.received:.6f}", first=True))
            else:
                transport.write(shared)
            stream.left -= 1
            if stream.left:
                kept.append(stream)
            else:
                transport.write(self.tail)
        phase[:] = kept


class PacedProtocol(MockProtocol):
    """The mock upstream, its streams paced by ``pacer``."""

    pacer: Pacer

    def stream(self) -> None:
        self.transport.write(STREAM_HEAD)
        self.pacer.start(self)


async def serve(port: int, tokens_per_s: float, tokens: int) -> None:
    PacedProtocol.pacer = Pacer(tokens_per_s, tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(PacedProtocol, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--tokens-per-s", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    raise_open_files_limit()
    asyncio.run(serve(args.port, args.tokens_per_s, args.tokens))


if __name__ == "__main__":
    main()
