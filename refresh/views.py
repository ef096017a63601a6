"""`POST /refresh` on the loopback operator listener."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from edge.operator_api.base import OperatorAPIView
from edge.runtime import get_runtime
from refresh.actions import run_refresh
from refresh.plan import STATUSES, SUCCESSES, Status
from refresh.serializers import RefreshRequestSerializer, RefreshResultSerializer

# Refusals are 4xx so scripts notice them; a refusal without a code here fails at import.
REFUSAL_CODES: dict[Status, int] = {"restart_required": 409, "stale": 412, "invalid": 422}
STATUS_CODES = {
    status: 200 if status in SUCCESSES else REFUSAL_CODES[status] for status in STATUSES
}


class RefreshView(OperatorAPIView):
    """Dry-run or apply a candidate config: classify every change live or restart-required."""

    @extend_schema(
        request=RefreshRequestSerializer,
        responses={code: RefreshResultSerializer for code in sorted(set(STATUS_CODES.values()))},
        summary="Dry-run or apply a config refresh",
    )
    def post(self, request: Request) -> Response:
        body = RefreshRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        # The candidate leaves the request's objects: DRF's request, view and serializer refer
        # to one another, and a refresh freezes what is alive (edge.memory), so a config left in
        # them would stay in memory after the request ends. Here it goes with this frame.
        config_yaml = data.pop("config_yaml", None)
        request.data.pop("config_yaml", None)
        result = async_to_sync(run_refresh)(
            get_runtime(),
            mode=data["mode"],
            config_yaml=config_yaml,
            base_revision=data.get("base_revision"),
            candidate_revision=data.get("candidate_revision"),
            requested_by=f"loopback {request.META.get('REMOTE_ADDR')}",
            request_id=request.headers.get("X-Request-Id", "")[:64],
        )
        return Response(result.to_dict(), status=STATUS_CODES[result.status])
