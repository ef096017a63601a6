"""Gateway benchmark: an Edge and a Node (`openai_http`) in front of a fast mock upstream.

Measures, in one run and against the mock called directly: req/s, p50 and p99 at concurrency 32
(non-stream and stream), unloaded p50 and time to first token (with the raw load generator, and
with an httpx client against httpx to the mock), and the RSS of Edge and Node. The last line
printed is one JSON object. ``--openai-server uvicorn`` serves the OpenAI API from an
`openai.listen` of its own on uvicorn (`openai.server`); daphne, as `make run` does, by default.

    python bench/gateway_bench.py [--quick] [--openai-server daphne|uvicorn]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from edge_stack import EdgeProcess, free_port, rss_mb, spawn, stop, wait_for
from loadgen import Result, build_request, run_load

from edge.config.schema import OPENAI_SERVERS
from edge.ports import port_open

CONCURRENCY = 32
BODY = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}
).encode()
STREAM_BODY = json.dumps(
    {
        "model": "bench",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
    }
).encode()


def node_ready(edge: EdgeProcess) -> bool:
    try:
        status = edge.status()
    except OSError:
        return False
    return any(node["ready"] for node in status["nodes"].values())


class Stack:
    """The mock upstream, the Edge and the Node as subprocesses."""

    def __init__(
        self,
        workdir: Path,
        mock: tuple[str, ...] = ("bench/mock_upstream.py",),
        capacity: int = 256,
        openai_server: str = "daphne",
    ) -> None:
        self.workdir = workdir
        self.mock_command = mock  # the upstream's script and its options (the port goes second)
        self.capacity = capacity
        self.openai_server = openai_server
        self.mock_port, self.edge_port, self.admin_port = free_port(), free_port(), free_port()
        # Where the OpenAI API is served: the public listener, or an `openai.listen` for uvicorn.
        self.api_port = self.edge_port if openai_server == "daphne" else free_port()
        self.client_token = f"bench-{secrets.token_urlsafe(16)}"
        self.node_token = f"bench-node-{secrets.token_urlsafe(16)}"
        self.processes: list[subprocess.Popen[bytes]] = []

    def config(self) -> dict:
        def digest(token: str) -> str:
            return hashlib.sha256(token.encode()).hexdigest()

        return {
            "version": 1,
            "edge": {
                "id": "edge-bench",
                "listen": f"127.0.0.1:{self.edge_port}",
                "admin_listen": f"127.0.0.1:{self.admin_port}",
            },
            "openai": {
                "principal_tokens": [
                    {
                        "token_ref": "bench",
                        "token_hash_sha256": digest(self.client_token),
                        "principal_ref": "bench",
                    }
                ],
                **(
                    {}
                    if self.openai_server == "daphne"
                    else {"listen": f"127.0.0.1:{self.api_port}", "server": self.openai_server}
                ),
            },
            "nodes": [
                {
                    "id": "bench-node",
                    "token_hash_sha256": digest(self.node_token),
                    "adapters": [
                        {
                            "id": "mock",
                            "type": "openai_http",
                            "base_url": f"http://127.0.0.1:{self.mock_port}/v1",
                        }
                    ],
                    "providers": [
                        {
                            "id": "mock-1",
                            "adapter": "mock",
                            "served_models": ["mock"],
                            "capacity": self.capacity,
                        }
                    ],
                }
            ],
            "models": [{"id": "bench", "providers": {"mock-1": "mock"}}],
        }

    def start(self) -> None:
        config_path = self.workdir / "edge.yaml"
        config_path.write_text(yaml.safe_dump(self.config()))
        self.edge = EdgeProcess(self.workdir, config_path, self.edge_port, self.admin_port)
        log = self.edge.log
        self.mock = spawn(
            [sys.executable, self.mock_command[0], str(self.mock_port), *self.mock_command[1:]],
            self.edge.env,
            log,
        )
        self.processes.append(self.mock)
        self.edge.migrate()
        self.edge.start(timeout=30)
        wait_for(lambda: port_open("127.0.0.1", self.mock_port), 30, "the mock upstream")
        self.node = spawn(
            [
                sys.executable,
                "-m",
                "nodes.agent",
                "--edge",
                f"ws://127.0.0.1:{self.edge_port}/ws/node/",
                "--node-id",
                "bench-node",
                "--log-level",
                "WARNING",
            ],
            {**self.edge.env, "IOP_NODE_TOKEN": self.node_token},
            log,
        )
        self.processes.append(self.node)
        wait_for(lambda: node_ready(self.edge), 30, "the Node to be ready")

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop(process)
        self.edge.stop()


def measure(stack: Stack, seconds: float, unloaded_requests: int) -> dict:
    direct = ("127.0.0.1", stack.mock_port, "/v1/chat/completions", None)
    edge = ("127.0.0.1", stack.api_port, "/v1/chat/completions", stack.client_token)

    def request(target, body: bytes) -> bytes:
        host, port, path, token = target
        return build_request(host, port, path, body, token)

    def load(target, body: bytes, concurrency: int, duration: float, per_worker=None) -> Result:
        host, port, _, _ = target
        return asyncio.run(
            run_load(
                host,
                port,
                request(target, body),
                concurrency=concurrency,
                seconds=duration,
                max_requests_per_worker=per_worker,
            )
        )

    load(edge, BODY, CONCURRENCY, min(2.0, seconds))  # warm up connections and code paths
    results = {
        "direct": load(direct, BODY, CONCURRENCY, seconds),
        "edge": load(edge, BODY, CONCURRENCY, seconds),
        "edge_stream": load(edge, STREAM_BODY, CONCURRENCY, seconds),
        "direct_unloaded": load(direct, BODY, 1, 30, unloaded_requests),
        "edge_unloaded": load(edge, BODY, 1, 30, unloaded_requests),
        "direct_stream_unloaded": load(direct, STREAM_BODY, 1, 30, unloaded_requests),
        "edge_stream_unloaded": load(edge, STREAM_BODY, 1, 30, unloaded_requests),
    }
    results["httpx"] = {
        name: httpx_unloaded(port, token, unloaded_requests)
        for name, port, token in (
            ("direct", stack.mock_port, None),
            ("edge", stack.api_port, stack.client_token),
        )
    }
    time.sleep(1.5)  # resident memory once the run has settled, as an operator would see it
    results["rss"] = {"edge": rss_mb(stack.edge.pid), "node": rss_mb(stack.node.pid)}
    return results


def httpx_unloaded(port: int, token: str | None, requests: int) -> dict[str, float]:
    """p50 of a whole answer and of the time to the first SSE event, one request at a time
    through one keep-alive httpx client: the client most Python callers use."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    whole, first = [], []
    with httpx.Client(headers=headers, timeout=30) as client:
        for _ in range(requests):
            started = time.perf_counter()
            client.post(url, content=BODY).raise_for_status()
            whole.append((time.perf_counter() - started) * 1000)
        for _ in range(requests):
            started = time.perf_counter()
            with client.stream("POST", url, content=STREAM_BODY) as response:
                lines = response.iter_lines()
                for line in lines:
                    if line.startswith("data:"):
                        first.append((time.perf_counter() - started) * 1000)
                        break
                for _ in lines:  # to its end, so the connection is reused
                    pass
    return {"p50_ms": Result(whole).percentile(50), "ttft_ms": Result(first).percentile(50)}


def report(results: dict, openai_server: str) -> dict:
    rows = [
        ("direct to mock, c=32", results["direct"]),
        ("through Edge + Node, c=32", results["edge"]),
        ("through Edge + Node, stream, c=32", results["edge_stream"]),
        ("direct to mock, unloaded", results["direct_unloaded"]),
        ("through Edge + Node, unloaded", results["edge_unloaded"]),
        ("direct stream, unloaded", results["direct_stream_unloaded"]),
        ("Edge stream, unloaded", results["edge_stream_unloaded"]),
    ]
    print(f"{'case':40} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for name, result in rows:
        print(
            f"{name:40} {result.rps:9.0f} {result.percentile(50):8.2f} "
            f"{result.percentile(99):8.2f} {result.errors:7d}"
        )
    direct_ttft = results["direct_stream_unloaded"].percentile(
        50, results["direct_stream_unloaded"].first_event_ms
    )
    edge_ttft = results["edge_stream_unloaded"].percentile(
        50, results["edge_stream_unloaded"].first_event_ms
    )
    added_p50 = results["edge_unloaded"].percentile(50) - results["direct_unloaded"].percentile(50)
    rss = results["rss"]
    print(
        f"time to first token, unloaded p50: direct {direct_ttft:.2f} ms, Edge {edge_ttft:.2f} ms"
    )
    print(f"added p50 unloaded: {added_p50:.2f} ms; added TTFT: {edge_ttft - direct_ttft:.2f} ms")
    via_httpx = results["httpx"]
    added_p50_httpx = via_httpx["edge"]["p50_ms"] - via_httpx["direct"]["p50_ms"]
    added_ttft_httpx = via_httpx["edge"]["ttft_ms"] - via_httpx["direct"]["ttft_ms"]
    print(
        f"httpx, unloaded p50: direct {via_httpx['direct']['p50_ms']:.2f} ms, Edge "
        f"{via_httpx['edge']['p50_ms']:.2f} ms (added {added_p50_httpx:.2f}); time to first "
        f"token: direct {via_httpx['direct']['ttft_ms']:.2f} ms, Edge "
        f"{via_httpx['edge']['ttft_ms']:.2f} ms (added {added_ttft_httpx:.2f})"
    )
    print(
        f"RSS: Edge {rss['edge']:.1f} MB, Node {rss['node']:.1f} MB, "
        f"together {rss['edge'] + rss['node']:.1f} MB"
    )
    return {
        "bench": "gateway",
        "openai_server": openai_server,
        "rps": round(results["edge"].rps, 1),
        "rps_stream": round(results["edge_stream"].rps, 1),
        "p50_ms": round(results["edge"].percentile(50), 3),
        "p99_ms": round(results["edge"].percentile(99), 3),
        "added_p50_ms": round(added_p50, 3),
        "added_ttft_ms": round(edge_ttft - direct_ttft, 3),
        "added_p50_httpx_ms": round(added_p50_httpx, 3),
        "added_ttft_httpx_ms": round(added_ttft_httpx, 3),
        "edge_rss_mb": round(rss["edge"], 1),
        "node_rss_mb": round(rss["node"], 1),
        "direct_rps": round(results["direct"].rps, 1),
        "errors": sum(r.errors for r in results.values() if isinstance(r, Result)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (about 30 s in all)")
    parser.add_argument(
        "--openai-server",
        choices=OPENAI_SERVERS,
        default=OPENAI_SERVERS[0],
        help="the HTTP server of the OpenAI API (openai.server; default %(default)s)",
    )
    args = parser.parse_args()
    seconds, unloaded = (3.0, 200) if args.quick else (10.0, 1000)
    with tempfile.TemporaryDirectory(prefix="iop-bench-") as workdir:
        stack = Stack(Path(workdir), openai_server=args.openai_server)
        try:
            stack.start()
            results = measure(stack, seconds, unloaded)
        finally:
            stack.stop()
    print(json.dumps(report(results, args.openai_server)))


if __name__ == "__main__":
    main()
