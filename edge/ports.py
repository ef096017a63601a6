"""Sockets: whether a TCP port answers (the one check behind startup waits, tests and
benchmarks), and room for many of them in one process."""

from __future__ import annotations

import logging
import resource
import socket

log = logging.getLogger(__name__)


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True when a TCP connection to ``host:port`` succeeds within ``timeout_s``."""
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def raise_open_files_limit() -> int:
    """Every socket is a file: the common soft limit of 1024 would cap a process at about that
    many connections (a fleet's Nodes), while the hard limit is usually far higher. The soft one
    goes up to it; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:  # e.g. an unlimited hard limit on macOS
            log.warning("open files limit stays at %d (hard %d): %s", soft, hard, error)
    return soft
