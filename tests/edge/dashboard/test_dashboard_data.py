"""The dashboard's data, built from a real runtime (pool and session store), no database."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from edge.dashboard.data import (
    SharedFeed,
    dashboard_data,
    poll_interval_s,
    read_pool,
    rows_as_dicts,
)
from edge.runtime import EdgeRuntime
from edge.tokens import sha256_hex
from tests.e2e.harness import echo_config
from tests.refresh.refresh_helpers import (
    OPERATOR_PORT,
    PUBLIC_PORT,
    TOKENS,
    FakeNodeLink,
    connect_node,
)
from tests.refresh.refresh_helpers import make_runtime as runtime_of
from tests.test_layering import CORE_PACKAGES, DJANGO_STACK, import_with_blocked


def two_nodes() -> dict[str, Any]:
    """`node-a` (provider `echo-1`, capacity 4) and `node-b` (`echo-2`, capacity 2), both
    serving model `echo`."""
    node_b = {
        "id": "node-b",
        "alias": "second-box",
        "token_hash_sha256": sha256_hex(TOKENS.node("node-b")),
        "adapters": [{"id": "echo", "type": "echo"}],
        "providers": [
            {"id": "echo-2", "adapter": "echo", "served_models": ["echo-small"], "capacity": 2}
        ],
    }
    model = {"id": "echo", "providers": {"echo-1": "echo-small", "echo-2": "echo-small"}}
    return echo_config(TOKENS, PUBLIC_PORT, OPERATOR_PORT, extra_nodes=[node_b], models=[model])


@pytest.fixture
def runtime(tmp_path: Any) -> EdgeRuntime:
    return runtime_of(tmp_path, two_nodes())


def data_of(runtime: EdgeRuntime) -> dict[str, Any]:
    return dashboard_data(read_pool(runtime))


def table(runtime: EdgeRuntime, name: str) -> dict[str, dict[str, Any]]:
    """One table of the answer, keyed by id."""
    return {row["id"]: row for row in rows_as_dicts(data_of(runtime)[name])}


def test_it_lists_every_configured_node_connected_or_not(runtime: EdgeRuntime) -> None:
    before = time.time()
    session = connect_node(runtime, FakeNodeLink(), "node-a")
    session.agent_version = "0.1.0"

    nodes = table(runtime, "nodes")

    assert nodes["node-b"] == {
        "id": "node-b",
        "alias": "second-box",
        "connected": False,
        "ready": False,
        "acked_revision": None,
        "agent_version": None,
        "connected_since": None,
    }
    node_a = nodes["node-a"]
    assert node_a["connected"] and node_a["ready"] and node_a["agent_version"] == "0.1.0"
    assert node_a["acked_revision"] == runtime.config.revision
    assert before <= node_a["connected_since"] <= time.time()


def test_a_connected_node_is_not_ready_until_it_acks(runtime: EdgeRuntime) -> None:
    runtime.nodes.attach("node-b", FakeNodeLink())

    node_b = table(runtime, "nodes")["node-b"]

    assert (node_b["connected"], node_b["ready"], node_b["acked_revision"]) == (True, False, None)


def test_a_session_of_a_node_the_config_no_longer_lists_is_shown(runtime: EdgeRuntime) -> None:
    runtime.nodes.attach("node-gone", FakeNodeLink())

    nodes = data_of(runtime)["nodes"]["rows"]

    assert [row[0] for row in nodes] == ["node-a", "node-b", "node-gone"]


def test_it_shows_in_flight_and_long_slots_per_provider(runtime: EdgeRuntime) -> None:
    connect_node(runtime, FakeNodeLink(), "node-a")
    threshold = runtime.config.openai.long_context_threshold_tokens
    leases = [runtime.pool.try_acquire("echo", 1), runtime.pool.try_acquire("echo", threshold)]
    assert all(lease is not None for lease in leases)

    echo_1 = table(runtime, "providers")["echo-1"]

    assert (echo_1["in_flight"], echo_1["capacity"]) == (2, 4)
    assert (echo_1["long_in_flight"], echo_1["long_slots"]) == (1, None)
    assert echo_1["node"] == "node-a" and echo_1["enabled"] and echo_1["node_ready"]


def test_it_shows_health_with_its_reason_and_passive_health(runtime: EdgeRuntime) -> None:
    connect_node(runtime, FakeNodeLink(), "node-a")
    connect_node(runtime, FakeNodeLink(), "node-b")
    runtime.pool.set_provider_health("echo-2", False, "GET /models answered 500")
    lease = runtime.pool.try_acquire("echo", 1)
    assert lease is not None and lease.provider_id == "echo-1"
    runtime.pool.report_failure(lease, "upstream_auth_failed", trip=True)

    providers = table(runtime, "providers")

    echo_1, echo_2 = providers["echo-1"], providers["echo-2"]
    assert (echo_2["healthy"], echo_2["health_detail"]) == (False, "GET /models answered 500")
    assert echo_2["passive_state"] == "closed"
    assert not echo_1["healthy"] and echo_1["passive_state"] == "open"
    assert echo_1["passive_reason"] == "upstream_auth_failed" and echo_1["reopens_in_s"] > 0


def test_a_provider_of_a_node_not_connected_shows_its_node_not_ready(
    runtime: EdgeRuntime,
) -> None:
    echo_2 = table(runtime, "providers")["echo-2"]

    assert (echo_2["node_ready"], echo_2["in_flight"], echo_2["capacity"]) == (False, 0, 2)


async def test_it_shows_queue_depth_and_oldest_wait_per_model(runtime: EdgeRuntime) -> None:
    connect_node(runtime, FakeNodeLink(), "node-a")
    leases = [runtime.pool.try_acquire("echo", 1) for _ in range(4)]  # echo-1 is full
    waiter = asyncio.create_task(runtime.pool.acquire("echo", 1))
    while not table(runtime, "models")["echo"]["queue_depth"]:
        await asyncio.sleep(0)

    echo = table(runtime, "models")["echo"]

    assert (echo["queue_depth"], echo["long_queue_depth"]) == (1, 0)
    assert echo["oldest_wait_s"] >= 0 and echo["providers"] == ["echo-1", "echo-2"]
    leases[0].release()
    (await waiter).release()


def test_it_names_the_running_revision_and_the_loop_time(runtime: EdgeRuntime) -> None:
    data = data_of(runtime)

    assert data["edge"] == "edge-test" and data["revision"] == runtime.config.revision
    assert data["loop_ms"] >= 0 and data["generated_at"] <= time.time()
    assert data["poll_ms"] == pytest.approx(poll_interval_s(data["loop_ms"] / 1000) * 1000, abs=1)
    assert data["nodes"]["columns"][0] == data["providers"]["columns"][0] == "id"


@pytest.mark.parametrize(
    ("loop_s", "interval_s"), [(0.0, 1.0), (0.003, 1.0), (0.02, 1.0), (0.03, 1.5), (0.06, 3.0)]
)
def test_the_page_polls_less_often_when_a_reading_costs_the_loop_more(
    loop_s: float, interval_s: float
) -> None:
    assert poll_interval_s(loop_s) == pytest.approx(interval_s)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_shared_feed_builds_once_per_interval_and_per_runtime(tmp_path: Any) -> None:
    (tmp_path / "1").mkdir(), (tmp_path / "2").mkdir()
    first, second = runtime_of(tmp_path / "1"), runtime_of(tmp_path / "2")
    built: list[EdgeRuntime] = []

    def build(runtime: EdgeRuntime) -> bytes:
        built.append(runtime)
        return str(len(built)).encode()

    clock = Clock()
    feed = SharedFeed(build, max_age_s=0.5, clock=clock)

    assert feed.get(first) == b"1"
    clock.now += 0.4
    assert feed.get(first) == b"1"  # a second viewer within the interval shares it
    clock.now += 0.1
    assert feed.get(first) == b"2"
    assert feed.get(second) == b"3"  # another runtime never gets the first one's answer
    assert built == [first, first, second]


def test_the_data_builder_imports_without_the_django_stack() -> None:
    result = import_with_blocked(DJANGO_STACK, CORE_PACKAGES, ("edge.dashboard.data",))

    assert result.returncode == 0, result.stderr
