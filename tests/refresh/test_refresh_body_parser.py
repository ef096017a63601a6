"""`POST /refresh`'s body parsed in the plan worker when it is a fleet's (refresh.body_parser):
the same data and the same errors as the operator API's parse here."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

from bench.fleet_config import fleet_yaml
from edge.operator_api.base import OperatorJSONParser
from refresh import body_parser
from refresh.body_parser import WORKER_PARSES_FROM_BYTES, RefreshJSONParser
from refresh.plan_worker import PlanWorker, WorkerBusy
from tests.refresh.worker_probes import wait_for

FLEET_BODY = json.dumps({"mode": "dry_run", "config_yaml": fleet_yaml(400)}).encode()


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[PlanWorker]:
    """A worker of its own, for an Edge that owns its process (as under run_edge)."""
    plan_worker = PlanWorker()
    monkeypatch.setattr(body_parser, "PLAN_WORKER", plan_worker)
    monkeypatch.setattr(body_parser, "get_runtime", lambda: SimpleNamespace(owns_process=True))
    yield plan_worker
    plan_worker.close()


def parse(parser: OperatorJSONParser, body: bytes) -> Any:
    request = SimpleNamespace(META={"CONTENT_LENGTH": str(len(body))})
    return parser.parse(io.BytesIO(body), "application/json", {"request": request})


def parse_error(parser: OperatorJSONParser, body: bytes) -> str:
    with pytest.raises(ParseError) as raised:
        parse(parser, body)
    return str(raised.value.detail)


def padded(body: str) -> bytes:
    """``body`` with trailing whitespace (still the same JSON) up to a fleet's size."""
    return body.encode() + b" " * WORKER_PARSES_FROM_BYTES


def test_a_fleet_s_body_is_parsed_there_as_here(worker: PlanWorker) -> None:
    assert len(FLEET_BODY) >= WORKER_PARSES_FROM_BYTES

    assert parse(RefreshJSONParser(), FLEET_BODY) == json.loads(FLEET_BODY)
    assert worker._pool is not None  # the worker parsed it


@pytest.mark.parametrize(
    "body",
    [
        '{"mode": "apply", "config_yaml": "a: 1',  # cut short
        '{"mode": "apply", "capacity": NaN}',  # not JSON
        "[" * 100_000 + "]" * 100_000,  # nested past the parser's depth
    ],
)
def test_a_bad_fleet_sized_body_gets_the_same_error(worker: PlanWorker, body: str) -> None:
    there = parse_error(RefreshJSONParser(), padded(body))

    assert there == parse_error(OperatorJSONParser(), padded(body))
    assert worker._pool is not None


def test_a_body_that_is_not_its_charset_gets_the_same_error(worker: PlanWorker) -> None:
    body = padded('{"config_yaml": "\\u00e9"}').replace(b"\\u00e9", b"\xe9")

    assert parse_error(RefreshJSONParser(), body) == parse_error(OperatorJSONParser(), body)
    assert "JSON parse error - 'utf-8' codec can't decode" in parse_error(RefreshJSONParser(), body)


def test_a_busy_worker_leaves_the_parse_here(worker: PlanWorker, tmp_path: Path) -> None:
    released = tmp_path / "released"
    busy = worker._submit(wait_for, str(released))
    try:
        with pytest.raises(WorkerBusy):
            worker.decode_json(FLEET_BODY, "utf-8", strict_constant)
        assert parse(RefreshJSONParser(), FLEET_BODY) == json.loads(FLEET_BODY)  # parsed here
    finally:
        released.touch()
    busy.result()
    assert worker.decode_json(FLEET_BODY, "utf-8", strict_constant) == json.loads(FLEET_BODY)


def test_a_small_body_is_parsed_here(worker: PlanWorker) -> None:
    assert parse(RefreshJSONParser(), b'{"mode": "dry_run"}') == {"mode": "dry_run"}
    assert worker._pool is None
