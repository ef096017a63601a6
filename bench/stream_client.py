"""Many concurrent streaming clients on raw asyncio sockets, for `bench/stream_bench.py`.

Each stream is one connection and one streamed chat completion. The client does no JSON and no
HTTP chunk parsing: it takes each read's arrival time and the stamps the paced upstream put in
the content (`bench/paced_upstream.py`), so thousands of streams cost it little. A round can be
split over several processes (``run_round`` in each); their results add up with ``merge``.
"""

from __future__ import annotations

import asyncio
import re
import resource
import time
from array import array
from dataclasses import dataclass, field

STAMP = re.compile(rb'"content":"@([0-9.]+)(?:@([0-9.]+))?"')
DONE = b"data: [DONE]"
RATE_BUCKET_S = 0.1


@dataclass
class RoundResult:
    """What a set of streams saw; the lists hold one value per token or per stream."""

    ttft_ms: array = field(default_factory=lambda: array("d"))  # per stream, as seen
    added_ttft_ms: array = field(default_factory=lambda: array("d"))  # per stream
    added_itl_ms: array = field(default_factory=lambda: array("d"))  # per consecutive pair
    tokens: int = 0
    completed: int = 0
    errors: int = 0
    cpu_s: float = 0.0
    # Tokens received per RATE_BUCKET_S since the round's t0.
    arrivals: array = field(default_factory=lambda: array("l"))
    started_at: array = field(default_factory=lambda: array("d"))  # per stream, since t0
    ended_at: array = field(default_factory=lambda: array("d"))  # per stream, since t0

    def count_arrivals(self, t: float, count: int) -> None:
        bucket = int(t / RATE_BUCKET_S)
        if bucket >= len(self.arrivals):
            self.arrivals.extend([0] * (bucket + 1 - len(self.arrivals)))
        self.arrivals[bucket] += count


def merge(results: list[RoundResult]) -> RoundResult:
    total = RoundResult()
    for result in results:
        for name in ("ttft_ms", "added_ttft_ms", "added_itl_ms", "started_at", "ended_at"):
            getattr(total, name).extend(getattr(result, name))
        total.tokens += result.tokens
        total.completed += result.completed
        total.errors += result.errors
        total.cpu_s += result.cpu_s
        for bucket, count in enumerate(result.arrivals):
            total.count_arrivals(bucket * RATE_BUCKET_S, count)
    return total


class _StreamProtocol(asyncio.Protocol):
    """One streamed answer: its head, then every stamped token until `[DONE]`."""

    def __init__(self, request: bytes, result: RoundResult, t0: float, expected: int) -> None:
        self.request = request
        self.result = result
        self.t0 = t0
        self.expected = expected
        self.buffer = b""
        self.head_seen = False
        self.tokens = 0
        self.last_recv = self.last_sent = 0.0
        self.finished = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.sent_at = time.monotonic()
        self.result.started_at.append(self.sent_at - self.t0)
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buffer = self.buffer + data
        if not self.head_seen:
            if b"\r\n\r\n" not in buffer:
                self.buffer = buffer
                return
            if not buffer.startswith(b"HTTP/1.1 200"):
                self._end(ok=False)
                return
            self.head_seen = True
        # Only whole events: a stamp split over two reads is read with the second.
        cut = buffer.rfind(b"\n\n") + 2
        whole, self.buffer = buffer[:cut], buffer[cut:]
        result = self.result
        count = 0
        for match in STAMP.finditer(whole):
            sent = float(match[1])
            if match[2] is not None:  # the first token: @SENT@RECEIVED
                ttft = now - self.sent_at
                result.ttft_ms.append(ttft * 1000)
                result.added_ttft_ms.append((ttft - (sent - float(match[2]))) * 1000)
            else:
                result.added_itl_ms.append(
                    ((now - self.last_recv) - (sent - self.last_sent)) * 1000
                )
            self.last_recv, self.last_sent = now, sent
            count += 1
        if count:
            self.tokens += count
            result.tokens += count
            result.count_arrivals(now - self.t0, count)
        if DONE in whole:
            self._end(ok=self.tokens == self.expected)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ok=False)

    def _end(self, *, ok: bool) -> None:
        if self.finished.done():
            return
        if ok:
            self.result.completed += 1
            self.result.ended_at.append(time.monotonic() - self.t0)
        else:
            self.result.errors += 1
        self.finished.set_result(None)
        self.transport.close()


async def _one_stream(
    host: str,
    port: int,
    request: bytes,
    start_at: float,
    t0: float,
    expected: int,
    timeout_s: float,
    result: RoundResult,
) -> None:
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    loop = asyncio.get_running_loop()
    try:
        _, protocol = await loop.create_connection(
            lambda: _StreamProtocol(request, result, t0, expected), host, port
        )
    except OSError:
        result.errors += 1
        return
    try:
        await asyncio.wait_for(asyncio.shield(protocol.finished), timeout_s)
    except TimeoutError:
        protocol._end(ok=False)


async def _round(
    host: str,
    port: int,
    request: bytes,
    starts: list[float],
    t0: float,
    expected: int,
    timeout_s: float,
) -> RoundResult:
    result = RoundResult()
    await asyncio.gather(
        *(
            _one_stream(host, port, request, start, t0, expected, timeout_s, result)
            for start in starts
        )
    )
    return result


def run_round(
    host: str,
    port: int,
    request: bytes,
    starts: list[float],
    t0: float,
    expected: int,
    timeout_s: float,
) -> RoundResult:
    """Open one stream at each of ``starts`` (monotonic times), each expecting ``expected``
    tokens; wait for all of them, at most ``timeout_s`` each. Its own CPU time included."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cpu = time.process_time()
    result = asyncio.run(_round(host, port, request, starts, t0, expected, timeout_s))
    result.cpu_s = time.process_time() - cpu
    return result
