"""What the live pool dashboard shows, built from the Edge's runtime (plain Python, no Django).

Two steps, so that the event loop pays only for a copy: ``read_pool`` runs on the loop that owns
the pool and keeps references to what it read (the pool's figures, immutable config objects and
each session's few facts); ``dashboard_data`` turns a reading into the JSON-ready answer and may
run in any thread. Tables travel as ``{"columns": [...], "rows": [[...], ...]}``: at 10,000
providers, rows of values are a third of the size of objects repeating every key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edge.config import EdgeConfig
from edge.dispatch import PoolStats
from edge.governance.figures import PRINCIPAL_COLUMNS, PrincipalFigures, principal_figures
from edge.runtime import EdgeRuntime

NODE_COLUMNS = (
    "id",
    "alias",
    "connected",
    "ready",
    "acked_revision",
    "agent_version",
    "connected_since",
)
PROVIDER_COLUMNS = (
    "id",
    "node",
    "enabled",
    "in_flight",
    "capacity",
    "long_in_flight",
    "long_slots",
    "healthy",
    "health_detail",
    "passive_state",
    "passive_reason",
    "recent_failures",
    "reopens_in_s",
    "node_ready",
    "listed",
)
MODEL_COLUMNS = ("id", "queue_depth", "long_queue_depth", "oldest_wait_s", "providers")
# The page polls once a second; less often when reading the pool takes longer than this share of
# the event loop's time at that pace (tens of milliseconds a read: several thousand providers).
POLL_INTERVAL_S = 1.0
LOOP_SHARE = 0.02


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """One connected Node session, as the dashboard shows it."""

    ready: bool
    acked_revision: str | None
    agent_version: str | None
    connected_at: float  # wall clock, seconds since the epoch


@dataclass(frozen=True, slots=True)
class PoolReading:
    """What ``read_pool`` copied on the event loop."""

    config: EdgeConfig
    sessions: dict[str, SessionFacts]
    stats: PoolStats
    taken_at: float  # wall clock
    loop_s: float  # how long the event loop spent on the reading
    principals: tuple[PrincipalFigures, ...] = ()  # per-principal governance figures


def read_pool(runtime: EdgeRuntime) -> PoolReading:
    """Read the runtime for the dashboard. Call it on the event loop that owns the pool."""
    started = time.perf_counter()
    sessions = {
        session.node_id: SessionFacts(
            session.ready, session.acked_revision, session.agent_version, session.connected_at
        )
        for session in runtime.nodes.sessions()
    }
    stats = runtime.pool.stats()
    principals = principal_figures(
        runtime.limiter, runtime.config, runtime.pool.queued_by_principal()
    )
    return PoolReading(
        runtime.config, sessions, stats, time.time(), time.perf_counter() - started, principals
    )


def dashboard_data(reading: PoolReading) -> dict[str, Any]:
    """The dashboard's JSON answer for one reading (the refresh history is added beside it)."""
    config = reading.config
    return {
        "edge": config.edge.id,
        "revision": config.revision,
        "generated_at": reading.taken_at,
        "loop_ms": round(reading.loop_s * 1000, 3),
        "poll_ms": round(poll_interval_s(reading.loop_s) * 1000),
        "nodes": _table(NODE_COLUMNS, _node_rows(reading)),
        "providers": _table(PROVIDER_COLUMNS, _provider_rows(reading.stats)),
        "models": _table(MODEL_COLUMNS, _model_rows(reading)),
        "principals": _table(PRINCIPAL_COLUMNS, [row.row() for row in reading.principals]),
    }


def poll_interval_s(loop_s: float) -> float:
    """How long the page waits before its next poll, given what the last reading cost the loop."""
    return max(POLL_INTERVAL_S, loop_s / LOOP_SHARE)


class SharedFeed:
    """One answer for every viewer polling within ``max_age_s`` of its building: however many
    dashboards are open, the pool is read about once per interval. Built anew for another
    runtime (a test installing its own)."""

    def __init__(
        self,
        build: Callable[[EdgeRuntime], bytes],
        *,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()  # viewers' requests may run in several threads
        self._built: tuple[EdgeRuntime, float, bytes] | None = None

    def get(self, runtime: EdgeRuntime) -> bytes:
        with self._lock:
            now = self._clock()
            built = self._built
            if built is None or built[0] is not runtime or now - built[1] >= self._max_age_s:
                built = self._built = (runtime, now, self._build(runtime))
            return built[2]


def rows_as_dicts(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A table of the answer as one dict per row (for readers that want names, e.g. tests)."""
    columns = table["columns"]
    return [dict(zip(columns, row, strict=True)) for row in table["rows"]]


def _table(columns: tuple[str, ...], rows: list[list[Any]]) -> dict[str, Any]:
    return {"columns": list(columns), "rows": rows}


def _node_rows(reading: PoolReading) -> list[list[Any]]:
    """Every configured Node, connected or not, then any session of a Node the running config
    no longer lists (it stays connected until it goes)."""
    sessions = reading.sessions
    rows = [_node_row(node.id, node.alias, sessions.get(node.id)) for node in reading.config.nodes]
    configured = {node.id for node in reading.config.nodes}
    rows += [
        _node_row(node_id, None, facts)
        for node_id, facts in sessions.items()
        if node_id not in configured
    ]
    return rows


def _node_row(node_id: str, alias: str | None, facts: SessionFacts | None) -> list[Any]:
    if facts is None:
        return [node_id, alias, False, False, None, None, None]
    return [
        node_id,
        alias,
        True,
        facts.ready,
        facts.acked_revision,
        facts.agent_version,
        facts.connected_at,
    ]


def _provider_rows(stats: PoolStats) -> list[list[Any]]:
    """In the pool's order (the config's: grouped by Node)."""
    return [
        [
            p.provider_id,
            p.node_id,
            p.enabled,
            p.in_flight,
            p.capacity,
            p.long_in_flight,
            p.long_context_slots,
            p.healthy,
            p.health_detail,
            p.passive_state,
            p.passive_reason,
            p.recent_failures,
            round(p.reopens_in_s, 1),
            p.node_ready,
            p.listed,
        ]
        for p in stats.providers.values()
    ]


def _model_rows(reading: PoolReading) -> list[list[Any]]:
    routes = {model.id: sorted(model.providers) for model in reading.config.models}
    return [
        [
            model_id,
            m.queue_depth,
            m.long_queue_depth,
            round(m.oldest_wait_s, 3),
            routes.get(model_id, []),
        ]
        for model_id, m in reading.stats.models.items()
    ]
