"""One websocket session with the Edge: hello, config, then runs until the connection ends.

Every run is its own task holding the registry it started on. The session never outlives its
connection: when the connection ends, running work is cancelled (the Edge has already failed those
runs) and every registry is closed. Reconnecting is ``NodeAgent``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from nodes import wire
from nodes.agent.adapters import Adapter, AdapterError, Delta, Response, build_adapter
from nodes.agent.env_access import EnvAccess
from nodes.agent.health import HealthMap, HealthMonitor
from nodes.agent.outbox import Outbox
from nodes.agent.registry import AdapterFactory, Registry, RegistrySlot, RouteError
from nodes.wire import json_text
from nodes.wire.pacing import beats

logger = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"
CLOSE_GOING_AWAY = 1001
# Under the Edge's default silence limit (three 2 s ping intervals) with room to spare.
HEARTBEAT_INTERVAL_S = 2.0
# The Edge's frames that carry a run, so a bad one is answered for that run.
RUN_FRAMES = frozenset({"run.request", "part"})


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    ready: bool  # the Node acked a config during this session
    close_code: int | None  # None when the connection never completed a closing handshake
    close_reason: str


class EdgeSession:
    """The Node's side of one connection to the Edge."""

    def __init__(
        self,
        websocket: ClientConnection,
        node_id: str,
        *,
        adapter_factory: AdapterFactory = build_adapter,
        env_access: EnvAccess | None = None,
    ) -> None:
        self._ws = websocket
        self._node_id = node_id
        self._adapter_factory = adapter_factory
        self._env_access = env_access or EnvAccess()
        self._registries = RegistrySlot()
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._health_task: asyncio.Task[None] | None = None
        self._parts = wire.Reassembler()  # large run.requests on their way in
        self._outbox = Outbox(websocket.send)
        self._draining = False
        self._hurry = asyncio.Event()
        self.ready = asyncio.Event()

    async def run(self) -> SessionOutcome:
        heartbeat: asyncio.Task[None] | None = None
        try:
            await self._send(wire.hello(self._node_id, AGENT_VERSION))
            heartbeat = asyncio.create_task(self._beat(), name="heartbeat")
            async for text in self._ws:
                await self._handle(text)
        except ConnectionClosed:
            pass
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
            await self._shutdown()
        await self._ws.wait_closed()
        close = self._ws.protocol.close_rcvd
        return SessionOutcome(
            ready=self.ready.is_set(),
            close_code=close.code if close else None,
            close_reason=close.reason if close else "",
        )

    async def drain(self, grace_s: float) -> None:
        """Take no new runs, give running ones ``grace_s`` to finish, then close the connection."""
        self._draining = True
        self._stop_health()
        registry = self._registries.current
        try:
            if registry is not None:
                # Tell dispatch to look elsewhere while the last runs finish.
                await self._send(
                    wire.provider_health(
                        {pid: (False, "node draining") for pid in registry.providers}
                    )
                )
            await self._wait_for_runs(grace_s)
            await self._cut_runs()
            await self._outbox.flush()  # the runs' last frames reach the Edge before the close
        except ConnectionClosed:
            return
        await self._ws.close(CLOSE_GOING_AWAY, "node draining")

    def hurry(self) -> None:
        """End the drain grace period now."""
        self._hurry.set()

    # -- frames from the Edge --------------------------------------------------------------

    async def _handle(self, text: str | bytes) -> None:
        try:
            frame = wire.decode(text, accept=wire.EDGE_TO_NODE)
        except wire.FrameError as exc:
            await self._refuse_malformed_run(wire.run_id_of(text, RUN_FRAMES), exc)
            return
        if frame["type"] == "part":
            whole = await self._reassemble(frame)
            if whole is None:
                return
            frame = whole
        if frame["type"] == "run.request":
            await self._start_run(frame)
        elif frame["type"] == "run.cancel":
            self._parts.discard(frame["run_id"])  # a cancel may cut a large request short
            task = self._runs.get(frame["run_id"])
            if task is not None:  # else it already ended: the cancel crossed its last event
                task.cancel()
        elif frame["type"] == "config":
            if wire.FEATURE_BATCH in frame.get("features", ()):
                self._outbox.start_batching()
            await self._apply_config(frame["revision"], frame["node"], None)
        elif frame["type"] == "config.refresh":
            await self._apply_config(frame["revision"], frame["node"], frame["refresh_id"])
        elif frame["type"] == "error":
            logger.warning("edge refused a frame: %s: %s", frame["code"], frame["message"])
        elif frame["type"] == "ping" and frame.get("ts") is not None:
            await self._send(wire.pong(frame["ts"]))
        # A ping without a ts is a heartbeat, and "pong" needs no answer either; dead peers
        # are found by the websocket's own keepalive.

    async def _reassemble(self, part: wire.Part) -> wire.Frame | None:
        """Add one part of a large run.request; the request once whole."""
        try:
            return self._parts.take(part, wire.SPLIT_EDGE_TO_NODE)
        except wire.FrameError as exc:
            await self._refuse_malformed_run(part["run_id"], exc)
            return None

    async def _refuse_malformed_run(self, run_id: str | None, exc: wire.FrameError) -> None:
        """A broken run frame is ignored; one that still names its run gets an error for that
        run, not silence, and the session goes on."""
        logger.warning("ignoring a bad frame from the edge: %s", exc.message)
        if run_id is not None:
            self._parts.discard(run_id)
            await self._send(wire.run_error(run_id, wire.ERROR_BAD_REQUEST, exc.message))

    async def _apply_config(
        self, revision: str, node: wire.NodePayload, refresh_id: str | None
    ) -> None:
        try:
            # The frame checks only that ``node`` is an object; the parser checks the rest.
            spec = wire.parse_node_config(node, node_id=self._node_id)
            if problems := self._env_access.problems(spec):
                raise wire.NodeConfigError(problems)
            registry = Registry.build(
                spec,
                revision,
                adapter_factory=self._adapter_factory,
                previous=self._registries.current,
            )
        except Exception as exc:
            # Whatever went wrong, the Edge gets the reason and the current registry stays.
            reason = (
                str(exc)
                if isinstance(exc, wire.NodeConfigError)
                else f"cannot build adapters: {exc}"
            )
            logger.error("config %s rejected: %s", revision, reason)
            await self._send(wire.config_ack(revision, refresh_id=refresh_id, error=reason))
            return
        # New runs take the new registry from here on; the old one closes once drained. The old
        # registry's health reports stop before the ack, so none arrives after it.
        self._stop_health()
        self._registries.swap(registry)
        await self._send(wire.config_ack(revision, refresh_id=refresh_id))
        if not self._draining:
            self._start_health(registry)
        providers = ", ".join(sorted(registry.providers)) or "none"
        if not self.ready.is_set():
            logger.info("ready: config %s, providers: %s", revision, providers)
            self.ready.set()
        else:
            logger.info(
                "applied config %s (refresh %s), providers: %s", revision, refresh_id, providers
            )

    # -- runs ------------------------------------------------------------------------------

    async def _start_run(self, frame: wire.RunRequest) -> None:
        run_id = frame["run_id"]
        if self._draining:
            await self._send(wire.run_error(run_id, wire.ERROR_NODE_DRAINING, "node is draining"))
            return
        registry = self._registries.current
        try:
            adapter = admit_run(frame, registry, self._runs)
        except AdapterError as refused:
            await self._send(refused.event(run_id))
            return
        assert registry is not None  # admitted: there is a config
        registry.begin_run()
        task = asyncio.create_task(serve_run(frame, adapter, self._send), name=f"run {run_id}")
        self._runs[run_id] = task
        # A callback, not a `finally`: a task cancelled before its first step never runs its body.
        task.add_done_callback(lambda _: self._run_ended(run_id, registry))

    def _run_ended(self, run_id: str, registry: Registry) -> None:
        self._runs.pop(run_id, None)
        registry.end_run()

    async def _wait_for_runs(self, grace_s: float) -> None:
        if not self._runs:
            return
        logger.info("draining: waiting up to %.0f s for %d run(s)", grace_s, len(self._runs))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        hurry = asyncio.create_task(self._hurry.wait())
        try:
            while self._runs and not self._hurry.is_set() and loop.time() < deadline:
                await asyncio.wait(
                    {hurry, *self._runs.values()},
                    timeout=deadline - loop.time(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        finally:
            hurry.cancel()

    async def _cut_runs(self) -> None:
        """Cancel the runs still going after the grace period and tell the Edge why."""
        if not self._runs:
            return
        cut = dict(self._runs)
        logger.warning("drain grace over: cutting %d run(s) short", len(cut))
        for task in cut.values():
            task.cancel()
        await asyncio.gather(*cut.values(), return_exceptions=True)
        for run_id, task in cut.items():
            if task.cancelled():  # a run that got its last event out needs no error after it
                await self._send(
                    wire.run_error(
                        run_id, wire.ERROR_NODE_DRAINING, "run cut short: node shut down"
                    )
                )

    # -- health and teardown ---------------------------------------------------------------

    def _start_health(self, registry: Registry) -> None:
        self._stop_health()
        monitor = HealthMonitor(registry, self._report_health)
        self._health_task = asyncio.create_task(monitor.run(), name="health")

    def _stop_health(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            self._health_task = None

    async def _report_health(self, health: HealthMap) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._send(wire.provider_health(health))

    async def _beat(self) -> None:
        await heartbeat(self._send)

    async def _shutdown(self) -> None:
        if self._runs:
            # Their answers had nowhere to go: the Edge failed them when the session ended.
            logger.warning("session ended: cancelling %d running run(s)", len(self._runs))
        tasks = list(self._runs.values())
        if self._health_task is not None:
            tasks.append(self._health_task)
            self._health_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._outbox.aclose()
        await self._registries.aclose()

    async def _send(self, frame: wire.Frame) -> None:
        """Send a frame, in parts when it is too large for one. A run's event too large even
        for that fails the run being served (``output_too_large``); nothing is sent then."""
        try:
            texts = wire.split(frame)
        except wire.FrameError as exc:
            if frame["type"] != "run.event":
                raise
            raise AdapterError(wire.ERROR_OUTPUT_TOO_LARGE, exc.message) from None
        await self._outbox.send(texts)


def admit_run(
    frame: wire.RunRequest, registry: Registry | None, running: Container[str]
) -> Adapter:
    """The adapter to serve a ``run.request`` with. Raises AdapterError (its ``event`` is the
    answer) when there is no applied config yet, the run id is already running, or the registry
    has no such route."""
    run_id = frame["run_id"]
    if registry is None:
        raise AdapterError(wire.ERROR_NODE_NOT_READY, "node has no applied config")
    if run_id in running:
        raise AdapterError(wire.ERROR_BAD_REQUEST, f"run {run_id!r} is already running")
    try:
        return registry.resolve(frame["provider_id"], frame["adapter_id"], frame["target"])
    except RouteError as exc:
        raise AdapterError(wire.ERROR_BAD_REQUEST, str(exc)) from None


async def serve_run(
    frame: wire.RunRequest, adapter: Adapter, send: Callable[[wire.Frame], Awaitable[None]]
) -> None:
    """Run one ``run.request`` on its adapter: its events go out through ``send``, ending with
    ``done`` or an ``error`` event (``deadline_exceeded`` once the run's deadline passes)."""
    run_id = frame["run_id"]
    # The deadline is wall-clock (it crossed machines); the timeout runs on the loop clock.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (frame["deadline"] - time.time())
    try:
        async with (
            asyncio.timeout_at(deadline),
            contextlib.aclosing(
                adapter.stream(frame["request"], frame["target"], wire.endpoint_of(frame))
            ) as events,
        ):
            delta_event = _delta_event(frame)
            async for event in events:
                if isinstance(event, Delta):
                    await send(delta_event(run_id, event.chunk))
                elif isinstance(event, Response):
                    await send(wire.run_response(run_id, event.completion))
                else:
                    done = wire.run_done(
                        run_id, event.usage, event.finish_reason, finish_sent=event.finish_sent
                    )
                    await send(done)
        return
    except AdapterError as exc:
        error = exc.event(run_id)
    except TimeoutError:
        error = wire.run_error(run_id, wire.ERROR_DEADLINE_EXCEEDED, "run deadline passed")
    except ConnectionClosed:
        return  # the Edge already failed this run when the session dropped
    except Exception as exc:
        logger.exception("run %s failed in adapter %s", run_id, adapter.id)
        error = wire.run_error(run_id, wire.ERROR_INTERNAL, f"node error: {exc}")
    with contextlib.suppress(ConnectionClosed):
        await send(error)


def _delta_event(frame: wire.RunRequest) -> Callable[[str, dict[str, Any]], wire.RunEvent]:
    """How a run's chunks travel: as its caller gets them when the Edge asked (``relay_as``:
    the Edge then relays their text as it is), else as the upstream sent them."""
    relay_as = frame.get("relay_as")
    if relay_as is None or wire.endpoint_of(frame) not in wire.CHUNK_ENDPOINTS:
        return wire.run_delta
    answer_id, model = relay_as["id"], relay_as["model"]

    def chunk_event(run_id: str, chunk: dict[str, Any]) -> wire.RunEvent:
        chunk["id"], chunk["model"] = answer_id, model
        chunk.pop("usage", None)  # the caller gets one usage chunk, the Edge's
        # Valid UTF-8 as text: a lone surrogate the upstream sent stays escaped.
        return wire.run_chunk(run_id, json_text.dumps_bytes(chunk).decode())

    return chunk_event


async def heartbeat(send: Callable[[wire.Frame], Awaitable[None]]) -> None:
    """Ping the Edge on an interval of our own until the socket closes: the Edge drops a Node it
    has not heard from, and its own pings may wait behind a large request on a slow link.

    The pings carry no ``ts``: they are heartbeats, which the Edge does not answer (at 3,000
    Nodes the answers were a quarter of its keep-alive CPU). They come on a grid of their own
    (``nodes.wire.pacing``): Nodes that reconnect together after an Edge restart, or whose
    pings a busy moment delayed together, would otherwise ping it in one burst per interval.
    """
    with contextlib.suppress(ConnectionClosed):
        async for _ in beats(HEARTBEAT_INTERVAL_S):
            await send(wire.ping())
