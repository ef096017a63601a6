"""The operator API's JSON renderer: DRF's, writing its documents in pieces
(``edge.json_pieces``), since a fleet's refresh result is megabytes and is rendered in a thread
beside the event loop."""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from edge.json_pieces import PiecewiseJSONEncoder


class PiecewiseDRFEncoder(PiecewiseJSONEncoder, JSONEncoder):
    """DRF's encoder (dates, decimals, UUIDs...) in pieces."""


class OperatorJSONRenderer(JSONRenderer):
    encoder_class = PiecewiseDRFEncoder
