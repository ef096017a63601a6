"""The operator API renders what DRF's JSON renderer does: by orjson where it can, else in
paced pieces."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.renderers import JSONRenderer

from edge.operator_api.json_renderer import OperatorJSONRenderer, orjson_text

# What the operator API answers with: JSON values, and the types DRF's encoder writes.
plain = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
drf_types = (
    st.datetimes(timezones=st.none() | st.just(datetime.UTC))
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
)
documents = st.recursive(
    plain | drf_types,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


def test_the_rendered_bytes_are_drf_s() -> None:
    data = {
        "status": "applied",
        "changes": [{"path": "x\u2028y\u2029", "old": decimal.Decimal("1.5"), "new": None}],
        "at": datetime.datetime(2026, 12, 1, 19, 0, 0, 123456, tzinfo=datetime.UTC),
        "id": uuid.UUID(int=7),
        "node_pushes": [{"node": "é", "status": "acked"}],
    }
    assert orjson_text(data) is not None
    assert OperatorJSONRenderer().render(data) == JSONRenderer().render(data)


@given(documents)
def test_any_answer_is_drf_s_to_the_byte(data: Any) -> None:
    assert OperatorJSONRenderer().render(data) == JSONRenderer().render(data)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False)))
def test_floats_have_drf_s_values(data: list[float]) -> None:
    # The one difference in the text: an exponent's form (1e-07 there, 1e-7 here).
    assert json.loads(OperatorJSONRenderer().render(data)) == data


@pytest.mark.parametrize("data", [{1: "a", "b": [2**70]}, [2**64], {"k": {None: 1}}])
def test_what_orjson_cannot_write_is_rendered_by_drf(data: Any) -> None:
    assert orjson_text(data) is None
    assert OperatorJSONRenderer().render(data) == JSONRenderer().render(data)


@dataclasses.dataclass
class NotJSON:
    value: int


@pytest.mark.parametrize("data", [{"x": object()}, [NotJSON(1)]])
def test_what_drf_refuses_is_refused_as_drf_refuses_it(data: Any) -> None:
    with pytest.raises(TypeError) as ours:
        OperatorJSONRenderer().render(data)
    with pytest.raises(TypeError) as drf:
        JSONRenderer().render(data)
    assert str(ours.value) == str(drf.value)


def test_an_indented_answer_is_drf_s_too() -> None:
    data = {"changes": [{"path": "a"}]}
    context = {"indent": 2}
    assert OperatorJSONRenderer().render(data, renderer_context=context) == JSONRenderer().render(
        data, renderer_context=context
    )
