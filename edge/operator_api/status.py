"""`GET /status` on the operator listener: the pool and the Nodes as the Edge sees them now."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from asgiref.sync import async_to_sync
from rest_framework.request import Request
from rest_framework.response import Response

from edge.governance.figures import principal_figures
from edge.ha.role import Leadership
from edge.memory import COLLECTION_TIMES
from edge.operator_api.base import OperatorAPIView
from edge.operator_api.schema import described
from edge.runtime import get_runtime
from nodes import wire


def _reported(text: str | None, limit: int) -> str | None:
    """What a Node reported, as a JSON answer can always carry it: within the wire's bound for
    it, lone surrogates (no UTF-8 form) replaced. The codec refuses both; this holds regardless."""
    if text is None:
        return None
    return wire.clip(text, limit).encode(errors="replace").decode()


async def runtime_status() -> dict[str, Any]:
    """Read on the event loop that owns the pool (DRF views run in a worker thread)."""
    runtime = get_runtime()
    stats = runtime.pool.stats()
    return {
        "edge": runtime.config.edge.id,
        # "leader" or "standby" (`edge.ha`); a single Edge always leads (docs/operations.md).
        "role": runtime.leadership.role,
        "ha": _ha(runtime.leadership),
        "revision": runtime.config.revision,
        "nodes": {
            session.node_id: {
                "ready": session.ready,
                "acked_revision": _reported(session.acked_revision, wire.MAX_REVISION_CHARS),
            }
            for session in runtime.nodes.sessions()
        },
        "providers": {
            pid: {**asdict(p), "health_detail": _reported(p.health_detail, wire.MAX_DETAIL_CHARS)}
            for pid, p in sorted(stats.providers.items())
        },
        "models": {mid: asdict(m) for mid, m in sorted(stats.models.items())},
        # In flight, queued, admitted and limited counts and budgets left (docs/governance.md).
        "principals": {
            row.principal: {k: v for k, v in asdict(row).items() if k != "principal"}
            for row in principal_figures(
                runtime.limiter, runtime.config, runtime.pool.queued_by_principal()
            )
        },
        "usage_dropped": runtime.usage.dropped,
        "gc": COLLECTION_TIMES.report(),
    }


def _ha(leadership: Leadership) -> dict[str, Any] | None:
    """In HA, since when the role holds (wall clock) and how often this Edge led; else null."""
    if not leadership.ha:
        return None
    return {"since": leadership.since, "terms": leadership.terms}


class StatusView(OperatorAPIView):
    @described(summary="Pool and Node status", responses={200: dict})
    def get(self, request: Request) -> Response:
        return Response(async_to_sync(runtime_status)())
