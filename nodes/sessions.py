"""Who is connected: the Edge's Node sessions and the runs each one carries (plain Python).

The websocket consumer owns the socket and hands this module a ``NodeLink``; everything here runs
on the Edge's event loop, so no locks are needed. The store tells the provider pool when a Node
becomes ready or goes away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from nodes import wire
from nodes.log_limit import LogLimit
from nodes.wire.mailbox import Mailbox

log = logging.getLogger(__name__)

NODE_DISCONNECTED = "node_disconnected"
# A frame of one run the Edge cannot use (malformed, oversized): that run fails, the session stays.
BAD_FRAME = "bad_frame"
# A run.request too large to travel even in parts (over wire.MAX_MESSAGE_BYTES): never sent.
REQUEST_TOO_LARGE = "request_too_large"
# The most one run may send the Edge, counted in characters of its frames' JSON text (bytes, for
# ASCII); the Edge's IOP_MAX_RUN_OUTPUT_BYTES sets it.
DEFAULT_MAX_RUN_OUTPUT_BYTES = 64 * 1024 * 1024
# Runs recently cut short on a session: the Node may still send events it had in flight for them.
RECENT_RUNS_KEPT = 1024
# What one session may write to the log about its Node's misbehaviour (refused frames, unknown
# runs, failed runs) per interval; past that the lines are counted and summed up.
WARNING_LINES = 20
WARNING_INTERVAL_S = 60.0


class NodeLink(Protocol):
    """The socket side of a session, provided by the websocket consumer."""

    async def send_frame(self, frame: wire.Frame) -> None: ...

    async def close_session(self, code: int) -> None: ...


class RunStream:
    """The events of one run on its way from the Node to the caller, in order."""

    __slots__ = ("_events", "received", "run_id", "session")

    def __init__(self, run_id: str, session: NodeSession) -> None:
        self.run_id = run_id
        self.session = session
        self.received = 0  # the size of its frames so far, against the session's output limit
        self._events: Mailbox[tuple[str, dict[str, Any]]] = Mailbox()  # the run's task reads

    def push(self, event: str, data: dict[str, Any]) -> None:
        self._events.put((event, data))

    async def next_event(self) -> tuple[str, dict[str, Any]]:
        return await self._events.get()

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        """The events that have already arrived, without waiting."""
        return self._events.drain()

    def fail(self, code: str, message: str) -> None:
        """End the run with an error: what it had queued is dropped, the error comes next."""
        self.drain()
        self.push("error", {"code": code, "message": message, "status": None})


class PendingAck:
    """A Node's answer to one `config.refresh`, expected before the frame goes out."""

    __slots__ = ("_forget", "_future")

    def __init__(
        self, future: asyncio.Future[dict[str, Any]], forget: Callable[[], object]
    ) -> None:
        self._future = future
        self._forget = forget

    async def wait(self, timeout_s: float) -> dict[str, Any]:
        """The `config.ack` frame. Raises TimeoutError when none comes in time (a late ack is
        then ignored) and ConnectionError when the session goes away first."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._future
        except TimeoutError:
            self._forget()
            raise


class NodeSession:
    """One websocket connection of one Node."""

    def __init__(
        self,
        node_id: str,
        link: NodeLink,
        *,
        max_run_output_bytes: int = DEFAULT_MAX_RUN_OUTPUT_BYTES,
    ) -> None:
        self.node_id = node_id
        self.link = link
        self.max_run_output_bytes = max_run_output_bytes
        self.ready = False
        self.acked_revision: str | None = None
        # What the dashboard shows: the agent's version from its hello, and when the session
        # began (wall clock, so a browser can show it).
        self.agent_version: str | None = None
        self.connected_at = time.time()
        self.closed = False
        self.runs: dict[str, RunStream] = {}
        self._ended: dict[str, None] = {}  # insertion-ordered set, oldest first
        self._pending_acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._held_config: Callable[[], wire.Frame] | None = None
        self._parts = wire.Reassembler()  # large run.events on their way in
        self._background: set[asyncio.Task[None]] = set()
        self.warnings = LogLimit(
            f"node {node_id}", lines=WARNING_LINES, interval_s=WARNING_INTERVAL_S
        )

    def open_run(self, run_id: str) -> RunStream:
        stream = RunStream(run_id, self)
        self.runs[run_id] = stream
        return stream

    def forget_run(self, run_id: str, *, unfinished: bool) -> None:
        """The run is over here. An unfinished one (cancelled, timed out) may still have events
        in flight from the Node: those are remembered, so they are dropped quietly."""
        if self.runs.pop(run_id, None) is None:
            return
        if self._parts:
            self._parts.discard(run_id)
        if unfinished:
            self._ended[run_id] = None
            if len(self._ended) > RECENT_RUNS_KEPT:
                del self._ended[next(iter(self._ended))]

    def owns(self, run_id: str) -> bool:
        """The session carries this run, or did until recently (its late frames are expected)."""
        return run_id in self.runs or run_id in self._ended

    def deliver(self, run_id: str, event: str, data: dict[str, Any], size: int = 0) -> bool:
        """Hand an event (its frame ``size`` long) to its run; False when this session never
        owned that run.

        Events of a run that ended here recently (cancelled, timed out) are dropped quietly. A run
        whose output passes ``max_run_output_bytes`` fails with ``output_too_large``.
        """
        stream = self.runs.get(run_id)
        if stream is None:
            return run_id in self._ended
        if self._parts:
            self._parts.discard(run_id)  # a whole frame: the Node gave up the one it was splitting
        if self._within_limit(stream, size):
            stream.push(event, data)
        return True

    def take_part(self, part: wire.Part) -> bool:
        """Add one part of a run's large event; the event goes to its run once whole. False when
        this session never owned that run (as ``deliver``).

        Raises ``wire.FrameError`` when the parts make a bad frame: that run has failed then.
        """
        run_id = part["run_id"]
        stream = self.runs.get(run_id)
        if stream is None:
            return run_id in self._ended
        if not self._within_limit(stream, len(part["data"])):
            return True
        try:
            frame = self._parts.take(part, wire.SPLIT_NODE_TO_EDGE)
        except wire.FrameError as exc:
            self.fail_run(run_id, BAD_FRAME, f"the node sent a bad frame for this run: {exc}")
            raise
        if frame is not None and frame["type"] == "run.event":
            stream.push(frame["event"], dict(frame["data"]))
        return True

    def _within_limit(self, stream: RunStream, size: int) -> bool:
        stream.received += size
        if stream.received <= self.max_run_output_bytes:
            return True
        self.fail_run(
            stream.run_id,
            wire.ERROR_OUTPUT_TOO_LARGE,
            f"the run's output exceeded the Edge's limit of {self.max_run_output_bytes} bytes",
        )
        return False

    def fail_run(self, run_id: str, code: str, message: str, *, cancel: bool = True) -> None:
        """End a run here with an error, keeping the session: its queued events are dropped,
        its late frames will be dropped quietly, and (``cancel``) the Node is told to stop it."""
        stream = self.runs.get(run_id)
        if stream is None:
            return
        self.warnings.warning(
            log, "node %s: run %s failed: %s: %s", self.node_id, run_id, code, message
        )
        stream.fail(code, message)
        self.forget_run(run_id, unfinished=True)
        if cancel and not self.closed:
            task = asyncio.get_running_loop().create_task(self._cancel_quietly(run_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _cancel_quietly(self, run_id: str) -> None:
        try:
            await self.send(wire.run_cancel(run_id))
        except Exception as exc:  # the session went away: its runs are over anyway
            log.debug("run %s: cancel not sent: %s", run_id, exc)

    def expect_ack(self, refresh_id: str) -> PendingAck:
        """Wait for the ack of ``refresh_id``; call it before sending, so no ack is missed."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending_acks[refresh_id] = future
        return PendingAck(future, lambda: self._pending_acks.pop(refresh_id, None))

    def resolve_ack(self, frame: Mapping[str, Any]) -> bool:
        """Hand a `config.ack` to its waiter; False when nobody waits for it (late or unknown)."""
        future = self._pending_acks.pop(frame.get("refresh_id") or "", None)
        if future is None or future.done():
            return False
        future.set_result(dict(frame))
        return True

    def hold_config(self, frame: Callable[[], wire.Frame]) -> None:
        """Make a config push (built when sent) the next frame this session sends, ahead of
        anything sent after this call: a fleet's pushes can then be written a batch at a time
        while the runs the new config routes still reach each Node after its new config."""
        self._held_config = frame

    async def send_held_config(self) -> None:
        """Send the held config push, unless a frame sent since took it along."""
        held, self._held_config = self._held_config, None
        if held is not None:
            await self.link.send_frame(held())

    async def send(self, frame: wire.Frame) -> None:
        """Send a frame (the link splits a large one into parts), after a held config push. A
        ``run.request`` too large to travel even in parts fails its run here, before anything
        reaches the Node."""
        if self._held_config is not None:
            await self.send_held_config()
        try:
            await self.link.send_frame(frame)
        except wire.FrameError as exc:
            if frame["type"] != "run.request":
                raise
            self.fail_run(frame["run_id"], REQUEST_TOO_LARGE, str(exc), cancel=False)

    def fail_everything(self, message: str) -> None:
        """The session is gone: every run it carried ends with ``node_disconnected``."""
        self.closed = True
        self.ready = False
        self.warnings.flush(log)
        for stream in self.runs.values():
            stream.push("error", {"code": NODE_DISCONNECTED, "message": message})
        self.runs.clear()
        self._parts = wire.Reassembler()
        for future in self._pending_acks.values():
            if not future.done():
                future.set_exception(ConnectionError(message))
        self._pending_acks.clear()


class NodeSessionStore:
    """The current session of each Node; tells the pool which Nodes are ready."""

    def __init__(self, on_ready_change: Callable[[str, bool], None]) -> None:
        self._sessions: dict[str, NodeSession] = {}
        self._on_ready_change = on_ready_change

    def attach(
        self,
        node_id: str,
        link: NodeLink,
        *,
        max_run_output_bytes: int = DEFAULT_MAX_RUN_OUTPUT_BYTES,
    ) -> tuple[NodeSession, NodeSession | None]:
        """Register a new session; return it and the session it supersedes, if any."""
        old = self._sessions.get(node_id)
        session = NodeSession(node_id, link, max_run_output_bytes=max_run_output_bytes)
        self._sessions[node_id] = session
        if old is not None:
            log.info("node %s: new session supersedes the previous one", node_id)
            self._end(old, "the node opened a newer session")
        return session, old

    def mark_ready(self, session: NodeSession, revision: str) -> None:
        if session.closed or self._sessions.get(session.node_id) is not session:
            return
        session.acked_revision = revision
        if not session.ready:
            session.ready = True
            log.info("node %s: ready at %s", session.node_id, revision)
            self._on_ready_change(session.node_id, True)

    def detach(self, session: NodeSession) -> None:
        """The session's socket closed. Its runs fail; its providers leave the pool."""
        if self._sessions.get(session.node_id) is session:
            del self._sessions[session.node_id]
        if not session.closed:
            log.info("node %s: disconnected", session.node_id)
            self._end(session, "the node disconnected")

    def _end(self, session: NodeSession, reason: str) -> None:
        was_ready = session.ready
        session.fail_everything(reason)
        current = self._sessions.get(session.node_id)
        if was_ready and (current is None or not current.ready):
            self._on_ready_change(session.node_id, False)

    def get(self, node_id: str) -> NodeSession | None:
        return self._sessions.get(node_id)

    def ready(self, node_id: str) -> NodeSession | None:
        session = self._sessions.get(node_id)
        return session if session is not None and session.ready else None

    def sessions(self) -> list[NodeSession]:
        return list(self._sessions.values())
