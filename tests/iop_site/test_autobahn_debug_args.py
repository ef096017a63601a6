from __future__ import annotations

from collections.abc import Iterator
from pprint import pformat

import pytest
import txaio
from autobahn import util
from autobahn.twisted import websocket as twisted_websocket
from autobahn.websocket import protocol

from iop_site.autobahn_debug_args import install, plain_repr, unformatted

MODULES = (protocol, twisted_websocket)


@pytest.fixture(autouse=True)
def formatters_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # run_edge replaces them in its own process only; the test process keeps autobahn's.
    for module in MODULES:
        monkeypatch.setattr(module, "hltype", util.hltype)
        monkeypatch.setattr(module, "hlval", util.hlval)
    monkeypatch.setattr(protocol, "pformat", pformat)
    level = txaio.get_global_log_level()
    yield
    txaio.set_global_log_level(level)


def test_below_debug_the_debug_lines_arguments_go_unformatted() -> None:
    txaio.set_global_log_level("info")

    assert install() is True

    for module in MODULES:
        assert module.hltype is unformatted
        assert module.hlval is unformatted
    peer = "tcp:127.0.0.1:5000"
    assert protocol.hlval(peer, color="white", bold=True) is peer
    assert protocol.pformat is plain_repr
    options = [("maxFramePayloadSize", 1 << 20, "WebSocketServerFactory")]
    assert protocol.pformat(options) == repr(options)


def test_timings_still_print_as_text() -> None:
    txaio.set_global_log_level("info")
    install()
    timings = protocol.Timings()
    timings.track("onOpen")

    assert "onOpen" in str(timings)


@pytest.mark.parametrize("level", ["debug", "trace"])
def test_at_debug_autobahn_formats_its_lines_as_before(level: str) -> None:
    txaio.set_global_log_level(level)

    assert install() is False

    for module in MODULES:
        assert module.hltype is util.hltype
        assert module.hlval is util.hlval
    assert protocol.pformat is pformat
