"""Autobahn's websocket protocol builds the arguments of its debug log lines even when debug is
off: every frame received (``dataReceived``) and sent (``sendData``) on a Node's websocket formats
the method's qualified name and the peer's address in terminal colours (``hltype``, ``hlval``:
``inspect`` and ``click.style``), and every new connection pretty-prints its 29 options
(``pformat``, 131 µs), for a ``log.debug`` that then does nothing. That was about 4 % of the
Edge's CPU per chat completion, and 0.4 s of the event loop while 3,000 Nodes connected
(docs/benchmarks.md). Unless autobahn's log level is debug or trace, those names in its protocol
modules hand their value through unformatted, and ``pformat`` becomes ``repr`` (10 µs; it must
still give a string: ``Timings.__str__`` returns it).
"""

from __future__ import annotations

from typing import Any

VERBOSE_LEVELS = frozenset({"debug", "trace"})


def unformatted(value: Any, *_style: Any, **_style_options: Any) -> Any:
    """``value`` as given: what a debug line that is never written is built from."""
    return value


def plain_repr(value: Any, *_layout: Any, **_layout_options: Any) -> str:
    """``repr(value)``: ``pformat``'s text on one line, without its layout work."""
    return repr(value)


def install() -> bool:
    """Replace the formatters unless autobahn logs at debug; whether they were replaced."""
    from autobahn.twisted import websocket as twisted_websocket
    from autobahn.websocket import protocol
    from txaio.tx import get_global_log_level  # txaio's own under Twisted, as autobahn's is

    if get_global_log_level() in VERBOSE_LEVELS:
        return False
    replacements = {"hltype": unformatted, "hlval": unformatted, "pformat": plain_repr}
    for module in (protocol, twisted_websocket):
        for name, replacement in replacements.items():
            if hasattr(module, name):
                setattr(module, name, replacement)
    return True
