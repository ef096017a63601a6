"""A small HTTP/1.1 load generator on raw asyncio: keep-alive connections, fixed requests.

Light enough to share two cores with the system under test; it measures whole-response latency
and, for SSE, the time to the first `data:` event.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    latencies_ms: list[float] = field(default_factory=list)
    first_event_ms: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed_s: float = 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.elapsed_s if self.elapsed_s else 0.0

    def percentile(self, p: float, values: list[float] | None = None) -> float:
        data = sorted(self.latencies_ms if values is None else values)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]


def build_request(host: str, port: int, path: str, body: bytes, token: str | None) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"host: {host}:{port}",
        "content-type: application/json",
        f"content-length: {len(body)}",
    ]
    if token:
        lines.append(f"authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader, started: float, result: Result) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lowered = head.lower()
    if b"content-length:" in lowered:
        start = lowered.index(b"content-length:") + 15
        length = int(lowered[start : lowered.index(b"\r\n", start)])
        body = await reader.readexactly(length)
        if b"data:" in body[:6]:
            result.first_event_ms.append((time.perf_counter() - started) * 1000)
        return status
    first = True
    while True:  # chunked
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if first and size and chunk.startswith(b"data:"):
            result.first_event_ms.append((time.perf_counter() - started) * 1000)
            first = False
        if size == 0:
            return status


async def _worker(
    host: str, port: int, request: bytes, deadline: float, result: Result, max_requests: int | None
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    done = 0
    try:
        while time.perf_counter() < deadline and (max_requests is None or done < max_requests):
            started = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader, started, result)
            if status == 200:
                result.latencies_ms.append((time.perf_counter() - started) * 1000)
            else:
                result.errors += 1
            done += 1
    finally:
        writer.close()


async def run_load(
    host: str,
    port: int,
    request: bytes,
    *,
    concurrency: int,
    seconds: float,
    max_requests_per_worker: int | None = None,
) -> Result:
    result = Result()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(
            _worker(host, port, request, deadline, result, max_requests_per_worker)
            for _ in range(concurrency)
        )
    )
    result.elapsed_s = time.perf_counter() - started
    return result
