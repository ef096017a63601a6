"""The OpenAI listener under daphne and under uvicorn, in one Edge process, side by side.

Run: ``.venv/bin/python bench/openai_server_bench.py [--quick]``. One Edge
(``bench/uvicorn_edge.py``: ``run_edge`` with uvicorn also serving the OpenAI ASGI app on a port of
its own, on the same event loop and runtime), one Node and the mock upstream of
``bench/gateway_bench.py``. The load
generator alternates between daphne's port and uvicorn's, rounds apart, so both meet the same
machine: requests per second at concurrency 32, the Edge's CPU per request, and the added p50 of
one request at a time over the mock called directly. Needs ``pip install uvicorn==0.38.0
httptools==0.9.0`` (not dependencies of the project); without them it says so and skips. The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import edge_stack
import gateway_bench
from edge_stack import free_port, rounded, spawn, wait_for
from loadgen import Result, build_request, run_load

from edge.ports import port_open

BENCH = Path(__file__).resolve().parent
SERVERS = ("daphne", "uvicorn")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DualStack(gateway_bench.Stack):
    """The gateway bench's stack, its Edge also serving the OpenAI API with uvicorn."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.uvicorn_port = free_port()

    def start(self) -> None:
        uvicorn_port = self.uvicorn_port

        def start_edge(edge: edge_stack.EdgeProcess, timeout: float = 120.0) -> float:
            started = time.monotonic()
            command = ["run_edge", "--config", str(edge.config_path)]
            script = str(BENCH / "uvicorn_edge.py")
            edge.process = spawn(
                [sys.executable, script, str(uvicorn_port), *command], edge.env, edge.log
            )
            wait_for(
                lambda: port_open("127.0.0.1", edge.public_port)
                and port_open("127.0.0.1", uvicorn_port),
                timeout,
                "the Edge and its uvicorn listener",
            )
            return time.monotonic() - started

        edge_stack.EdgeProcess.start = start_edge  # type: ignore[method-assign]
        super().start()


def load(
    stack: DualStack,
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


def measure(stack: DualStack, rounds: int, seconds: float, unloaded: int) -> dict[str, Any]:
    ports = {"daphne": stack.edge_port, "uvicorn": stack.uvicorn_port}
    bodies = {"whole": gateway_bench.BODY, "stream": gateway_bench.STREAM_BODY}
    for port in ports.values():
        load(stack, port, gateway_bench.BODY, 32, 1.0)  # warm up
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for server, port in ports.items():
            for kind, body in bodies.items():
                before = cpu_s(stack.edge.pid)
                result = load(stack, port, body, 32, seconds)
                used = cpu_s(stack.edge.pid) - before
                runs.setdefault(f"{server}_{kind}", []).append(
                    {
                        "rps": result.rps,
                        "edge_us_per_request": used / max(1, len(result.latencies_ms)) * 1e6,
                        "errors": result.errors,
                    }
                )
            p50 = load(stack, port, gateway_bench.BODY, 1, 30, unloaded).percentile(50)
            runs.setdefault(f"{server}_unloaded", []).append({"p50_ms": p50})
    direct = load(stack, stack.mock_port, gateway_bench.BODY, 1, 30, unloaded).percentile(50)
    figures: dict[str, Any] = {"direct_unloaded_p50_ms": direct}
    for key, values in runs.items():
        figures[key] = {name: statistics.median(v[name] for v in values) for name in values[0]}
    for server in SERVERS:
        figures[f"{server}_unloaded"]["added_p50_ms"] = (
            figures[f"{server}_unloaded"]["p50_ms"] - direct
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 2 s per case")
    args = parser.parse_args()
    missing = [m for m in ("uvicorn", "httptools") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"needs {' and '.join(missing)} (pip install uvicorn==0.38.0 httptools==0.9.0)"
        print(f"skipped: {reason}")
        print(json.dumps({"bench": "openai_server", "skipped": reason}))
        return
    rounds, seconds, unloaded = (1, 2.0, 200) if args.quick else (3, 5.0, 500)
    stack = DualStack(Path(tempfile.mkdtemp(prefix="iop-server-")))
    stack.start()
    try:
        figures = measure(stack, rounds, seconds, unloaded)
    finally:
        stack.stop()
    print(
        f"{'server':<10}{'req/s':>9}{'Edge µs/req':>13}{'stream req/s':>14}"
        f"{'Edge µs/req':>13}{'added p50':>11}"
    )
    for server in SERVERS:
        whole, stream = figures[f"{server}_whole"], figures[f"{server}_stream"]
        added = figures[f"{server}_unloaded"]["added_p50_ms"]
        print(
            f"{server:<10}{whole['rps']:>9.0f}{whole['edge_us_per_request']:>13.0f}"
            f"{stream['rps']:>14.0f}{stream['edge_us_per_request']:>13.0f}{added:>8.2f} ms"
        )
    print(json.dumps({"bench": "openai_server", "rounds": rounds, **rounded(figures, 3)}))


if __name__ == "__main__":
    main()
