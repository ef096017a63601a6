"""The leader lock: a PostgreSQL session advisory lock on a connection of its own, in a thread.

The lock lives as long as the session that took it, so the server frees it when that connection
ends: a crashed Edge's at once (its socket closes), a partitioned one's once the server's TCP
keepalives give up on it. The connection is psycopg's, outside Django's connection handling (which
closes and reopens connections as it likes), and lives in a thread of its own so that a busy
event loop neither delays the checks nor makes a healthy leader look dead.

The thread only reports: ``held_term`` says which acquisition is held (None: none), ``last_ok``
when the session last answered, and ``on_change`` wakes the elector when either changes for
the worse or better. Deciding to fence is the elector's, on the event loop. Between checks the
thread watches the socket: a session the server ends (a terminated backend, a server shutting
down) turns it readable, and the loss is reported within milliseconds, not at the next check.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 1.0  # a standby asks for the lock this often
CHECK_INTERVAL_S = 1.0  # the leader's session is checked this often
CONNECT_TIMEOUT_S = 2
# An Edge that lost the lock asks again only after this pause: a standby in good health (asking
# every second) takes it first, and a leader with a flaky database link does not take it back.
REACQUIRE_PAUSE_S = 3.0
# The client's side of the connection gives up on a silent server within seconds: keepalive
# probes when idle, and unacknowledged data (a check sent into a partition) after 3 s.
CLIENT_KEEPALIVES: Mapping[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": 3000,
}
# The server's side: it frees the lock of a client gone silent after 3 s idle + 3 probes 1 s
# apart, 6 s after the last check it heard, later than the leader fences itself (FENCE_AFTER_S in
# `edge.ha.elector`, counted from the last check that was answered).
SERVER_SETTINGS = (
    "-c tcp_keepalives_idle=3 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 "
    "-c tcp_user_timeout=6000 -c statement_timeout=2000 -c idle_session_timeout=0 "
    "-c idle_in_transaction_session_timeout=0"
)


class PgLeaderLock:
    """Seeks the lock while the process is a standby and checks it while held, in its thread."""

    def __init__(
        self,
        conninfo: Mapping[str, Any],
        key: int,
        *,
        application_name: str = "iop-edge leader lock",
        retry_interval_s: float = RETRY_INTERVAL_S,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        options = " ".join(filter(None, (SERVER_SETTINGS, conninfo.get("options"))))
        self._params: dict[str, Any] = {
            **conninfo,
            **CLIENT_KEEPALIVES,
            "options": options,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": application_name,
            "autocommit": True,
        }
        self.key = key
        self._retry_s = retry_interval_s
        self._check_s = check_interval_s
        self._connection: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._term = 0
        self.held_term: int | None = None  # the acquisition held now (1, 2, …), None when none
        self.backend_pid: int | None = None  # the server process of the session that holds it
        self.last_ok = 0.0  # time.monotonic() of the last answered check
        self.last_error = ""  # why the lock was lost or not taken: the fence's reason
        self._release = threading.Event()
        self._pause_until = 0.0  # time.monotonic() before which the lock is not asked for
        self._unreachable = ""  # the last reason the database could not be asked, as logged
        # Called from the lock's thread when the lock is taken or lost (set before ``start``).
        self.on_change: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iop-leader-lock", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def release(self) -> None:
        """Drop the lock (the elector fenced): the connection closes as soon as the thread is
        free; until then the server still holds it for this session, which serves nothing."""
        with self._lock:
            self.held_term = None
        self._release.set()

    def stop(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._release.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._release.is_set():
                self._release.clear()
                self._close("released")
            held = self._connection is not None
            try:
                if held:
                    self._check()
                elif time.monotonic() >= self._pause_until:
                    self._try_acquire()
            except psycopg.Error as exc:
                self._lost(exc)
            self._wait(self._check_s if self._connection is not None else self._retry_s)
        self._close("stopping")

    def _wait(self, timeout_s: float) -> None:
        """Until the next check: cut short by a release, or by the held session's socket turning
        readable (nothing is asked of the server between checks: that is the server ending it)."""
        if self._connection is None:
            self._release.wait(timeout_s)
            return
        deadline = time.monotonic() + timeout_s
        while not self._release.is_set() and (left := deadline - time.monotonic()) > 0:
            try:
                readable, _, _ = select.select([self._connection.fileno()], [], [], min(left, 0.1))
            except (OSError, ValueError):
                return  # the socket is gone: the check says so
            if readable:
                time.sleep(0.01)  # the rest of the server's message, so the check reads it whole
                return

    def _try_acquire(self) -> None:
        connection = psycopg.connect(**self._params)
        try:
            row = connection.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except BaseException:
            connection.close()
            raise
        if not (row and row[0]):
            connection.close()  # another Edge leads; ask again in a while
            return
        with self._lock:
            if self._release.is_set():  # released while connecting: do not take it now
                connection.close()
                return
            self._connection = connection
            self.backend_pid = connection.info.backend_pid
            self._term += 1
            self.held_term = self._term
            self.last_ok = time.monotonic()
            self.last_error = ""
        self._unreachable = ""
        log.info("leader lock %d taken (term %d)", self.key, self._term)
        self.on_change()

    def _check(self) -> None:
        assert self._connection is not None
        self._connection.execute("SELECT 1").fetchone()
        with self._lock:
            if self.held_term is not None:
                self.last_ok = time.monotonic()

    def _lost(self, exc: psycopg.Error) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        with self._lock:
            was_held = self.held_term is not None
            self.held_term = None
            self.last_error = reason
        if was_held:
            log.error("leader lock %d lost: %s", self.key, reason)
            self.on_change()
        elif reason != self._unreachable:
            # Once per cause, not once a second while the database stays away.
            log.warning("leader lock %d: cannot ask the database: %s", self.key, reason)
        self._unreachable = reason
        self._close("failed")

    def _close(self, why: str) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        self._pause_until = time.monotonic() + REACQUIRE_PAUSE_S
        try:
            connection.close()
        except psycopg.Error as exc:
            log.debug("leader lock connection (%s) closed with %s", why, exc)
