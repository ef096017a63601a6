"""`edge.json_pieces`: the pieces join to exactly what the standard encoder writes, and a large
document comes out of small calls."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge.json_pieces import PiecewiseJSONEncoder, encode_whole_in_this_process, json_pieces

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)
options = st.fixed_dictionaries(
    {
        "sort_keys": st.booleans(),
        "ensure_ascii": st.booleans(),
        "separators": st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")]),
    }
)


@given(documents, options, st.integers(min_value=0, max_value=4))
def test_pieces_join_to_the_standard_text(data: Any, chosen: dict[str, Any], depth: int) -> None:
    encoder = json.JSONEncoder(**chosen)
    assert "".join(json_pieces(data, encoder, depth)) == encoder.encode(data)


@given(documents)
def test_the_encoder_writes_what_dumps_writes(data: Any) -> None:
    assert json.dumps(data, cls=PiecewiseJSONEncoder) == json.dumps(data)


def test_keys_that_are_not_strings_follow_the_standard_rules() -> None:
    data = {"a": {1: "one", None: "none", 2.5: "x"}, "b": [True]}
    assert json.dumps(data, cls=PiecewiseJSONEncoder) == json.dumps(data)


def test_an_indented_document_is_encoded_whole() -> None:
    data = {"changes": [{"path": "a"}, {"path": "b"}]}
    encoder = json.JSONEncoder(indent=2)
    assert list(json_pieces(data, encoder, 3)) == [encoder.encode(data)]


def test_values_the_encoder_cannot_write_fail_as_they_would_whole() -> None:
    class Unknown:
        pass

    with pytest.raises(TypeError, match="Unknown is not JSON serializable"):
        json.dumps({"changes": [Unknown()]}, cls=PiecewiseJSONEncoder)
    strict = json.JSONEncoder(allow_nan=False)
    with pytest.raises(ValueError, match="Out of range float"):
        "".join(json_pieces({"old": [float("nan")]}, strict, 3))


def test_a_subclass_default_hook_applies_to_every_piece() -> None:
    class Dates(PiecewiseJSONEncoder):
        def default(self, o: Any) -> Any:
            if isinstance(o, datetime.date):
                return o.isoformat()
            return super().default(o)

    data = {"changes": [{"at": datetime.date(2026, 12, 1)}]}
    assert json.dumps(data, cls=Dates) == '{"changes": [{"at": "2026-12-01"}]}'


def test_a_fleet_sized_result_comes_out_of_small_pieces() -> None:
    # A refresh result of 30,000 changes is megabytes; no piece is more than one change.
    changes = [
        {"path": f"nodes[n{i}].providers[p{i}].capacity", "op": "changed", "old": 4, "new": 5}
        for i in range(30_000)
    ]
    pieces = list(json_pieces({"status": "applied", "changes": changes}, PiecewiseJSONEncoder(), 2))
    assert "".join(pieces) == json.dumps({"status": "applied", "changes": changes})
    assert max(map(len, pieces)) < 100


def test_a_process_that_encodes_whole_gets_one_piece_of_the_same_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    document = {"status": "applied", "changes": [{"path": f"nodes[n{i}]"} for i in range(100)]}
    pieced = "".join(json_pieces(document, PiecewiseJSONEncoder(), 2))
    monkeypatch.setattr("edge.json_pieces._whole_in_this_process", False)

    encode_whole_in_this_process()  # what the refresh plan worker does as it starts

    assert list(json_pieces(document, PiecewiseJSONEncoder(), 2)) == [pieced]
    assert json.dumps(document, cls=PiecewiseJSONEncoder) == pieced
