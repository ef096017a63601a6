"""What every operator API view shares: its guards, and JSON in and out.

JSON only: a browser page can send a form (urlencoded, multipart, text/plain) to any URL without
asking, but never `application/json` to another site. Anything else is a 415 with a JSON error.
Bodies are bounded by `DATA_UPLOAD_MAX_MEMORY_SIZE` (room for the largest config, escaped in JSON):
a larger one is refused before any of it is read (413, `edge.operator_api.errors`).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

from edge.operator_api.json_renderer import OperatorJSONRenderer
from edge.operator_api.permissions import OPERATOR_PERMISSIONS
from edge.operator_api.token import OperatorTokenAuthentication


class OperatorJSONParser(JSONParser):
    """JSON whose nesting is too deep for the parser is a parse error too, not a crash."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None


class OperatorAPIView(APIView):
    """Loopback peer, no cross-site browser request, the operator token; JSON bodies only."""

    authentication_classes = [OperatorTokenAuthentication]
    permission_classes = OPERATOR_PERMISSIONS
    parser_classes = [OperatorJSONParser]
    renderer_classes = [OperatorJSONRenderer]
