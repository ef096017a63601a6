"""The operator API's JSON renderer: DRF's, writing its documents in pieces
(``edge.json_pieces``) and paced (``edge.pacing``), since a fleet's refresh result is megabytes
and is rendered in a thread beside the event loop: unpaced, rendering the 30,000 changes of a
3,000-node apply held requests up for about 60 ms."""

from __future__ import annotations

from typing import Any

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from edge.json_pieces import PiecewiseJSONEncoder
from edge.pacing import paced


class PiecewiseDRFEncoder(PiecewiseJSONEncoder, JSONEncoder):
    """DRF's encoder (dates, decimals, UUIDs...) in pieces."""


class OperatorJSONRenderer(JSONRenderer):
    encoder_class = PiecewiseDRFEncoder

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict[str, Any] | None = None,
    ) -> bytes:
        with paced():
            return super().render(data, accepted_media_type, renderer_context)
