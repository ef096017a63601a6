"""The operator API renders exactly what DRF's JSON renderer does, in pieces."""

from __future__ import annotations

import datetime
import decimal
import uuid

from rest_framework.renderers import JSONRenderer

from edge.operator_api.json_renderer import OperatorJSONRenderer


def test_the_rendered_bytes_are_drf_s() -> None:
    data = {
        "status": "applied",
        "changes": [{"path": "x\u2028y", "old": decimal.Decimal("1.5"), "new": None}],
        "at": datetime.datetime(2026, 12, 1, 19, 0, tzinfo=datetime.UTC),
        "id": uuid.UUID(int=7),
        "node_pushes": [{"node": "é", "status": "acked"}],
    }
    assert OperatorJSONRenderer().render(data) == JSONRenderer().render(data)


def test_an_indented_answer_is_drf_s_too() -> None:
    data = {"changes": [{"path": "a"}]}
    context = {"indent": 2}
    assert OperatorJSONRenderer().render(data, renderer_context=context) == JSONRenderer().render(
        data, renderer_context=context
    )
