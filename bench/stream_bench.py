"""Streaming benchmark: N concurrent paced streams through an Edge and a Node.

A paced mock upstream (`bench/paced_upstream.py`: ``--tokens-per-s`` per stream, answers of
``--tokens`` chunks) behind the `openai_http` adapter; for each N of ``--sizes``, N streaming
clients (`bench/stream_client.py`, raw asyncio, spread over ``--clients`` processes) each open
one stream, all started within the ramp. Per N: tokens relayed per second, Edge and Node CPU per
1,000 tokens, added time to first token and added inter-token gap (what the client saw minus what
the upstream did), Edge and Node RSS (the highest sampled during the round), errors, and the CPU
the mock and the clients used. The last line printed is one JSON object.

    python bench/stream_bench.py [--quick] [--sizes 100,500,1000,2000] [--openai-server uvicorn]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from edge_stack import rss_mb
from gateway_bench import STREAM_BODY, Stack
from loadgen import build_request
from stream_client import RATE_BUCKET_S, RoundResult, merge, run_round

from edge.config.schema import OPENAI_SERVERS

SIZES = (100, 500, 1000, 2000)
QUICK_SIZES = (20, 100)
ITL_P99_TARGET_MS = 50.0
# New streams per second while a round ramps up: a real fleet's callers do not all arrive in
# the same millisecond, and the ramp is not what this measures.
RAMP_STREAMS_PER_S = 500
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    data = sorted(values)
    return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]


def steady_rate(result: RoundResult, ramp_s: float) -> float:
    """Tokens per second while every stream was open (after the ramp, before the first end);
    over the whole round when answers are too short to have such a window."""
    first_end = min(result.ended_at, default=0.0)
    begin, end = int(ramp_s / RATE_BUCKET_S) + 1, int(first_end / RATE_BUCKET_S)
    if end - begin >= 5:
        return sum(result.arrivals[begin:end]) / ((end - begin) * RATE_BUCKET_S)
    span = max(result.ended_at, default=0.0) - min(result.started_at, default=0.0)
    return result.tokens / span if span > 0 else 0.0


def one_round(
    stack: Stack,
    pool: ProcessPoolExecutor,
    clients: int,
    streams: int,
    answer_s: float,
    tokens: int,
) -> dict:
    request = build_request(
        "127.0.0.1", stack.api_port, "/v1/chat/completions", STREAM_BODY, stack.client_token
    )
    ramp_s = streams / RAMP_STREAMS_PER_S
    t0 = time.monotonic() + 0.3
    starts = [t0 + ramp_s * i / streams for i in range(streams)]
    timeout_s = ramp_s + 3 * answer_s + 30
    pids = {"edge": stack.edge.pid, "node": stack.node.pid, "mock": stack.mock.pid}
    cpu_before = {name: cpu_s(pid) for name, pid in pids.items()}
    wall = time.monotonic()
    futures = [
        pool.submit(
            run_round,
            "127.0.0.1",
            stack.api_port,
            request,
            starts[index::clients],
            t0,
            tokens,
            timeout_s,
        )
        for index in range(clients)
    ]
    peak = {"edge": 0.0, "node": 0.0}
    while not all(future.done() for future in futures):
        for name in peak:
            peak[name] = max(peak[name], rss_mb(pids[name]))
        time.sleep(0.25)
    result = merge([future.result() for future in futures])
    wall = time.monotonic() - wall
    cpu = {name: cpu_s(pid) - cpu_before[name] for name, pid in pids.items()}
    per_1k = 1000 * 1000 / result.tokens if result.tokens else float("nan")  # ms per 1,000
    itl, ttft = list(result.added_itl_ms), list(result.added_ttft_ms)
    return {
        "streams": streams,
        "tokens_per_s": round(steady_rate(result, ramp_s), 1),
        "tokens": result.tokens,
        "added_ttft_p50_ms": round(percentile(ttft, 50), 2),
        "added_ttft_p99_ms": round(percentile(ttft, 99), 2),
        "added_itl_p50_ms": round(percentile(itl, 50), 2),
        "added_itl_p99_ms": round(percentile(itl, 99), 2),
        "edge_cpu_ms_per_1k_tokens": round(cpu["edge"] * per_1k, 1),
        "node_cpu_ms_per_1k_tokens": round(cpu["node"] * per_1k, 1),
        "edge_cpu_pct": round(100 * cpu["edge"] / wall, 1),
        "node_cpu_pct": round(100 * cpu["node"] / wall, 1),
        "mock_cpu_pct": round(100 * cpu["mock"] / wall, 1),
        "loadgen_cpu_pct": round(100 * result.cpu_s / wall, 1),
        "edge_rss_mb": round(peak["edge"], 1),
        "node_rss_mb": round(peak["node"], 1),
        "errors": result.errors,
    }


COLUMNS = (
    ("streams", "streams", "d"),
    ("tokens_per_s", "tok/s", ".0f"),
    ("added_ttft_p50_ms", "ttft50", ".1f"),
    ("added_ttft_p99_ms", "ttft99", ".1f"),
    ("added_itl_p99_ms", "itl99", ".1f"),
    ("edge_cpu_ms_per_1k_tokens", "edge/1k", ".0f"),
    ("node_cpu_ms_per_1k_tokens", "node/1k", ".0f"),
    ("edge_cpu_pct", "edge%", ".0f"),
    ("node_cpu_pct", "node%", ".0f"),
    ("mock_cpu_pct", "mock%", ".0f"),
    ("loadgen_cpu_pct", "load%", ".0f"),
    ("edge_rss_mb", "edgeMB", ".0f"),
    ("node_rss_mb", "nodeMB", ".0f"),
    ("errors", "errors", "d"),
)


def print_row(row: dict) -> None:
    print(" ".join(f"{row[key]:>8{form}}" for key, _, form in COLUMNS), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"N = {QUICK_SIZES}, short answers")
    parser.add_argument("--sizes", help="comma-separated N, e.g. 100,500,1000,2000")
    parser.add_argument("--tokens-per-s", type=float, default=20.0, help="per stream (20)")
    parser.add_argument("--tokens", type=int, help="chunks per answer (200; --quick: 40)")
    parser.add_argument("--clients", type=int, default=2, help="client processes (2)")
    parser.add_argument(
        "--openai-server",
        choices=OPENAI_SERVERS,
        default=OPENAI_SERVERS[0],
        help="the HTTP server of the OpenAI API (openai.server; default %(default)s)",
    )
    args = parser.parse_args()
    sizes = (
        tuple(int(size) for size in args.sizes.split(","))
        if args.sizes
        else QUICK_SIZES
        if args.quick
        else SIZES
    )
    tokens = args.tokens or (40 if args.quick else 200)
    answer_s = tokens / args.tokens_per_s
    mock = ("bench/paced_upstream.py", "--tokens-per-s", str(args.tokens_per_s), "--tokens")
    print(
        f"{args.tokens_per_s:g} tokens/s per stream, {tokens} tokens per answer "
        f"({answer_s:g} s), {args.clients} client processes; added = through the Edge minus "
        "the upstream's own; CPU per 1,000 tokens in ms, % of one core"
    )
    print(" ".join(f"{title:>8}" for _, title, _ in COLUMNS))
    rows = []
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="iop-bench-") as workdir:
        stack = Stack(
            Path(workdir),
            (*mock, str(tokens)),
            capacity=max(sizes) + 64,
            openai_server=args.openai_server,
        )
        try:
            stack.start()
            with ProcessPoolExecutor(args.clients, mp_context=context) as pool:
                for streams in sizes:
                    rows.append(one_round(stack, pool, args.clients, streams, answer_s, tokens))
                    print_row(rows[-1])
                    time.sleep(1.0)  # the last runs' leases and cleanup settle
        finally:
            stack.stop()
    held = [
        row["streams"]
        for row in rows
        if row["added_itl_p99_ms"] <= ITL_P99_TARGET_MS and row["errors"] == 0
    ]
    print(
        json.dumps(
            {
                "bench": "stream",
                "openai_server": args.openai_server,
                "tokens_per_s_per_stream": args.tokens_per_s,
                "answer_tokens": tokens,
                "max_streams_itl_p99_ok": max(held, default=0),
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
