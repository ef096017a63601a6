"""`GET /status` on the operator listener: the pool and the Nodes as the Edge sees them now."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from asgiref.sync import async_to_sync
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from edge.operator_api.permissions import LoopbackOnly
from edge.runtime import get_runtime


async def runtime_status() -> dict[str, Any]:
    """Read on the event loop that owns the pool (DRF views run in a worker thread)."""
    runtime = get_runtime()
    stats = runtime.pool.stats()
    return {
        "edge": runtime.config.edge.id,
        "revision": runtime.config.revision,
        "nodes": {
            session.node_id: {"ready": session.ready, "acked_revision": session.acked_revision}
            for session in runtime.nodes.sessions()
        },
        "providers": {pid: asdict(p) for pid, p in sorted(stats.providers.items())},
        "models": {mid: asdict(m) for mid, m in sorted(stats.models.items())},
        "usage_dropped": runtime.usage.dropped,
    }


class StatusView(APIView):
    permission_classes = [LoopbackOnly]

    @extend_schema(summary="Pool and Node status", responses={200: dict})
    def get(self, request: Request) -> Response:
        return Response(async_to_sync(runtime_status)())
