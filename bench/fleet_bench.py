"""Fleet benchmark: an Edge with N nodes x 10 providers and a simulated fleet of N Nodes.

For N = 100, 1,000 and 3,000 (``--sizes``), in one run:

- in this process: parsing the config (CPU), a dry-run plan of one change (parse, validate,
  classify) and the classification alone; a plan that reconfigures every Node, and the longest
  its result's JSON holds the interpreter, encoded whole and in pieces; the swap, the one step
  an apply takes on the event loop (with freeing the config it replaces), of one change and of
  every Node reconfigured; and what freezing does to a full collection over the Edge's runtime
  at that size;
- the mirror sync (``bench/mirror_bench.py``) on SQLite, and on PostgreSQL when one answers at
  127.0.0.1:5432;
- a real Edge (``run_edge``) and ``bench/sim_fleet.py`` in their own processes: the Edge's start,
  all N Nodes connecting at once until every one is ready, a dry run and an apply of one change,
  an apply that reconfigures every Node (all pushes acked), the Edge's resident memory over ten
  applies, and the longest stall of the request path (a ``GET /v1/models`` every 10 ms, from a
  process of its own) during each; finally how many Node sessions dropped.

Prints a table per size, then one JSON object as the last line.

    python bench/fleet_bench.py [--quick] [--sizes 100,1000,3000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from edge_stack import EdgeProcess, free_port, rounded, rss_mb
from fleet_config import fleet_yaml, one_change

from edge.config import load_config_text
from edge.config.yaml_source import parse_yaml
from edge.json_pieces import PiecewiseJSONEncoder
from edge.memory import collection_paused
from edge.ports import port_open
from edge.runtime import EdgeRuntime, PreparedConfig
from refresh.classify import classify
from refresh.plan import plan_refresh

BENCH = Path(__file__).resolve().parent
PG_URL = "postgres://postgres@127.0.0.1:5432/iop_edge"
APPLIES_FOR_MEMORY = 10
PROBE_INTERVAL_S = 0.01
RELEASE_WATCH_S = 0.5  # long enough for a 3,000-node config's slices


def best_of(rounds: int, step: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times)


# -- in this process -------------------------------------------------------------------------


def plan_figures(nodes: int, rounds: int) -> dict[str, float]:
    text = fleet_yaml(nodes)
    candidate_text = one_change(text)
    running = load_config_text(text)
    candidate = load_config_text(candidate_text)

    def parse() -> object:
        with collection_paused():  # as every load does
            return parse_yaml(candidate_text)

    return {
        "config_mb": len(text.encode()) / 1e6,
        "parse_s": best_of(rounds, parse),
        "plan_s": best_of(rounds, lambda: plan_refresh(running, candidate_text, mode="dry_run")),
        "classify_s": best_of(rounds, lambda: classify(running.canonical, candidate.canonical)),
    }


def longest_hold_ms(step: Callable[[], object]) -> float:
    """The longest the interpreter was held from another thread while ``step`` ran: the largest
    gap between the ticks of a thread that wakes every millisecond."""
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    time.sleep(0.05)
    gaps.clear()
    step()
    done.set()
    ticker.join()
    return max(gaps, default=0.0) * 1000


def fleet_wide_figures(nodes: int) -> dict[str, float]:
    """A plan that reconfigures every Node (CPU), and the longest hold of the interpreter while
    its result (one change per provider) is encoded whole and in pieces, as a thread beside the
    event loop writes it."""
    running = load_config_text(fleet_yaml(nodes))
    candidate_text = fleet_yaml(nodes, capacity=5)
    started = time.process_time()
    plan = plan_refresh(running, candidate_text, mode="apply")
    plan_s = time.process_time() - started
    result = plan.result.to_dict()
    return {
        "fleet_plan_s": plan_s,
        "fleet_changes": len(result["changes"]),
        "result_json_whole_hold_ms": longest_hold_ms(lambda: json.dumps(result)),
        "result_json_pieces_hold_ms": longest_hold_ms(
            lambda: json.dumps(result, cls=PiecewiseJSONEncoder)
        ),
    }


def swap_figures(nodes: int) -> dict[str, float]:
    """The loop's share of an apply: ``swap_config``, then the longest turn of the loop while
    what it replaced is let go of a slice at a time, in ms."""

    async def nowhere(batch: object) -> None:
        return None

    async def swap_and_release(
        runtime: EdgeRuntime, prepared: PreparedConfig
    ) -> tuple[float, float]:
        started = time.perf_counter()
        runtime.swap_config(prepared)
        swapped = time.perf_counter()
        longest, last = 0.0, swapped
        while last - swapped < RELEASE_WATCH_S:
            await asyncio.sleep(0)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        return (swapped - started) * 1000, longest * 1000

    text = fleet_yaml(nodes)
    runtime = EdgeRuntime(load_config_text(text), None, nowhere, nowhere)
    for index in range(nodes):
        runtime.pool.set_node_ready(f"node-{index:05d}", True)
    figures = {}
    candidates = {"one": one_change(text), "fleet": fleet_yaml(nodes, capacity=5)}
    for key, candidate_text in candidates.items():
        prepared = runtime.prepare(load_config_text(candidate_text))
        gc.freeze()  # as the Edge keeps what lives on out of the collector's sight
        swap_ms, release_turn_ms = asyncio.run(swap_and_release(runtime, prepared))
        figures[f"swap_{key}_ms"], figures[f"release_{key}_turn_ms"] = swap_ms, release_turn_ms
    gc.unfreeze()
    return figures


def collection_figures(nodes: int) -> dict[str, float]:
    """A full collection over an Edge runtime of this size, before and after freezing it."""

    async def nowhere(batch: object) -> None:
        return None

    runtime = EdgeRuntime(load_config_text(fleet_yaml(nodes)), None, nowhere, nowhere)
    for index in range(nodes):  # sessions' share of the heap: the pool's per-Node state
        runtime.pool.set_node_ready(f"node-{index:05d}", True)
    gc.collect()
    unfrozen = best_of(3, gc.collect)
    gc.freeze()
    frozen = best_of(3, gc.collect)
    gc.unfreeze()
    del runtime
    gc.collect()
    return {"full_collection_ms": unfrozen * 1000, "full_collection_frozen_ms": frozen * 1000}


def mirror_figures(nodes: int, quick: bool) -> dict[str, Any]:
    databases = {"sqlite": None}
    if port_open("127.0.0.1", 5432):
        databases["postgresql"] = PG_URL
    figures: dict[str, Any] = {}
    for name, url in databases.items():
        env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
        if url:
            env["DATABASE_URL"] = url
        args = [sys.executable, str(BENCH / "mirror_bench.py"), "--nodes", str(nodes)]
        done = subprocess.run(
            [*args, *(["--quick"] if quick else [])],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# -- a real Edge and a simulated fleet --------------------------------------------------------


class Probe:
    """The request path's latency, sampled every PROBE_INTERVAL_S by a process of its own.

    Not by a thread of the benchmark's: encoding a fleet's refresh body (5.6 MB at 3,000 nodes)
    holds this process's interpreter for about 20 ms, and a thread beside it would count that
    wait as the Edge's.
    """

    def __init__(self, port: int) -> None:
        self.samples: list[tuple[float, float]] = []  # (sent at, seconds to the answer)
        self.failures = 0
        self._control, probe_end = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=probe_requests, args=(port, probe_end), daemon=True
        )

    def start(self) -> None:
        self._process.start()
        self._fetch("samples")  # answered once its first request is: the probe is sampling

    def stop(self) -> None:
        self._fetch("stop")
        self._process.join()

    def _fetch(self, command: str) -> None:
        self._control.send(command)
        self.samples, self.failures = self._control.recv()

    @contextmanager
    def window(self, into: dict[str, float], key: str) -> Iterator[None]:
        """The longest answer among the samples sent while the block ran, in ms."""
        started = time.monotonic()  # one clock for both processes (CLOCK_MONOTONIC)
        yield
        ended = time.monotonic()
        self._fetch("samples")
        within = [latency for sent, latency in self.samples if started <= sent <= ended]
        into[key] = max(within, default=0.0) * 1000


def probe_requests(port: int, control: Connection) -> None:
    """The probe's process: ``GET /v1/models`` every PROBE_INTERVAL_S; its samples on request."""
    samples: list[tuple[float, float]] = []
    failures = 0
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while True:
        sent = time.monotonic()
        try:
            connection.request("GET", "/v1/models")
            connection.getresponse().read()
        except (OSError, http.client.HTTPException):
            failures += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        samples.append((sent, time.monotonic() - sent))
        if control.poll(PROBE_INTERVAL_S):
            command = control.recv()
            control.send((samples, failures))
            if command == "stop":
                return


class Fleet:
    """``bench/sim_fleet.py`` in its own process, holding N sessions until stopped."""

    def __init__(self, workdir: Path, edge_port: int, nodes: int) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(BENCH / "sim_fleet.py"),
                "--edge",
                f"ws://127.0.0.1:{edge_port}/ws/node/",
                "--nodes",
                str(nodes),
                "--hold-until-stopped",
            ],
            stdout=subprocess.PIPE,
            stderr=(workdir / "fleet.log").open("ab"),
            text=True,
        )

    def wait_ready(self) -> dict[str, Any]:
        """The fleet's first summary: all N ready (or its ready timeout passed)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit("the simulated fleet ended before it was ready")

    def stop(self) -> dict[str, Any]:
        """End the hold; the fleet's last summary (its dropped sessions)."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.stdout is not None
        summary = self.wait_ready()
        self.process.wait(timeout=60)
        return summary


def refresh(edge: EdgeProcess, mode: str, config_yaml: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    result = edge.operator("POST", "/refresh", {"mode": mode, "config_yaml": config_yaml})
    elapsed = time.monotonic() - started
    if result.get("status") not in ("ok", "applied", "no_change"):
        raise SystemExit(f"refresh {mode} failed: {json.dumps(result)[:2000]}")
    return elapsed, result


def acked(result: dict[str, Any]) -> int:
    return sum(push["status"] == "acked" for push in result["node_pushes"])


def fleet_figures(nodes: int, workdir: Path) -> dict[str, Any]:
    public, admin = free_port(), free_port()
    listens = {"edge_listen": f"127.0.0.1:{public}", "admin_listen": f"127.0.0.1:{admin}"}
    texts = [fleet_yaml(nodes, **listens), one_change(fleet_yaml(nodes, **listens))]
    fleet_wide = fleet_yaml(nodes, capacity=5, **listens)
    config_path = workdir / "edge.yaml"
    config_path.write_text(texts[0])
    edge = EdgeProcess(workdir, config_path, public, admin)
    edge.migrate()
    figures: dict[str, Any] = {"edge_start_s": edge.start()}
    fleet = Fleet(workdir, public, nodes)
    probe = Probe(public)
    try:
        sign_in = fleet.wait_ready()
        figures["ready_s"] = sign_in["ready_s"]
        figures["ready"] = sign_in["ready"]
        probe.start()
        with probe.window(figures, "dry_run_stall_ms"):
            figures["dry_run_s"], _ = refresh(edge, "dry_run", texts[1])
        with probe.window(figures, "apply_stall_ms"):
            figures["apply_s"], result = refresh(edge, "apply", texts[1])
        figures["apply_acked"] = acked(result)
        with probe.window(figures, "apply_fleet_stall_ms"):
            figures["apply_fleet_s"], result = refresh(edge, "apply", fleet_wide)
        figures["apply_fleet_acked"] = acked(result)
        rss = []
        with probe.window(figures, "applies_stall_ms"):
            for index in range(APPLIES_FOR_MEMORY):
                refresh(edge, "apply", texts[index % 2])
                rss.append(rss_mb(edge.pid))
        figures["rss_first_apply_mb"], figures["rss_tenth_apply_mb"] = rss[0], rss[-1]
        status = edge.status()
        figures["ready_after"] = sum(node["ready"] for node in status["nodes"].values())
        figures["gc_longest_ms"] = max(g["longest_ms"] for g in status["gc"]["generations"])
    finally:
        probe.stop()
        ended = fleet.stop() if fleet.process.poll() is None else {}
        edge.stop()
    figures["dropped"] = ended.get("dropped")
    figures["probe_failures"] = probe.failures
    return figures


# -- the report -------------------------------------------------------------------------------


def report(nodes: int, figures: dict[str, Any]) -> None:
    plan, gc_figures, mirror, fleet = (
        figures["plan"],
        figures["gc"],
        figures["mirror"],
        figures["fleet"],
    )
    rows = [
        ("config", f"{plan['config_mb']:.2f} MB"),
        ("parse (CPU)", f"{plan['parse_s'] * 1000:.0f} ms"),
        ("dry-run plan (CPU)", f"{plan['plan_s'] * 1000:.0f} ms"),
        ("classify (CPU)", f"{plan['classify_s'] * 1000:.0f} ms"),
        (
            f"plan reconfiguring every Node, {plan['fleet_changes']} changes (CPU)",
            f"{plan['fleet_plan_s'] * 1000:.0f} ms",
        ),
        (
            "its result encoded: longest hold, whole / pieces",
            f"{plan['result_json_whole_hold_ms']:.0f} / "
            f"{plan['result_json_pieces_hold_ms']:.1f} ms",
        ),
        (
            "swap on the loop: one change / every Node",
            f"{plan['swap_one_ms']:.1f} / {plan['swap_fleet_ms']:.0f} ms",
        ),
        (
            "then freeing what it replaced, longest loop turn",
            f"{plan['release_one_turn_ms']:.1f} / {plan['release_fleet_turn_ms']:.1f} ms",
        ),
        (
            "full collection, unfrozen / frozen",
            f"{gc_figures['full_collection_ms']:.0f} / "
            f"{gc_figures['full_collection_frozen_ms']:.1f} ms",
        ),
    ]
    for database, result in mirror.items():
        rows.append(
            (
                f"mirror {database}: first import / one change",
                f"{result['first_import_s'] * 1000:.0f} / {result['one_change_s'] * 1000:.0f} ms",
            )
        )
    rows += [
        ("Edge start", f"{fleet['edge_start_s']:.2f} s"),
        ("all Nodes ready (connecting at once)", f"{fleet['ready_s']:.2f} s"),
        (
            "dry run (HTTP) / longest request stall",
            f"{fleet['dry_run_s'] * 1000:.0f} / {fleet['dry_run_stall_ms']:.0f} ms",
        ),
        (
            "apply, one change / stall",
            f"{fleet['apply_s'] * 1000:.0f} / {fleet['apply_stall_ms']:.0f} ms "
            f"({fleet['apply_acked']} acked)",
        ),
        (
            "apply, every Node reconfigured / stall",
            f"{fleet['apply_fleet_s'] * 1000:.0f} / {fleet['apply_fleet_stall_ms']:.0f} ms "
            f"({fleet['apply_fleet_acked']} acked)",
        ),
        (
            f"RSS after apply 1 / {APPLIES_FOR_MEMORY}",
            f"{fleet['rss_first_apply_mb']:.0f} / {fleet['rss_tenth_apply_mb']:.0f} MB "
            f"(stall {fleet['applies_stall_ms']:.0f} ms)",
        ),
        ("longest collection in the Edge", f"{fleet['gc_longest_ms']:.0f} ms"),
        ("Node sessions dropped", f"{fleet['dropped']} (ready after: {fleet['ready_after']})"),
    ]
    print(f"\n== {nodes} nodes x 10 providers")
    for name, value in rows:
        print(f"{name:52} {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000", help="fleet sizes (comma-separated)")
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1000, fewer rounds")
    args = parser.parse_args()
    sizes = [100, 1000] if args.quick else [int(size) for size in args.sizes.split(",")]
    rounds = 1 if args.quick else 3
    results: dict[str, Any] = {}
    for nodes in sizes:
        with tempfile.TemporaryDirectory(prefix="iop-fleet-") as workdir:
            figures = {
                "plan": plan_figures(nodes, rounds)
                | fleet_wide_figures(nodes)
                | swap_figures(nodes),
                "gc": collection_figures(nodes),
                "mirror": mirror_figures(nodes, args.quick),
                "fleet": fleet_figures(nodes, Path(workdir)),
            }
        report(nodes, figures)
        results[str(nodes)] = figures
    print(json.dumps({"bench": "fleet", "sizes": rounded(results)}))


if __name__ == "__main__":
    main()
