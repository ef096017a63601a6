"""What every operator API view shares: its guards, and JSON in and out.

JSON only: a browser page can send a form (urlencoded, multipart, text/plain) to any URL without
asking, but never `application/json` to another site. Anything else is a 415 with a JSON error.
Bodies are bounded by `DATA_UPLOAD_MAX_MEMORY_SIZE` (room for the largest config, escaped in JSON):
a larger one is refused before any of it is read (413, `edge.operator_api.errors`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.views import APIView

from edge.operator_api.json_renderer import OperatorJSONRenderer
from edge.operator_api.permissions import OPERATOR_PERMISSIONS
from edge.operator_api.token import OperatorTokenAuthentication


class OperatorJSONParser(BaseParser):
    """DRF's JSON parsing, read from the request's stream; JSON whose nesting is too deep for the
    parser is a parse error too, not a crash.

    Not a ``JSONParser`` subclass: DRF reads the body of a request for one of those into the
    request first (``request.body``), a copy as large as the body that lives as long as the
    request's objects. A refresh freezes them while they are alive (``edge.memory``); once the
    request ended they were a frozen reference cycle, never freed, and every refresh left its
    config's size behind (about 5 MB per apply at 3,000 nodes).
    """

    media_type = "application/json"
    _json = JSONParser()

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # The check ``request.body`` makes (a 413, edge.operator_api.errors); daphne refuses
        # such a body before Django sees it, the test client does not.
        request = (parser_context or {}).get("request")
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and int(length or 0) > limit:
            raise RequestDataTooBig("The request body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE.")
        try:
            return self.decode(stream, int(length or 0), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None

    def decode(self, stream: Any, length: int, media_type: str | None, parser_context: Any) -> Any:
        """The body's JSON (``length``: its Content-Length, 0 when it has none)."""
        return self._json.parse(stream, media_type, parser_context)


class OperatorAPIView(APIView):
    """Loopback peer, no cross-site browser request, the operator token; JSON bodies only."""

    authentication_classes = [OperatorTokenAuthentication]
    permission_classes = OPERATOR_PERMISSIONS
    parser_classes = [OperatorJSONParser]
    renderer_classes = [OperatorJSONRenderer]
