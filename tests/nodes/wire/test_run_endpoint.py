"""The ``endpoint`` field of ``run.request``: which OpenAI endpoint a run's body is for."""

from __future__ import annotations

from typing import Any

import pytest

from nodes import wire

BODY = {"model": "m", "input": "hello"}


def request_frame(**overrides: Any) -> dict[str, Any]:
    frame = dict(wire.run_request("r1", "p1", "echo", "m", BODY, 1700000000.5))
    frame.update(overrides)
    return frame


def decode(frame: dict[str, Any]) -> wire.RunRequest:
    decoded = wire.decode(wire.encode(frame), accept=wire.EDGE_TO_NODE)  # type: ignore[arg-type]
    assert decoded["type"] == "run.request"
    return decoded


@pytest.mark.parametrize("endpoint", wire.ENDPOINTS)
def test_it_carries_each_endpoint(endpoint: wire.Endpoint) -> None:
    frame = wire.run_request("r1", "p1", "echo", "m", BODY, 1.0, endpoint=endpoint)
    decoded = decode(dict(frame))
    assert decoded["endpoint"] == endpoint
    assert wire.endpoint_of(decoded) == endpoint


def test_the_builder_always_says_which_endpoint() -> None:
    assert wire.run_request("r1", "p1", "echo", "m", BODY, 1.0)["endpoint"] == "chat.completions"


def test_a_request_without_endpoint_is_for_chat_completions() -> None:
    frame = request_frame()
    del frame["endpoint"]
    assert wire.endpoint_of(decode(frame)) == "chat.completions"


@pytest.mark.parametrize("value", ["images", "", "Embeddings", "/v1/embeddings", 3, None, ["x"]])
def test_an_unknown_endpoint_is_a_bad_field_that_names_its_run(value: Any) -> None:
    frame = request_frame(endpoint=value)
    text = wire.encode(frame)  # type: ignore[arg-type]
    with pytest.raises(wire.FrameError) as raised:
        wire.decode(text, accept=wire.EDGE_TO_NODE)
    assert (raised.value.code, raised.value.field) == ("bad_field", "endpoint")
    assert raised.value.message == (
        "run.request: field 'endpoint' must be one of "
        "'chat.completions', 'completions', 'embeddings', 'responses'"
    )
    assert wire.run_id_of(text, frozenset({"run.request"})) == "r1"
