"""Failover on real PostgreSQL with real processes: two Edges of one config (`edge.ha`), two
Nodes given both URLs, clients trying both Edges. The leader dies (kill -9) mid-traffic, or loses
its database session (the server ends it, as it does for a partitioned client): the other Edge
takes over, the Nodes follow it by themselves, no capacity stays held, and never do two Edges
lead at once. The time to the first request served by the new leader and the requests that
failed are printed (measured, not asserted: the machine's speed is not under test)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest

from edge.ha.cluster import lock_conninfo
from edge.models import UsageRecord
from edge.tokens import sha256_hex
from tests.e2e.harness import Tokens, echo_config, wait_until
from tests.ha.conftest import HAEdge, HANode, wait_for_leader

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN_DELAY_MS = 10  # each reply word: a short request is in flight for some tens of ms
SLOW_WORDS = 400  # a request that is still streaming when its Edge dies
CLIENTS = 4
HANG_TIMEOUT_S = 60  # generous: only against hangs


def failover_config(tokens: Tokens) -> dict[str, Any]:
    def node(node_id: str, provider_id: str) -> dict[str, Any]:
        return {
            "id": node_id,
            "token_hash_sha256": sha256_hex(tokens.node(node_id)),
            "adapters": [{"id": "echo", "type": "echo", "token_delay_ms": TOKEN_DELAY_MS}],
            "providers": [
                {"id": provider_id, "adapter": "echo", "served_models": ["e"], "capacity": 4}
            ],
        }

    config = echo_config(
        tokens,
        0,
        0,
        models=[{"id": "echo", "providers": {"p-a": "e", "p-b": "e"}}],
        providers=[{"id": "p-a", "adapter": "echo", "served_models": ["e"], "capacity": 4}],
    )
    config["nodes"] = [node("node-a", "p-a"), node("node-b", "p-b")]
    config["edge"].update(listen="127.0.0.1:18000", admin_listen="127.0.0.1:18001", ha=True)
    config["queue"] = {"max_queue": 32, "queue_timeout_s": 30}
    return config


@dataclass
class Outcome:
    """One client request: tried on each Edge in turn until one served it."""

    sent_at: float
    ok: bool
    edge: str = ""  # which Edge served it
    request_id: str = ""
    detail: str = ""


@dataclass
class Traffic:
    """Clients sending requests to whichever Edge serves them, until stopped."""

    edges: list[HAEdge]
    tokens: Tokens
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, number: int) -> None:
        order = itertools.cycle(self.edges[number % 2 :] + self.edges[: number % 2])
        with httpx.Client(timeout=HANG_TIMEOUT_S) as http:
            for sequence in itertools.count():
                if self.stop.is_set():
                    return
                words = f"c{number} r{sequence} hello"
                outcome = Outcome(time.time(), ok=False)
                for _ in self.edges:
                    edge = next(order)
                    try:
                        response = http.post(
                            edge.completions_url,
                            headers={"Authorization": f"Bearer {self.tokens.client('app-1')}"},
                            json={
                                "model": "echo",
                                "messages": [{"role": "user", "content": words}],
                            },
                        )
                    except httpx.TransportError as exc:
                        outcome.detail = f"{edge.name}: {type(exc).__name__}"
                        continue
                    if response.status_code == 200:
                        content = response.json()["choices"][0]["message"]["content"]
                        assert content == f"echo: {words}"  # the right answer, whoever served it
                        outcome.ok, outcome.edge = True, edge.name
                        outcome.request_id = response.headers["x-request-id"]
                        break
                    code = response.json()["error"]["code"]
                    outcome.detail = f"{edge.name}: {response.status_code} {code}"
                    if code != "edge_standby":
                        break  # a real failure: the request ends here
                with self.lock:
                    self.outcomes.append(outcome)
                if not outcome.ok:
                    time.sleep(0.05)

    def served_by(self, name: str, after: float = 0.0) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.ok and o.edge == name and o.sent_at >= after]

    def failed(self) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if not o.ok]


@dataclass
class Sighting:
    edge: str
    asked_at: float  # the Edge said "leader" at some moment after this
    since: float  # ... and had led since then


class LeaderWatch:
    """Polls every Edge's /status; two Edges whose leading times overlap are two leaders."""

    def __init__(self, edges: list[HAEdge]) -> None:
        self.edges = edges
        self.sightings: list[Sighting] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> LeaderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(HANG_TIMEOUT_S)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for edge in self.edges:
                asked_at = time.time()
                try:
                    status = edge.status(timeout=2)
                except httpx.HTTPError:
                    status = None
                if status and status["role"] == "leader":
                    self.sightings.append(Sighting(edge.name, asked_at, status["ha"]["since"]))
            time.sleep(0.02)

    def overlaps(self) -> list[tuple[Sighting, Sighting]]:
        """Pairs of sightings of two Edges whose known leading times intersect: each sighting
        proves its Edge led from ``since`` to ``asked_at`` at least."""
        return [
            (a, b)
            for a, b in itertools.combinations(self.sightings, 2)
            if a.edge != b.edge and a.since <= b.asked_at and b.since <= a.asked_at
        ]


@pytest.fixture
def cluster(
    ha_edge: Callable[[dict[str, Any]], HAEdge], processes: list[Any]
) -> tuple[list[HAEdge], list[HANode], Tokens]:
    """Two Edges (the first leads) and two Nodes that know both, in opposite orders."""
    tokens = Tokens()
    config = failover_config(tokens)
    first = ha_edge(config)
    wait_until(lambda: first.role() == "leader", timeout=30, what="the first Edge to lead")
    second = ha_edge(config)
    edges = [first, second]
    nodes = []
    for node_id, order in (("node-a", edges), ("node-b", edges[::-1])):
        node = HANode(first.workdir.parent, order, node_id, tokens.node(node_id))
        processes.append(node)
        nodes.append(node.start())
    wait_until(lambda: ready_nodes(first) == {"node-a", "node-b"}, what="both Nodes on the leader")
    assert second.role() == "standby"
    return edges, nodes, tokens


def ready_nodes(edge: HAEdge) -> set[str]:
    status = edge.status() or {}
    return {node for node, facts in status.get("nodes", {}).items() if facts["ready"]}


def pool_is_idle(edge: HAEdge) -> bool:
    status = edge.status() or {}
    providers, models = status.get("providers", {}), status.get("models", {})
    return (
        bool(providers)
        and all(p["in_flight"] == 0 and p["long_in_flight"] == 0 for p in providers.values())
        and all(m["queue_depth"] == 0 and m["long_queue_depth"] == 0 for m in models.values())
    )


def start_traffic(edges: list[HAEdge], tokens: Tokens) -> tuple[Traffic, list[threading.Thread]]:
    traffic = Traffic(edges, tokens)
    threads = [
        threading.Thread(target=traffic.client, args=(n,), daemon=True) for n in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    return traffic, threads


def stop_traffic(traffic: Traffic, threads: list[threading.Thread]) -> None:
    traffic.stop.set()
    for thread in threads:
        thread.join(HANG_TIMEOUT_S)
        assert not thread.is_alive(), "a client hung"


def slow_stream_started(edge: HAEdge, tokens: Tokens) -> threading.Thread:
    """A streaming request still running on ``edge``'s Node when the test goes on."""
    started = threading.Event()

    def stream() -> None:
        body = {
            "model": "echo",
            "stream": True,
            "messages": [{"role": "user", "content": " ".join(["w"] * SLOW_WORDS)}],
        }
        headers = {"Authorization": f"Bearer {tokens.client('app-2')}"}
        try:
            with httpx.stream(
                "POST", edge.completions_url, json=body, headers=headers, timeout=HANG_TIMEOUT_S
            ) as response:
                for _ in response.iter_lines():
                    started.set()
        except httpx.TransportError:
            pass  # its Edge died under it: nobody reads the rest
        started.set()

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    assert started.wait(HANG_TIMEOUT_S)
    return thread


def report(what: str, traffic: Traffic, lost_at: float, new_leader: HAEdge) -> float:
    """Print the figures: time to the first request the new leader served, requests failed
    (each client retries 50 ms after a failure, so the count follows the gap's length)."""
    served = traffic.served_by(new_leader.name, after=lost_at)
    first = min(o.sent_at for o in served) - lost_at
    failed = traffic.failed()
    window = max(o.sent_at for o in failed) - min(o.sent_at for o in failed) if failed else 0.0
    print(
        f"\n{what}: first request served by the new leader {first:.2f} s after; "
        f"{len(failed)} of {len(traffic.outcomes)} requests failed, over {window:.2f} s "
        f"({sorted({o.detail for o in failed})}); {len(served)} served by it since"
    )
    return first


def test_kill_9_of_the_leader_mid_traffic(
    cluster: tuple[list[HAEdge], list[HANode], Tokens],
) -> None:
    (old, new), nodes, tokens = cluster
    with LeaderWatch([old, new]) as watch:
        traffic, threads = start_traffic([old, new], tokens)
        try:
            wait_until(lambda: len(traffic.served_by(old.name)) >= 20, timeout=HANG_TIMEOUT_S)
            earlier = [o.request_id for o in traffic.served_by(old.name)][:5]
            # Usage the old leader wrote before it died is in the one database.
            wait_until(
                lambda: UsageRecord.objects.filter(request_id__in=earlier).count() == 5,
                timeout=HANG_TIMEOUT_S,
                what="the old leader's usage rows",
            )
            slow = slow_stream_started(old, tokens)
            killed_at = time.time()
            old.kill()
            wait_until(
                lambda: len(traffic.served_by(new.name, after=killed_at)) >= 20,
                timeout=HANG_TIMEOUT_S,
                what="the new leader to serve",
            )
        finally:
            stop_traffic(traffic, threads)
        slow.join(HANG_TIMEOUT_S)
    report("kill -9", traffic, killed_at, new)

    assert new.role() == "leader"
    assert old.status() is None
    assert watch.overlaps() == []
    assert {s.edge for s in watch.sightings} == {old.name, new.name}
    wait_until(lambda: ready_nodes(new) == {"node-a", "node-b"}, what="both Nodes on the new one")
    # No slot leaked: the runs that died with the old leader hold nothing on the new one.
    wait_until(lambda: pool_is_idle(new), timeout=HANG_TIMEOUT_S, what="an idle pool")
    # The slow run's Node cancelled it when its session ended: nobody could read it any more.
    wait_until(
        lambda: any("session ended: cancelling" in node.log() for node in nodes),
        what="a Node to cancel the run it had on the dead Edge",
    )
    served = [o.request_id for o in traffic.served_by(new.name)]
    wait_until(
        lambda: UsageRecord.objects.filter(request_id__in=served).count() == len(served),
        timeout=HANG_TIMEOUT_S,
        what="the new leader's usage rows",
    )


def terminate_lock_session(edge_id: str) -> None:
    with psycopg.connect(**lock_conninfo(), autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"iop-edge leader lock {edge_id}",),
        )


def test_a_leader_whose_database_session_ends_is_fenced_and_the_other_takes_over(
    cluster: tuple[list[HAEdge], list[HANode], Tokens],
) -> None:
    (old, new), _, tokens = cluster
    with LeaderWatch([old, new]) as watch:
        traffic, threads = start_traffic([old, new], tokens)
        try:
            wait_until(lambda: len(traffic.served_by(old.name)) >= 20, timeout=HANG_TIMEOUT_S)
            lost_at = time.time()
            # Only the leader holds a session by that name: the standby's attempts are brief.
            terminate_lock_session("edge-test")
            wait_until(lambda: old.role() == "standby", timeout=HANG_TIMEOUT_S, what="the fence")
            leader = wait_for_leader([old, new], timeout=HANG_TIMEOUT_S)
            wait_until(
                lambda: len(traffic.served_by(leader.name, after=lost_at)) >= 20,
                timeout=HANG_TIMEOUT_S,
                what="the new leader to serve",
            )
        finally:
            stop_traffic(traffic, threads)
    report("database session ended", traffic, lost_at, leader)

    assert leader is new  # the fenced Edge waits before it asks for the lock again
    assert old.role() == "standby"
    assert "fenced:" in old.log()
    assert watch.overlaps() == []
    wait_until(lambda: ready_nodes(new) == {"node-a", "node-b"}, what="both Nodes on the new one")
    assert ready_nodes(old) == set()  # the fence closed its Node sessions
    wait_until(lambda: pool_is_idle(new), timeout=HANG_TIMEOUT_S, what="an idle pool")
