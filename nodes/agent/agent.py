"""The Node agent's lifetime: connect, run a session, reconnect with backoff, drain on stop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from nodes import wire
from nodes.agent.adapters import build_adapter
from nodes.agent.edges import EdgeRotation, standby_retry_delay
from nodes.agent.env_access import EnvAccess
from nodes.agent.registry import AdapterFactory
from nodes.agent.session import EdgeSession, SessionOutcome
from nodes.wire.pacing import keepalive_ping_interval

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    edge_url: str  # the first Edge to try
    node_id: str
    token: str = field(repr=False)
    drain_timeout_s: float = 30.0
    open_timeout_s: float = 10.0
    # Names the Edge's config may make this Node read, past the default rule (env_access.py).
    allowed_env: frozenset[str] = frozenset()
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)
    # More Edges of the same cluster (`--edge` repeated), tried in turn after ``edge_url``.
    other_edge_urls: tuple[str, ...] = ()

    @property
    def edge_urls(self) -> tuple[str, ...]:
        return (self.edge_url, *self.other_edge_urls)


class Backoff:
    """Exponential delays with jitter, so a fleet of Nodes does not reconnect in lockstep."""

    def __init__(
        self,
        initial_s: float = 0.5,
        cap_s: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._initial_s = initial_s
        self._cap_s = cap_s
        self._factor = factor
        self._jitter = jitter
        self._rand = rand
        self._attempt = 0

    def next_delay(self) -> float:
        base = min(self._cap_s, self._initial_s * self._factor**self._attempt)
        if base < self._cap_s:
            self._attempt += 1  # past the cap the exponent stops growing (no float overflow)
        spread = 1 + self._jitter * (2 * self._rand() - 1)
        return min(self._cap_s, base * spread)

    def reset(self) -> None:
        self._attempt = 0


class NodeAgent:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        backoff: Backoff | None = None,
        adapter_factory: AdapterFactory | None = None,
    ) -> None:
        self._settings = settings
        self._backoff = backoff or Backoff()
        self._edges = EdgeRotation(settings.edge_urls)
        self._env_access = EnvAccess(settings.allowed_env, settings.environ, settings.token)
        # Adapters see only the variables the Node reads; a config naming another is rejected.
        self._adapter_factory = adapter_factory or functools.partial(
            build_adapter, environ=self._env_access.view()
        )
        self._stop = asyncio.Event()
        self._session: EdgeSession | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._attempt: asyncio.Task[SessionOutcome] | None = None

    async def run(self) -> None:
        """Keep a session with the Edge until ``request_stop``; return once drained."""
        while not self._stop.is_set():
            self._attempt = asyncio.create_task(self._connect_once(self._edges.current))
            try:
                outcome = await self._attempt
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # run() itself is being cancelled
                break  # request_stop cut a handshake short
            if self._stop.is_set():
                break
            # A superseded session means another agent holds this id: keep backing off so two
            # agents do not evict each other in a tight loop.
            served = outcome.ready and outcome.close_code != wire.CLOSE_SUPERSEDED
            if served:
                self._backoff.reset()
            code = outcome.close_code
            standby = code == wire.CLOSE_STANDBY
            refused = not served and code is not None and not standby
            if not self._edges.move_on(served, standby=standby, refused=refused):
                continue  # the next Edge at once: it may be the one that leads now
            if self._edges.pass_saw_standby:
                delay = standby_retry_delay()  # the cluster is up; a leader comes in seconds
            else:
                delay = self._backoff.next_delay()
            logger.info("retrying in %.1f s", delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
        logger.info("stopped")

    def request_stop(self) -> None:
        """First call: drain and stop. A second call cuts the drain's grace period short."""
        if self._stop.is_set():
            if self._session is not None:
                logger.warning("stop requested again: cutting running runs short")
                self._session.hurry()
            return
        logger.info("stop requested")
        self._stop.set()
        if self._session is not None:
            self._drain_task = asyncio.create_task(
                self._session.drain(self._settings.drain_timeout_s)
            )
        elif self._attempt is not None:
            # No session yet: nothing to drain, so do not wait out a slow handshake.
            self._attempt.cancel()

    async def _connect_once(self, url: str) -> SessionOutcome:
        settings = self._settings
        headers = {"Authorization": f"Bearer {settings.token}", "X-IOP-Node": settings.node_id}
        logger.info("connecting to %s as node %s", url, settings.node_id)
        try:
            async with connect(
                url,
                additional_headers=headers,
                open_timeout=settings.open_timeout_s,
                # Above the frame limit: an oversized frame costs its run, not the connection.
                max_size=wire.MAX_SOCKET_MESSAGE_BYTES,
                # Frames are small JSON on a latency path; deflate costs more than it saves.
                compression=None,
                ping_interval=keepalive_ping_interval(),
            ) as websocket:
                logger.info("connected to %s", url)
                session = EdgeSession(
                    websocket,
                    settings.node_id,
                    adapter_factory=self._adapter_factory,
                    env_access=self._env_access,
                )
                self._session = session
                try:
                    outcome = await session.run()
                finally:
                    self._session = None
                    if self._drain_task is not None:
                        await self._drain_task
        except InvalidStatus as exc:
            logger.warning("refused by edge: HTTP %d at handshake", exc.response.status_code)
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            logger.warning("cannot reach edge at %s: %s", url, exc or type(exc).__name__)
        except Exception:
            # A daemon outlives a bug in one session: log it loudly and reconnect.
            logger.exception("session with edge failed")
        else:
            _log_close(outcome, settings.node_id, url)
            return outcome
        return SessionOutcome(ready=False, close_code=None, close_reason="")


def _log_close(outcome: SessionOutcome, node_id: str, url: str) -> None:
    code = outcome.close_code
    meaning = wire.CLOSE_REASONS.get(code) if code is not None else None
    # Our name for the code first, then the Edge's own words when they add something.
    said = ": ".join(dict.fromkeys(part for part in (meaning, outcome.close_reason) if part))
    described = f"close {code} ({said or 'no reason'})"
    if code == wire.CLOSE_UNAUTHORIZED:
        logger.warning(
            "refused by edge: %s; check the token and that node %s is in the edge config",
            described,
            node_id,
        )
    elif code == wire.CLOSE_SUPERSEDED:
        logger.warning(
            "superseded by edge: %s; is another agent running as node %s?", described, node_id
        )
    elif code == wire.CLOSE_STANDBY:
        logger.info("%s is a standby Edge (%s): trying the next Edge", url, described)
    elif code == wire.CLOSE_PROTOCOL_ERROR:
        logger.error("edge ended the session for a protocol error: %s", described)
    elif code is None:
        logger.warning("connection to edge lost")
    else:
        logger.info("disconnected by edge: %s", described)
