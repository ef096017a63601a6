"""Autobahn's websocket protocol builds the arguments of its debug log lines even when debug is
off: every frame received (``dataReceived``) and sent (``sendData``) on a Node's websocket formats
the method's qualified name and the peer's address in terminal colours (``hltype``, ``hlval``:
``inspect`` and ``click.style``) for a ``log.debug`` that then does nothing. That was about 4 % of
the Edge's CPU per chat completion (docs/benchmarks.md). Unless autobahn's log level is debug or
trace, those two names in its protocol modules hand their value through unformatted.
"""

from __future__ import annotations

from typing import Any

VERBOSE_LEVELS = frozenset({"debug", "trace"})
FORMATTERS = ("hltype", "hlval")


def unformatted(value: Any, *_style: Any, **_style_options: Any) -> Any:
    """``value`` as given: what a debug line that is never written is built from."""
    return value


def install() -> bool:
    """Replace the formatters unless autobahn logs at debug; whether they were replaced."""
    from autobahn.twisted import websocket as twisted_websocket
    from autobahn.websocket import protocol
    from txaio.tx import get_global_log_level  # txaio's own under Twisted, as autobahn's is

    if get_global_log_level() in VERBOSE_LEVELS:
        return False
    for module in (protocol, twisted_websocket):
        for formatter in FORMATTERS:
            setattr(module, formatter, unformatted)
    return True
