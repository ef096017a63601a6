"""Whether a TCP port answers: the one check behind startup waits, tests and benchmarks."""

from __future__ import annotations

import socket


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True when a TCP connection to ``host:port`` succeeds within ``timeout_s``."""
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            return True
    except OSError:
        return False
