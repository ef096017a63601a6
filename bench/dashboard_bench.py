"""What the live pool dashboard costs: per poll on the event loop, and on the request path.

- In this process, for a fleet config of N nodes x 10 providers (``--nodes``, 1,000 by default):
  reading the pool for one poll (``read_pool``, on the loop), building the answer
  (``dashboard_data``) and encoding it, each the best of several rounds, and the answer's size.
- A real Edge (``run_edge``) on that config plus one echo Node: chat requests at c=32 with no
  dashboard open and with one open in a logged-in staff session (polled as its page polls: every
  second, less often on a pool too large to read that often), in alternating rounds (so that
  drift on a shared machine hits both alike): p50 and p99 of each.

Prints a table, then one JSON object as the last line.

    python bench/dashboard_bench.py [--quick] [--nodes 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from admin_session import create_staff, log_in
from edge_stack import EdgeProcess, free_port, spawn, stop, wait_for
from fleet_config import fleet_yaml
from loadgen import Result, build_request, run_load

from edge.config import load_config_text
from edge.dashboard.data import dashboard_data, read_pool
from edge.runtime import EdgeRuntime

CONCURRENCY = 32
FEED = "/admin/dashboard/data.json"
STAFF, PASSWORD = "bench-operator", "bench-password-1"
NODE_TOKEN = "bench-echo-node-token"
BODY = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}
).encode()


def best_ms(rounds: int, step: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        best = min(best, (time.perf_counter() - started) * 1000)
    return best


async def build_figures(nodes: int, rounds: int) -> dict[str, float]:
    """One poll's work, in process, on a runtime whose Nodes are all connected and ready."""

    async def discard(batch: object) -> None:
        return None

    class Link:
        async def send_frame(self, frame: object) -> None:
            return None

        async def close_session(self, code: int) -> None:
            return None

    config = load_config_text(fleet_yaml(nodes))
    runtime = EdgeRuntime(config, None, discard, discard)
    for node in config.nodes:
        session, _ = runtime.nodes.attach(node.id, Link())
        session.agent_version = "0.1.0"
        runtime.nodes.mark_ready(session, config.revision)
    reading = read_pool(runtime)
    data = dashboard_data(reading)
    body = json.dumps(data, separators=(",", ":")).encode()
    return {
        "read_ms": best_ms(rounds, lambda: read_pool(runtime)),
        "build_ms": best_ms(rounds, lambda: dashboard_data(reading)),
        "encode_ms": best_ms(rounds, lambda: json.dumps(data, separators=(",", ":"))),
        "bytes": len(body),
    }


def edge_config(nodes: int, public_port: int, admin_port: int) -> dict[str, Any]:
    """The fleet config (its Nodes never connect) plus an echo Node that serves `bench`."""
    config = yaml.load(
        fleet_yaml(
            nodes, edge_listen=f"127.0.0.1:{public_port}", admin_listen=f"127.0.0.1:{admin_port}"
        ),
        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
    )
    config["nodes"].append(
        {
            "id": "bench-echo",
            "token_hash_sha256": hashlib.sha256(NODE_TOKEN.encode()).hexdigest(),
            "adapters": [{"id": "echo", "type": "echo"}],
            "providers": [
                {"id": "echo-1", "adapter": "echo", "served_models": ["echo"], "capacity": 256}
            ],
        }
    )
    config["models"].append({"id": "bench", "providers": {"echo-1": "echo"}})
    return config


class Poller:
    """A dashboard left open: its staff session fetches the feed every second."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.loop_ms: list[float] = []
        self.answer_ms: list[float] = []
        self.poll_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            response = self.client.get(FEED)
            response.raise_for_status()
            self.answer_ms.append((time.perf_counter() - started) * 1000)
            data = response.json()
            self.loop_ms.append(data["loop_ms"])
            self.poll_ms.append(data["poll_ms"])
            self._stop.wait(data["poll_ms"] / 1000)  # as the page waits


def load(port: int, seconds: float) -> Result:
    request = build_request("127.0.0.1", port, "/v1/chat/completions", BODY, None)
    return asyncio.run(
        run_load("127.0.0.1", port, request, concurrency=CONCURRENCY, seconds=seconds)
    )


def request_path_figures(nodes: int, seconds: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="iop-dashboard-bench-") as tmp:
        workdir = Path(tmp)
        public, admin = free_port(), free_port()
        config_path = workdir / "edge.yaml"
        config_path.write_text(yaml.safe_dump(edge_config(nodes, public, admin), sort_keys=False))
        edge = EdgeProcess(workdir, config_path, public, admin)
        node = None
        try:
            edge.migrate()
            create_staff(edge.env, STAFF, PASSWORD)
            edge.start()
            node = spawn(
                [
                    *(sys.executable, "-m", "nodes.agent", "--node-id", "bench-echo"),
                    *("--edge", f"ws://127.0.0.1:{public}/ws/node/", "--log-level", "WARNING"),
                ],
                {**edge.env, "IOP_NODE_TOKEN": NODE_TOKEN},
                edge.log,
            )
            wait_for(
                lambda: edge.status()["nodes"].get("bench-echo", {}).get("ready"), 60, "the Node"
            )
            with httpx.Client(base_url=f"http://127.0.0.1:{public}", timeout=60) as client:
                log_in(client, STAFF, PASSWORD)
                load(public, min(2.0, seconds))  # warm up connections and code paths
                quiet: list[Result] = []
                watched: list[Result] = []
                poller_figures: dict[str, list[float]] = {
                    "loop_ms": [],
                    "answer_ms": [],
                    "poll_ms": [],
                }
                for _ in range(rounds):
                    quiet.append(load(public, seconds))
                    with Poller(client) as poller:
                        watched.append(load(public, seconds))
                    poller_figures["loop_ms"] += poller.loop_ms
                    poller_figures["answer_ms"] += poller.answer_ms
                    poller_figures["poll_ms"] += poller.poll_ms
        finally:
            stop(node)
            edge.stop()

    def summary(results: list[Result]) -> dict[str, float]:
        return {
            "rps": statistics.median(r.rps for r in results),
            "p50_ms": statistics.median(r.percentile(50) for r in results),
            "p99_ms": statistics.median(r.percentile(99) for r in results),
            "errors": sum(r.errors for r in results),
        }

    return {
        "quiet": summary(quiet),
        "watched": summary(watched),
        "polls": len(poller_figures["loop_ms"]),
        "poll_loop_ms_median": statistics.median(poller_figures["loop_ms"]),
        "poll_answer_ms_median": statistics.median(poller_figures["answer_ms"]),
        "poll_interval_ms_median": statistics.median(poller_figures["poll_ms"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller fleet, short rounds")
    parser.add_argument("--nodes", type=int, help="fleet size (10 providers a node)")
    args = parser.parse_args()
    nodes = args.nodes or (100 if args.quick else 1000)
    seconds, rounds = (3.0, 1) if args.quick else (8.0, 3)

    build = asyncio.run(build_figures(nodes, 5))
    path = request_path_figures(nodes, seconds, rounds)
    providers = nodes * 10
    print(
        f"one poll, {nodes} nodes x 10 providers: read {build['read_ms']:.1f} ms on the loop, "
        f"build {build['build_ms']:.1f} ms, encode {build['encode_ms']:.1f} ms, "
        f"{build['bytes'] / 1024:,.0f} KiB"
    )
    print(
        f"as served: {path['poll_loop_ms_median']:.1f} ms on the loop, answered in "
        f"{path['poll_answer_ms_median']:.1f} ms, polled every "
        f"{path['poll_interval_ms_median'] / 1000:.1f} s (medians of {path['polls']} polls)"
    )
    print(f"{'chat, c=32':30} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for name in ("quiet", "watched"):
        row = path[name]
        label = "no dashboard" if name == "quiet" else "dashboard open"
        print(
            f"{label:30} {row['rps']:8.0f} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} "
            f"{row['errors']:7d}"
        )
    print(
        json.dumps(
            {
                "bench": "dashboard",
                "providers": providers,
                "poll_read_ms": round(build["read_ms"], 2),
                "poll_build_ms": round(build["build_ms"], 2),
                "poll_encode_ms": round(build["encode_ms"], 2),
                "poll_bytes": build["bytes"],
                "served_loop_ms": round(path["poll_loop_ms_median"], 2),
                "served_answer_ms": round(path["poll_answer_ms_median"], 2),
                "served_poll_ms": path["poll_interval_ms_median"],
                "p50_ms": round(path["quiet"]["p50_ms"], 3),
                "p99_ms": round(path["quiet"]["p99_ms"], 3),
                "p50_ms_watched": round(path["watched"]["p50_ms"], 3),
                "p99_ms_watched": round(path["watched"]["p99_ms"], 3),
                "errors": path["quiet"]["errors"] + path["watched"]["errors"],
            }
        )
    )


if __name__ == "__main__":
    main()
