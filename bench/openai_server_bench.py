"""The OpenAI listener served by daphne and by uvicorn (`openai.server`), side by side.

Run: ``.venv/bin/python bench/openai_server_bench.py [--quick]``. Two stacks of
``bench/gateway_bench.py`` (mock upstream, Edge, Node), alike but for `openai.server`: one Edge
serves the OpenAI API on daphne's public listener, the other on an `openai.listen` served by
uvicorn in its process. The load generator alternates between the two, rounds apart, so both
meet the same machine: requests per second at concurrency 32, the Edge's CPU per request, and the
added p50 of one request at a time over the mock called directly. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import gateway_bench
from edge_stack import rounded
from loadgen import Result, build_request, run_load

from edge.config.schema import OPENAI_SERVERS


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(
    stack: gateway_bench.Stack,
    port: int,
    body: bytes,
    concurrency: int,
    seconds: float,
    requests: int | None = None,
) -> Result:
    request = build_request("127.0.0.1", port, "/v1/chat/completions", body, stack.client_token)
    return asyncio.run(
        run_load(
            "127.0.0.1",
            port,
            request,
            concurrency=concurrency,
            seconds=seconds,
            max_requests_per_worker=requests,
        )
    )


def measure(
    stacks: dict[str, gateway_bench.Stack], rounds: int, seconds: float, unloaded: int
) -> dict[str, Any]:
    bodies = {"whole": gateway_bench.BODY, "stream": gateway_bench.STREAM_BODY}
    for stack in stacks.values():
        load(stack, stack.api_port, gateway_bench.BODY, 32, 1.0)  # warm up
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for server, stack in stacks.items():
            for kind, body in bodies.items():
                before = cpu_s(stack.edge.pid)
                result = load(stack, stack.api_port, body, 32, seconds)
                used = cpu_s(stack.edge.pid) - before
                runs.setdefault(f"{server}_{kind}", []).append(
                    {
                        "rps": result.rps,
                        "edge_us_per_request": used / max(1, len(result.latencies_ms)) * 1e6,
                        "errors": result.errors,
                    }
                )
            p50 = load(stack, stack.api_port, gateway_bench.BODY, 1, 30, unloaded).percentile(50)
            runs.setdefault(f"{server}_unloaded", []).append({"p50_ms": p50})
    mock = stacks["daphne"]
    direct = load(mock, mock.mock_port, gateway_bench.BODY, 1, 30, unloaded).percentile(50)
    figures: dict[str, Any] = {"direct_unloaded_p50_ms": direct}
    for key, values in runs.items():
        figures[key] = {name: statistics.median(v[name] for v in values) for name in values[0]}
    for server in stacks:
        figures[f"{server}_unloaded"]["added_p50_ms"] = (
            figures[f"{server}_unloaded"]["p50_ms"] - direct
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 2 s per case")
    args = parser.parse_args()
    rounds, seconds, unloaded = (1, 2.0, 200) if args.quick else (3, 5.0, 500)
    workdir = Path(tempfile.mkdtemp(prefix="iop-server-"))
    stacks: dict[str, gateway_bench.Stack] = {}
    try:
        for server in OPENAI_SERVERS:
            (workdir / server).mkdir()
            stacks[server] = gateway_bench.Stack(workdir / server, openai_server=server)
            stacks[server].start()
        figures = measure(stacks, rounds, seconds, unloaded)
    finally:
        for stack in stacks.values():
            stack.stop()
    print(
        f"{'server':<10}{'req/s':>9}{'Edge µs/req':>13}{'stream req/s':>14}"
        f"{'Edge µs/req':>13}{'added p50':>11}"
    )
    for server in OPENAI_SERVERS:
        whole, stream = figures[f"{server}_whole"], figures[f"{server}_stream"]
        added = figures[f"{server}_unloaded"]["added_p50_ms"]
        print(
            f"{server:<10}{whole['rps']:>9.0f}{whole['edge_us_per_request']:>13.0f}"
            f"{stream['rps']:>14.0f}{stream['edge_us_per_request']:>13.0f}{added:>8.2f} ms"
        )
    print(json.dumps({"bench": "openai_server", "rounds": rounds, **rounded(figures, 3)}))


if __name__ == "__main__":
    main()
