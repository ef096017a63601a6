"""Daphne reaches Twisted's HTTP module through the proxy Twisted puts in its place.

``twisted.web.http`` has deprecated names, so Twisted keeps a proxy in ``sys.modules`` that
looks every attribute up in Python (``twisted.python.deprecate._ModuleProxy``) to warn about
those. Daphne calls ``http.Request.write`` for every body message it sends, so each streamed
token paid that lookup: about 4 % of the Edge's CPU at 1,500 paced streams (docs/benchmarks.md).
Daphne uses none of the deprecated names; its modules are pointed at the module itself, and the
proxy stays in place for everyone else.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from twisted.python.deprecate import _ModuleProxy


def unproxied(module: Any) -> ModuleType:
    """The module behind a Twisted deprecation proxy; ``module`` itself when it is not one."""
    if type(module) is _ModuleProxy:
        inner: ModuleType = object.__getattribute__(module, "_module")
        return inner
    return module


def install() -> None:
    import daphne.http_protocol
    import daphne.server

    for module in (daphne.http_protocol, daphne.server):
        module.http = unproxied(module.http)
