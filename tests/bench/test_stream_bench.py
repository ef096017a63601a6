"""The streaming benchmark in its smallest run: real mock, Edge, Node and clients; its last line
is the JSON object `make bench` and scripts read (keys and counts only, never figures)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.harness import ROOT

ROW_KEYS = {
    "streams",
    "tokens_per_s",
    "tokens",
    "added_ttft_p50_ms",
    "added_ttft_p99_ms",
    "added_itl_p50_ms",
    "added_itl_p99_ms",
    "edge_cpu_ms_per_1k_tokens",
    "node_cpu_ms_per_1k_tokens",
    "edge_cpu_pct",
    "node_cpu_pct",
    "mock_cpu_pct",
    "loadgen_cpu_pct",
    "edge_rss_mb",
    "node_rss_mb",
    "errors",
}


def test_it_streams_through_edge_and_node_and_ends_with_its_json_line() -> None:
    finished = subprocess.run(
        [
            sys.executable,
            "bench/stream_bench.py",
            "--sizes",
            "2,3",
            "--tokens",
            "5",
            "--tokens-per-s",
            "50",
            "--clients",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]

    result = json.loads(finished.stdout.strip().splitlines()[-1])

    assert result["bench"] == "stream"
    assert set(result) >= {"max_streams_itl_p99_ok", "rows", "answer_tokens"}
    assert [row["streams"] for row in result["rows"]] == [2, 3]
    for row in result["rows"]:
        assert set(row) == ROW_KEYS
        assert row["errors"] == 0
        assert row["tokens"] == 5 * row["streams"]  # every stamped token reached its client
