"""The Edge's in-memory runtime: the running config, the provider pool and the Node sessions.

One per process, living on the event loop that serves requests. A live refresh swaps the config
copy-on-write: a new immutable config and pool snapshot replace the old ones in one step, and the
pool keeps its counters (DESIGN §6). Stopping drains: the OpenAI entry refuses new requests and
counts the ones in flight, which may finish before the runs still going are failed (`drain`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from edge.config import EdgeConfig
from edge.config.overrides import BoundListeners, pin_listeners
from edge.config.schema import Model, PrincipalToken
from edge.config.sharing import sharing_unchanged
from edge.dispatch import (
    EdgeShuttingDown,
    PoolSnapshot,
    ProviderPool,
    ResponseRoutes,
    snapshot_from_config,
)
from edge.governance.limits import Limiter
from edge.ha.role import Leadership
from edge.memory import (
    FreezeAfterSignIns,
    release_in_slices,
    return_free_memory,
    settle_after_swap,
)
from edge.tokens import sha256_hex
from edge.usage import Usage, UsageRecorder
from nodes.ack_log import NodeAckRecorder, RevisionAcks
from nodes.keepalive import DEFAULT_PING_INTERVAL_S, KeepAliveRound
from nodes.sessions import NodeSessionStore

log = logging.getLogger(__name__)

EDGE_DRAINING = "edge_draining"  # a request that arrives while the Edge stops
EDGE_SHUTTING_DOWN = EdgeShuttingDown.code  # a run still going when the drain times out
# How long runs failed at the drain timeout get to write their error before the Edge stops.
CUT_GRACE_S = 2.0
# Runs admitted from the queue after the timeout are failed as they start: looked for this often.
CUT_POLL_S = 0.05
# A normal closure: the Nodes reconnect by themselves. (Daphne's websocket library lets a server
# send only 1000 or 3000-4999, so not 1001, "going away".)
CLOSE_NORMAL = 1000
CLOSE_WAIT_S = 1.0  # for the Nodes' half of the closing handshakes (milliseconds, usually)


class Drain:
    """The OpenAI requests in flight, and whether new ones are refused (the Edge is stopping)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """True once no request is in flight; False if some still are after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class PreparedConfig:
    """A config with all the request path derives from it, built before its swap: the building
    scales with the fleet and is done off the event loop (``EdgeRuntime.prepare``)."""

    config: EdgeConfig
    snapshot: PoolSnapshot
    principals: Mapping[str, PrincipalToken]
    models: Mapping[str, Model]


class EdgeRuntime:
    """Everything the request path reads, none of it from the database."""

    def __init__(
        self,
        config: EdgeConfig,
        config_path: Path | None,
        write_usage: Callable[[list[Usage]], Awaitable[None]],
        write_acks: Callable[[list[RevisionAcks]], Awaitable[None]],
        *,
        owns_process: bool = False,
        bound: BoundListeners | None = None,
        ping_interval_s: float = DEFAULT_PING_INTERVAL_S,
    ) -> None:
        """``owns_process``: the runtime is its process's reason to be (``run_edge``), so what
        is alive after each swap is frozen out of the collector's sight (``freeze_long_lived``)
        and refreshes are planned in a worker process (``refresh.plan_worker``). ``bound``: the
        listeners the process serves on (``run_edge --listen``), kept over every config.
        ``ping_interval_s``: how often each Node session's keep-alive looks at its Node."""
        self.owns_process = owns_process
        self.bound = bound
        config = pin_listeners(config, bound)
        self.config = config
        self.config_path = config_path
        self.started_at = time.time()
        self.snapshot = snapshot_from_config(config)
        self._in_force = (config, self.snapshot)  # what ``prepare`` builds over
        self.pool = ProviderPool(self.snapshot)
        self.nodes = NodeSessionStore(self.pool.set_node_ready)
        self.keep_alive = KeepAliveRound(ping_interval_s)
        self.usage = UsageRecorder(write_usage, on_quiet=return_free_memory)
        # When the runtime owns its process, Node sessions are frozen once signed in.
        self.sign_ins = FreezeAfterSignIns() if owns_process else None
        self.acks = NodeAckRecorder(write_acks)  # the Nodes' config acks, for their mirror rows
        self.refresh_lock = asyncio.Lock()  # refreshes are serialized
        self.principals: Mapping[str, PrincipalToken] = _principals(config)
        self.models: Mapping[str, Model] = _models(config)
        # Which provider served each Responses API response the Edge relayed (affinity).
        self.response_routes = ResponseRoutes()
        self.drain = Drain()
        # Per-principal limits and budgets (`openai.policies`), counted across config swaps.
        self.limiter = Limiter()
        # Leader or standby (`edge.ha`); a single Edge always leads (edge.ha.role).
        self.leadership = Leadership(config.edge.ha)
        # In HA, the check an apply's database transaction runs first, as things stand now: it
        # refuses the apply unless this Edge still holds the leader lock
        # (edge.ha.cluster.leader_commit_guard). Plain values: the apply may commit in another
        # process. The check blocks: a thread's.
        self.commit_guard: Callable[[], Callable[[], None]] | None = None

    def prepare(self, config: EdgeConfig) -> PreparedConfig:
        """Build what ``swap_config`` swaps in. Safe in another thread: it reads only immutable
        objects (the config and snapshot in force, whose unchanged pieces the new ones share)."""
        running, snapshot = self._in_force  # one read: the pair a swap sets together
        config = sharing_unchanged(pin_listeners(config, self.bound), running)
        return PreparedConfig(
            config,
            snapshot_from_config(config, snapshot, running),
            _principals(config),
            _models(config),
        )

    def swap_config(self, prepared: PreparedConfig) -> None:
        """Make a prepared config the running one, in one step on the event loop. Only
        live-classified changes may reach here. What it replaces is let go of a slice at a
        time afterwards (``release_in_slices``)."""
        replaced = _parts(self.config, self.snapshot)
        self.pool.apply_snapshot(prepared.snapshot)
        self.snapshot = prepared.snapshot
        self.principals = prepared.principals
        self.models = prepared.models
        self.config = prepared.config
        self._in_force = (prepared.config, prepared.snapshot)
        # Once the old config is gone, the new one (alive until the next swap) is frozen out of
        # the collector's sight, and the heap the old one held goes back to the system.
        release_in_slices(replaced, then=settle_after_swap if self.owns_process else None)

    def principal_for(self, bearer_token: str) -> PrincipalToken | None:
        return self.principals.get(sha256_hex(bearer_token))

    async def drain_requests(self, timeout_s: float) -> None:
        """Refuse new OpenAI requests, let those in flight finish for up to ``timeout_s``, then
        end the runs still going with EDGE_SHUTTING_DOWN: the chat flow answers each with that
        error, as its stream's last event if it already started."""
        self.drain.draining = True
        log.info(
            "drain: refusing new requests; %d in flight get up to %g s",
            self.drain.in_flight,
            timeout_s,
        )
        if await self.drain.wait_idle(timeout_s):
            return
        log.warning(
            "drain: %d requests still in flight after %g s: ending them",
            self.drain.in_flight,
            timeout_s,
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + CUT_GRACE_S
        while True:
            self._fail_runs()
            if await self.drain.wait_idle(CUT_POLL_S):
                return
            if loop.time() > give_up:
                log.warning("drain: %d requests did not end in time", self.drain.in_flight)
                return

    def _fail_runs(self) -> None:
        self.pool.fail_waiting()  # a queued request would otherwise start a run after the cut
        for session in self.nodes.sessions():
            for run_id in list(session.runs):
                session.fail_run(run_id, EDGE_SHUTTING_DOWN, "the Edge is shutting down")

    async def close_node_sessions(self) -> None:
        """Close every Node session and wait (bounded) for the Nodes' half of the handshakes."""
        sessions = self.nodes.sessions()
        closed = await asyncio.gather(
            *(session.link.close_session(CLOSE_NORMAL) for session in sessions),
            return_exceptions=True,
        )
        for session, outcome in zip(sessions, closed, strict=True):
            if isinstance(outcome, Exception):
                log.warning("node %s: session not closed: %s", session.node_id, outcome)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + CLOSE_WAIT_S
        while self.nodes.sessions() and loop.time() < give_up:
            await asyncio.sleep(CUT_POLL_S)


def _principals(config: EdgeConfig) -> dict[str, PrincipalToken]:
    return {t.token_hash_sha256: t for t in config.openai.principal_tokens}


def _models(config: EdgeConfig) -> dict[str, Model]:
    return {m.id: m for m in config.models}


def _parts(config: EdgeConfig, snapshot: PoolSnapshot) -> list[object]:
    """The parts a swap lets go of: the config's nodes, models and canonical entries, and the
    snapshot's specs (those the new ones share stay alive anyway)."""
    parts: list[object] = [*config.nodes, *config.models, *snapshot.providers, *snapshot.models]
    for section in config.canonical.values():
        if isinstance(section, list):
            parts.extend(section)
    return parts


_runtime: EdgeRuntime | None = None


def install_runtime(runtime: EdgeRuntime | None) -> None:
    global _runtime
    _runtime = runtime


def runtime_installed() -> bool:
    return _runtime is not None


def get_runtime() -> EdgeRuntime:
    """The process's runtime; ``run_edge`` (or the ASGI app on first use) installs it."""
    if _runtime is None:
        raise RuntimeError("the Edge runtime is not installed")
    return _runtime
