from __future__ import annotations

import sys
import warnings

import daphne.http_protocol
import daphne.server
import pytest
from twisted.python.deprecate import _ModuleProxy
from twisted.web import http

from iop_site.daphne_http_module import install, unproxied


@pytest.fixture(autouse=True)
def daphne_modules_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    # run_edge points them at the module in its own process only.
    monkeypatch.setattr(daphne.http_protocol, "http", http)
    monkeypatch.setattr(daphne.server, "http", http)


def test_twisted_keeps_its_http_module_behind_a_deprecation_proxy() -> None:
    # What this module works around: if Twisted drops the proxy, the workaround has no job.
    assert isinstance(sys.modules["twisted.web.http"], _ModuleProxy)


def test_daphne_reaches_the_module_itself_and_everyone_else_the_proxy() -> None:
    install()

    for module in (daphne.http_protocol, daphne.server):
        assert type(module.http) is type(sys)
        assert module.http.Request is http.Request
        assert module.http.Request.write is http.Request.write
    assert sys.modules["twisted.web.http"] is http


def test_a_patch_made_through_the_proxy_is_seen_behind_it() -> None:
    install()
    parse = http._parseContentType
    try:
        http._parseContentType = len  # as iop_site.daphne_tuning does
        assert daphne.http_protocol.http._parseContentType is len
    finally:
        http._parseContentType = parse


def test_a_module_that_is_not_proxied_is_its_own_module() -> None:
    assert unproxied(warnings) is warnings
    assert unproxied(http) is not http and unproxied(unproxied(http)) is unproxied(http)
