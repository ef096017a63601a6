from __future__ import annotations

import pytest
from twisted.web.http import _parseContentType as twisted_parse

from iop_site.daphne_tuning import media_type
from iop_site.listeners import LISTEN_BACKLOG, daphne_endpoint

# Keep the original at import time: run_edge replaces it in its own process only.
ORIGINAL = twisted_parse


@pytest.mark.parametrize(
    "value",
    [
        b"application/json",
        b"Application/JSON; charset=utf-8",
        b"multipart/form-data; boundary=x",
        b"application/x-www-form-urlencoded",
        b" text/html ;q=1",
        b"garbage",
        b"",
        b"a/b/c",
        b"/x",
        b"x/",
        b";",
    ],
)
def test_it_parses_a_content_type_as_twisted_does(value: bytes) -> None:
    assert media_type(value) == ORIGINAL(value)


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [("127.0.0.1:8000", "127.0.0.1", 8000), ("[::1]:8001", "::1", 8001)],
)
def test_it_turns_a_listen_address_into_a_twisted_endpoint(listen: str, host: str, port: int):
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    endpoint = serverFromString(reactor, daphne_endpoint(listen))

    assert (endpoint._interface, endpoint._port, endpoint._backlog) == (host, port, LISTEN_BACKLOG)
