"""What every HTTP server of the Edge holds its connections to, whichever serves a listener
(daphne, or uvicorn for `openai.listen`).

The cap on connections per peer address (``IOP_MAX_CONNECTIONS_PER_PEER``) is counted once for
all listeners of the process: one host with ``limit`` connections open gets no more, so it
cannot use up the process's file descriptors and keep Nodes from reconnecting. Loopback peers are
not capped unless ``IOP_CAP_LOOPBACK_PEERS`` says so: a local reverse proxy or load test speaks
for many callers.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections import Counter

log = logging.getLogger("edge.connections")

# After a body is refused (413) the client may still be sending it: it is read and dropped for
# this long, so the client reads the answer instead of a connection reset, then the connection
# is cut.
LINGER_S = 30.0


class PeerConnections:
    """Connections open per peer host, and whether one more may open."""

    def __init__(self, limit: int, cap_loopback: bool) -> None:
        self.limit = limit  # 0: no cap
        self.cap_loopback = cap_loopback
        self.open: Counter[str] = Counter()
        self._capped: set[str] = set()  # warned about, until they go below the cap again

    def refuses(self, host: str) -> bool:
        """Whether a new connection from ``host`` is over the cap (warned once per episode)."""
        if not self.limit or self.open[host] < self.limit:
            return False
        if not self.cap_loopback and _is_loopback(host):
            return False
        if host not in self._capped:
            self._capped.add(host)
            log.warning(
                "%s has %d connections open: refusing more (IOP_MAX_CONNECTIONS_PER_PEER)",
                host,
                self.open[host],
            )
        return True

    def opened(self, host: str) -> None:
        self.open[host] += 1

    def closed(self, host: str) -> None:
        self.open[host] -= 1
        if self.open[host] < self.limit:
            self._capped.discard(host)
        if self.open[host] <= 0:
            del self.open[host]


@functools.cache
def peer_connections() -> PeerConnections:
    """The process's one count, from the settings."""
    from django.conf import settings

    return PeerConnections(settings.IOP_MAX_CONNECTIONS_PER_PEER, settings.IOP_CAP_LOOPBACK_PEERS)


def _is_loopback(host: str) -> bool:
    # A reverse proxy or a benchmark on this machine is every caller at once: not one peer.
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def raw_response(status: int, reason: bytes, body: bytes) -> bytes:
    """A whole JSON answer as the server writes it, for a connection it closes after."""
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % (status, reason, len(body))
    )
    return head + body
