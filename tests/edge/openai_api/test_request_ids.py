"""The request ids the Edge makes: 24 hex digits that sort by when they were made."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from edge.config import load_config_text
from edge.openai_api.exchange import new_request_id
from edge.runtime import EdgeRuntime, install_runtime
from tests.edge.openai_api.asgi_client import post_chat

HEX_ID = re.compile(r"[0-9a-f]{24}")


def test_an_id_begins_with_the_millisecond_it_was_made_in() -> None:
    before = time.time_ns() // 1_000_000
    request_id = new_request_id()
    after = time.time_ns() // 1_000_000

    assert HEX_ID.fullmatch(request_id)
    assert before <= int(request_id[:12], 16) <= after


def test_ids_of_later_milliseconds_sort_after_earlier_ones(monkeypatch) -> None:
    ids = []
    for millisecond in (1_700_000_000_000, 1_700_000_000_001, 1_800_000_000_000):
        monkeypatch.setattr(time, "time_ns", lambda ms=millisecond: ms * 1_000_000 + 999_999)
        ids.append(new_request_id())

    assert ids == sorted(ids)
    assert len({request_id[:12] for request_id in ids}) == 3


def test_ids_of_one_millisecond_differ(monkeypatch) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)

    ids = {new_request_id() for _ in range(1_000)}

    assert len(ids) == 1_000
    assert {request_id[:12] for request_id in ids} == {f"{1_700_000_000_000:012x}"}


@pytest.fixture
def edge_without_nodes() -> Iterator[None]:
    async def ignore(batch: list[Any]) -> None:
        pass

    config = load_config_text("version: 1\nedge: {id: e}\nnodes: []\nmodels: []\n")
    install_runtime(EdgeRuntime(config, None, ignore, ignore))
    yield
    install_runtime(None)


@pytest.mark.usefixtures("edge_without_nodes")
@pytest.mark.parametrize("sent", [None, b"bad id with spaces"])
async def test_an_answer_without_a_usable_id_of_the_caller_s_gets_a_new_one(sent) -> None:
    headers = [(b"x-request-id", sent)] if sent else []

    _, answer_headers, _ = await post_chat(b"{}", headers)

    request_id = answer_headers[b"x-request-id"].decode()
    assert HEX_ID.fullmatch(request_id)
    assert abs(int(request_id[:12], 16) - time.time_ns() // 1_000_000) < 60_000
