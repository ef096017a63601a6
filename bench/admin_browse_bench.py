"""Admin browsing benchmark: does an operator on the usage pages slow the gateway?

The stack of `bench/gateway_bench.py` (mock upstream, Edge, Node) over a usage table filled
with ``--rows`` synthetic rows (`bench/load_usage.py`). First the usage pages alone (what each
costs at that size, through daphne); then, in interleaved rounds at concurrency 32, the gateway
quiet, with an operator browsing (a logged-in client loading list and sums pages, ``--think``
seconds apart, as a person reading them) and with a scraper (the same pages back to back).
The database is SQLite in a temporary directory, or the one BENCH_DATABASE_URL names (its usage
tables are emptied first). The last line printed is one JSON object.

    python bench/admin_browse_bench.py [--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from admin_session import create_staff, log_in
from edge_stack import ROOT
from gateway_bench import BODY, CONCURRENCY, Stack
from loadgen import Result, build_request, run_load

PAGES = {
    "list": "/admin/edge/usagerecord/",
    "list, one token": "/admin/edge/usagerecord/?token_ref=team-a-app-1",
    "list, last 24 hours": "/admin/edge/usagerecord/?period=24h",
    "list, one error status": "/admin/edge/usagerecord/?status=upstream_error",
    "list, page 50": "/admin/edge/usagerecord/?p=50",
    "sums, all time": "/admin/edge/usagerecord/sums/",
    "sums, last 24 hours": "/admin/edge/usagerecord/sums/?period=24h",
    "sums, 7 days, one token": "/admin/edge/usagerecord/sums/?period=7d&token_ref=team-a-app-1",
}
CASES = ("quiet", "browsing", "scraping")


def browse(
    base_url: str, login: tuple[str, str], think_s: float, loops: int, stop: Any, out: Any
) -> None:
    """An operator: load every page in turn, ``think_s`` apart, until ``stop`` (or ``loops``)."""
    timings: dict[str, list[float]] = {name: [] for name in PAGES}
    errors = 0
    with httpx.Client(base_url=base_url, timeout=120) as client:
        log_in(client, *login)
        done = 0
        while not stop.is_set() and (not loops or done < loops):
            for name, url in PAGES.items():
                started = time.perf_counter()
                answer = client.get(url)
                timings[name].append((time.perf_counter() - started) * 1000)
                errors += answer.status_code != 200
                if stop.wait(think_s):
                    break
            done += 1
    out.put((timings, errors))


class Operator:
    """`browse` in a process of its own: the load generator keeps this one's interpreter."""

    def __init__(self, base_url: str, login: tuple[str, str], think_s: float, loops: int = 0):
        context = multiprocessing.get_context("spawn")
        self.stop, self.out = context.Event(), context.Queue()
        self.process = context.Process(
            target=browse, args=(base_url, login, think_s, loops, self.stop, self.out)
        )

    def start(self) -> Operator:
        self.process.start()
        return self

    def results(self, stop: bool = True) -> tuple[dict[str, list[float]], int]:
        """Its page timings (ms, per page) and errors, once it ends (now, if ``stop``)."""
        if stop:
            self.stop.set()
        timings, errors = self.out.get(timeout=600)
        self.process.join(timeout=60)
        return timings, errors


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_load(stack: Stack, seconds: float) -> Result:
    request = build_request(
        "127.0.0.1", stack.edge_port, "/v1/chat/completions", BODY, stack.client_token
    )
    return asyncio.run(
        run_load("127.0.0.1", stack.edge_port, request, concurrency=CONCURRENCY, seconds=seconds)
    )


def prepare(stack: Stack, rows: int) -> tuple[str, str]:
    """Fill the usage tables and make a staff login; the (username, password)."""
    env = stack.edge.env
    loaded = subprocess.run(
        [sys.executable, "bench/load_usage.py", "--rows", str(rows), "--replace"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    print(loaded.stdout.strip())
    username, password = f"bench-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    create_staff(env, username, password)
    return username, password


def measure(
    stack: Stack, login: tuple[str, str], seconds: float, rounds: int, think_s: float
) -> dict:
    base_url = f"http://127.0.0.1:{stack.edge_port}"
    pages_alone, errors = Operator(base_url, login, 0.0, loops=3).start().results(stop=False)
    gateway_load(stack, 2.0)  # warm up connections and code paths
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in CASES}
    browsing_pages: dict[str, list[float]] = {name: [] for name in PAGES}
    for _ in range(rounds):
        for case in CASES:
            operator = None
            if case != "quiet":
                operator = Operator(base_url, login, think_s if case == "browsing" else 0.0)
                operator.start()
                time.sleep(1.0)  # logged in and on its pages before the load starts
            cpu_before = cpu_seconds(stack.edge.pid)
            result = gateway_load(stack, seconds)
            cpu = cpu_seconds(stack.edge.pid) - cpu_before
            if operator is not None:
                timings, operator_errors = operator.results()
                errors += operator_errors
                if case == "browsing":
                    for name, values in timings.items():
                        browsing_pages[name] += values
            errors += result.errors
            runs[case].append(
                {
                    "rps": result.rps,
                    "p50": result.percentile(50),
                    "p99": result.percentile(99),
                    "edge_cpu": cpu / result.elapsed_s,
                }
            )
    return {
        "runs": runs,
        "pages_alone": pages_alone,
        "browsing_pages": browsing_pages,
        "errors": errors,
    }


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def page_p50(timings: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 1) for name, values in timings.items() if values}


def report(figures: dict, database: str, rows: int, think_s: float) -> dict:
    runs = figures["runs"]
    print(f"usage table: {rows:,} rows on {database}; operator think time {think_s:g} s")
    print(f"{'page, alone (p50 ms)':36} {'browsing (p50 ms)':>18}")
    alone, browsing = page_p50(figures["pages_alone"]), page_p50(figures["browsing_pages"])
    nan = float("nan")
    for name in PAGES:
        print(f"{name:36} {alone.get(name, nan):10.1f} {browsing.get(name, nan):18.1f}")
    columns = f"{'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'Edge CPU':>9}"
    print(f"{'gateway, c=32 (median of rounds)':36} {columns}")
    for case in CASES:
        print(
            f"{case:36} {median_of(runs[case], 'rps'):9.0f} {median_of(runs[case], 'p50'):8.2f} "
            f"{median_of(runs[case], 'p99'):8.2f} {median_of(runs[case], 'edge_cpu'):8.0%}"
        )
    for case in CASES:
        print(f"  {case} rounds, p50 ms: {[round(run['p50'], 2) for run in runs[case]]}")

    def change(case: str, key: str) -> float:
        quiet = median_of(runs["quiet"], key)
        return round((median_of(runs[case], key) - quiet) / quiet * 100, 1)

    for case in ("browsing", "scraping"):
        print(
            f"{case} vs quiet: p50 {change(case, 'p50'):+.1f} %, p99 {change(case, 'p99'):+.1f} %"
        )
    return {
        "bench": "admin_browse",
        "database": database,
        "rows": rows,
        "think_s": think_s,
        **{
            f"{case}_{key}": round(median_of(runs[case], key), 3)
            for case in CASES
            for key in ("rps", "p50", "p99")
        },
        "browsing_p50_change_pct": change("browsing", "p50"),
        "browsing_p99_change_pct": change("browsing", "p99"),
        "scraping_p50_change_pct": change("scraping", "p50"),
        "scraping_p99_change_pct": change("scraping", "p99"),
        "page_p50_ms_alone": alone,
        "page_p50_ms_browsing": browsing,
        "errors": figures["errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, help="usage rows (default 1,000,000; quick 200,000)")
    parser.add_argument("--think", type=float, default=1.0, help="seconds between page loads")
    parser.add_argument("--quick", action="store_true", help="fewer rows, one short round")
    args = parser.parse_args()
    rows = args.rows or (200_000 if args.quick else 1_000_000)
    seconds, rounds = (4.0, 1) if args.quick else (10.0, 3)
    database = (
        "postgresql"
        if os.environ.get("BENCH_DATABASE_URL", "").startswith("postgres")
        else "sqlite"
    )
    with tempfile.TemporaryDirectory(prefix="iop-bench-") as workdir:
        stack = Stack(Path(workdir))
        try:
            stack.start()
            login = prepare(stack, rows)
            figures = measure(stack, login, seconds, rounds, args.think)
        finally:
            stack.stop()
    print(json.dumps(report(figures, database, rows, args.think)))


if __name__ == "__main__":
    main()
