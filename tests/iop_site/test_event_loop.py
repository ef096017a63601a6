"""`run_edge` serves on uvloop unless IOP_EVENT_LOOP=asyncio; every other command keeps the
standard loop; a loop name the Edge does not know stops it, naming the variable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import uvloop

from iop_site import event_loop


@pytest.fixture
def policy() -> Iterator[None]:
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


def new_loop_type() -> type:
    loop = asyncio.new_event_loop()
    try:
        return type(loop)
    finally:
        loop.close()


def test_it_serves_on_uvloop_by_default(policy: None) -> None:
    assert event_loop.install(["manage.py", "run_edge", "--config", "x.yaml"], {}) == "uvloop"

    assert new_loop_type() is uvloop.Loop


def test_it_serves_on_the_standard_loop_when_asked(policy: None) -> None:
    before = new_loop_type()

    chosen = event_loop.install(["manage.py", "run_edge"], {"IOP_EVENT_LOOP": " asyncio "})

    assert chosen == "asyncio"
    assert new_loop_type() is before


@pytest.mark.parametrize(
    "argv", [["manage.py"], ["manage.py", "migrate"], ["manage.py", "refresh"]]
)
def test_other_commands_keep_the_standard_loop(policy: None, argv: list[str]) -> None:
    before = new_loop_type()

    assert event_loop.install(argv, {"IOP_EVENT_LOOP": "uvloop"}) is None

    assert new_loop_type() is before


def test_an_unknown_loop_stops_the_edge_naming_the_variable(policy: None) -> None:
    before = new_loop_type()

    with pytest.raises(SystemExit) as stopped:
        event_loop.install(["manage.py", "run_edge"], {"IOP_EVENT_LOOP": "trio"})

    assert str(stopped.value) == "IOP_EVENT_LOOP must be one of uvloop, asyncio, got 'trio'"
    assert new_loop_type() is before
