"""`POST /refresh` on the loopback operator listener."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from edge.ha.role import EDGE_STANDBY, STANDBY_REFRESH_REFUSAL, STANDBY_RETRY_AFTER_S
from edge.operator_api.base import OperatorAPIView
from edge.operator_api.schema import described
from edge.pacing import paced
from edge.runtime import get_runtime
from refresh.actions import run_refresh
from refresh.actor import MAX_OS_USER_CHARS, OS_USER_HEADER, by_token, is_os_user
from refresh.body_parser import RefreshJSONParser
from refresh.plan import STATUSES, SUCCESSES, Status
from refresh.serializers import RefreshRequestSerializer, RefreshResultSerializer

# Refusals are 4xx so scripts notice them; a refusal without a code here fails at import.
REFUSAL_CODES: dict[Status, int] = {"restart_required": 409, "stale": 412, "invalid": 422}
STATUS_CODES = {
    status: 200 if status in SUCCESSES else REFUSAL_CODES[status] for status in STATUSES
}


def reported_os_user(request: Request) -> str:
    """The OS user the CLI reports in `X-Operator-User`; a malformed one is a 400, no record."""
    os_user = request.headers.get(OS_USER_HEADER, "")
    if os_user and not is_os_user(os_user):
        raise ValidationError(
            {
                OS_USER_HEADER: [
                    f"Must be 1-{MAX_OS_USER_CHARS} printable ASCII characters, "
                    "without spaces at either end."
                ]
            }
        )
    return os_user


class RefreshView(OperatorAPIView):
    """Dry-run or apply a candidate config: classify every change live or restart-required."""

    parser_classes = [RefreshJSONParser]

    @described(
        request=RefreshRequestSerializer,
        responses={code: RefreshResultSerializer for code in sorted(set(STATUS_CODES.values()))},
        summary="Dry-run or apply a config refresh",
    )
    def post(self, request: Request) -> Response:
        if not get_runtime().leadership.admitting:
            return Response(
                {"detail": STANDBY_REFRESH_REFUSAL, "code": EDGE_STANDBY},
                status=503,
                headers={"Retry-After": str(STANDBY_RETRY_AFTER_S)},
            )
        body = RefreshRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        os_user = reported_os_user(request)
        token_name = str(request.auth)
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
            requested_by=by_token(token_name, os_user, str(request.META.get("REMOTE_ADDR"))),
            request_id=request.headers.get("X-Request-Id", "")[:64],
            token_name=token_name,
            os_user=os_user,
            reason=data.get("reason", ""),
        )
        with paced():  # edge.pacing: a fleet's result is built beside the event loop
            answer = result.to_dict()
        return Response(answer, status=STATUS_CODES[result.status])
