"""The Node websocket endpoint `/ws/node/`: authentication, handshake, frames in and out.

The consumer is the thin Channels shell around `nodes.sessions`: it authenticates in `connect()`,
runs the hello -> config -> ack handshake, and turns frames into session and pool calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from edge.config.canonical import node_canonical
from edge.runtime import EdgeRuntime, get_runtime
from edge.tokens import bearer_token, sha256_hex
from nodes import wire
from nodes.log_limit import LogLimit
from nodes.sessions import BAD_FRAME, NodeSession

log = logging.getLogger(__name__)

MAX_BAD_FRAMES = 5
# A frame too large to read, or a protocol this Edge does not speak, ends the session at once
# (unless the frame names one of the session's runs: then only that run fails).
FATAL_FRAME_ERRORS = frozenset({"too_large", "unsupported_protocol"})
# The Node's frames that carry a run, so a bad one costs that run only.
RUN_FRAMES = frozenset({"run.event", "part"})
# A Node heard from by no frame for this many ping intervals is dropped.
SILENT_INTERVALS = 3
# Close code for a session ended by a bug on the Edge's side (the websocket's "internal error").
CLOSE_INTERNAL_ERROR = 1011
# Read once: Django's settings object is lazy and costs a lookup per attribute.
MAX_RUN_OUTPUT_BYTES: int = settings.IOP_MAX_RUN_OUTPUT_BYTES
# Refused sign-ins have no session yet: one limit for all of them, so that a flood of bad
# credentials does not flood the log either.
REFUSED_SIGN_INS = LogLimit("node websocket")
# Provider ids a log line about a Node's foreign health reports names, at most.
IDS_SHOWN = 3

DROP, PING, WAIT = "drop", "ping", "wait"
# The ASGI callables a consumer is called with.
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
# Told to each Node in its `config`: the frames this Edge takes beyond protocol 1's (wire.md).
EDGE_FEATURES = [wire.FEATURE_BATCH]


def keep_alive_step(quiet_s: float, interval_s: float) -> str:
    """What the keep-alive does about a Node last heard from ``quiet_s`` ago: drop it after
    SILENT_INTERVALS, ping it after one interval, else wait. A Node heard from within the
    interval (its own pings, a run's events) is not pinged: the ping and its pong would tell
    nothing new, and at 3,000 Nodes they cost a third of a core."""
    if quiet_s > SILENT_INTERVALS * interval_s:
        return DROP
    return PING if quiet_s >= interval_s else WAIT


def token_matches(token: str, expected_sha256: str) -> bool:
    return hmac.compare_digest(sha256_hex(token), expected_sha256)


class NodeConsumer(AsyncWebsocketConsumer):
    """One Node's websocket session."""

    # Set in connect(); defaults so that disconnect() is safe whatever connect() got to.
    session: NodeSession | None = None
    hello_deadline: asyncio.TimerHandle | None = None
    acting: asyncio.Task[None] | None = None  # the keep-alive's ping or drop, while it runs
    closing = False  # a refusal is closing the session: the rest of a batch is not read

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """Channels' loop, reading the one source a Node session has (no channel layer) directly.

        Channels waits for each message with a task of its own and an ``asyncio.wait`` over it,
        so that it can listen to a channel layer too: a dozen objects per frame, each living
        until that session's next frame. At thousands of sessions that is a hundred thousand
        objects the collector rescans at every collection of its older generations (docs/
        benchmarks.md, "Fleet"). A configured channel layer gets Channels' loop as before.
        """
        if get_channel_layer(self.channel_layer_alias) is not None:
            await super().__call__(scope, receive, send)
            return
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        with contextlib.suppress(StopConsumer):
            while True:
                await self.dispatch(await receive())

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale DB connections before every event, a thread hop per frame. The
        # handlers below never touch the database directly, so skip it on this hot path.
        handler = getattr(self, message["type"].replace(".", "_"), None)
        if handler is None:
            raise ValueError(f"no handler for {message['type']}")
        try:
            await handler(message)
        except StopConsumer:
            raise
        except Exception:
            # Left alone, the dead consumer would leave a "ready" session that swallows runs.
            log.exception("node %s: session failed in %s", self._node_name, message["type"])
            await self._abandon()
            if message["type"] == "websocket.disconnect":
                raise StopConsumer from None

    @property
    def _node_name(self) -> str:
        return getattr(self, "node_id", "?")

    async def _abandon(self) -> None:
        """End the session after a bug here: its runs fail, its providers leave the pool."""
        self._stop_keep_alive()
        if self.session is not None:
            self.runtime.nodes.detach(self.session)
        with contextlib.suppress(Exception):
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def connect(self) -> None:
        self.runtime: EdgeRuntime = get_runtime()
        self.bad_frames = 0
        self.last_heard = time.monotonic()
        self.greeted = False  # the Node's hello arrived
        headers = dict(self.scope["headers"])
        node_id = headers.get(b"x-iop-node", b"").decode("latin-1")
        node = self.runtime.config.node(node_id)
        token = bearer_token(headers.get(b"authorization", b""))
        # Accept first, then close: real clients only see the close code after a handshake.
        await self.accept()
        if not self.runtime.leadership.admitting:
            # A standby (`edge.ha`): the Node moves on to its next Edge URL. (Daphne sends no
            # close reason: the code says it, and the Node names it.)
            await self.close(code=wire.CLOSE_STANDBY)
            return
        if node is None or token is None or not token_matches(token, node.token_hash_sha256):
            REFUSED_SIGN_INS.warning(
                log, "node websocket refused: %s", "unknown node" if node is None else "bad token"
            )
            await self.close(code=wire.CLOSE_UNAUTHORIZED)
            return
        if self.runtime.sign_ins is not None:
            # Its session frozen a moment after it is attached, with the rest of a storm.
            self.runtime.sign_ins.note_sign_in()
        self.node_id = node_id
        self.session, superseded = self.runtime.nodes.attach(
            node_id, self, max_run_output_bytes=MAX_RUN_OUTPUT_BYTES
        )
        if superseded is not None:
            await superseded.link.close_session(wire.CLOSE_SUPERSEDED)
        loop = asyncio.get_running_loop()
        self.hello_deadline = loop.call_later(
            settings.IOP_NODE_HELLO_TIMEOUT_S, self._hello_overdue
        )

    def _stop_keep_alive(self) -> None:
        if self.hello_deadline is not None:
            self.hello_deadline.cancel()
            self.hello_deadline = None
        if self.session is not None:  # only a session's consumer is in the keep-alive round
            self.runtime.keep_alive.discard(self)
        if self.acting is not None and self.acting is not asyncio.current_task():
            self.acting.cancel()

    async def disconnect(self, code: int) -> None:
        self._stop_keep_alive()
        if self.session is not None:
            self.runtime.nodes.detach(self.session)
            # The session refers back to this consumer: without the cycle, both go as soon as
            # Channels lets go, even when frozen out of the collector's sight (edge.memory).
            self.session = None

    # -- NodeLink ---------------------------------------------------------------------------

    async def send_frame(self, frame: wire.Frame) -> None:
        """Send a frame, in parts when it is too large for one (``wire.FrameError`` when it is
        too large even for that; nothing is sent then)."""
        if self.session is None or self.session.closed:
            raise ConnectionError("session closed")
        for text in wire.split(frame):
            await self.send(text_data=text)

    async def close_session(self, code: int) -> None:
        await self.close(code=code)

    # -- frames in ----------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        session = self.session
        if session is None or session.closed:
            return
        self.last_heard = time.monotonic()
        text = text_data if text_data is not None else bytes_data or b""
        try:
            frame = wire.decode(text, accept=wire.NODE_TO_EDGE)
        except wire.FrameError as exc:
            await self._bad_frame(session, text, exc)
            return
        await self._handle(session, frame, len(text))

    async def _handle(self, session: NodeSession, frame: wire.Frame, size: int) -> None:
        # Compared on the frame itself, so the type checker narrows it to that frame's shape.
        if frame["type"] == "batch":
            await self._batch(session, frame["frames"])
        elif frame["type"] == "run.event":
            await self._run_event(session, frame, size)
        elif frame["type"] == "part":
            await self._part(session, frame)
        elif frame["type"] == "hello":
            await self._hello(session, frame)
        elif frame["type"] == "config.ack":
            await self._config_ack(session, frame)
        elif frame["type"] == "provider.health":
            self._provider_health(session, frame)
        elif frame["type"] == "ping" and frame.get("ts") is not None:
            # Asked for an answer; a ping without a ts is a heartbeat, already heard above.
            await self.send_frame(wire.pong(frame["ts"]))

    async def _batch(self, session: NodeSession, texts: list[str]) -> None:
        """The frames of a batch, in order. A run's event (most of them) is delivered right
        here, not through a coroutine of its own: a batch holds hundreds under load."""
        for text in texts:
            if session.closed or self.closing:
                return  # a frame of this batch ended the session
            try:
                frame = wire.decode(text, accept=wire.BATCHED_NODE_TO_EDGE)
            except wire.FrameError as exc:
                await self._bad_frame(session, text, exc)
                continue
            if frame["type"] == "run.event":
                event: Mapping[str, Any] = frame  # as _run_event takes it: its data a dict
                if session.deliver(event["run_id"], event["event"], event["data"], len(text)):
                    continue
            await self._handle(session, frame, len(text))  # a run.event here: no such run

    async def _run_event(self, session: NodeSession, frame: Mapping[str, Any], size: int) -> None:
        if not session.deliver(frame["run_id"], frame["event"], frame["data"], size):
            await self._unknown_run(session, frame["type"], frame["run_id"])

    async def _part(self, session: NodeSession, frame: wire.Part) -> None:
        try:
            owned = session.take_part(frame)
        except wire.FrameError as exc:  # that run has failed; the session goes on
            await self._refuse(exc.code, exc.message, counts=False)
            return
        if not owned:
            await self._unknown_run(session, frame["type"], frame["run_id"])

    async def _unknown_run(self, session: NodeSession, frame_type: str, run_id: str) -> None:
        session.warnings.warning(
            log, "node %s: refused %s for run %s it does not own", self.node_id, frame_type, run_id
        )
        # Refused, but not counted as abuse: a Node may legitimately lag behind a cancel.
        await self._refuse("unknown_run", f"no run {run_id!r} on this session", counts=False)

    async def _bad_frame(
        self, session: NodeSession, text: str | bytes, exc: wire.FrameError
    ) -> None:
        """A frame that does not decode. One that names a run of this session fails that run
        only; any other counts toward closing the session."""
        run_id = wire.run_id_of(text, RUN_FRAMES)
        if run_id is not None and session.owns(run_id):
            message = f"the node sent a bad frame for this run: {exc.message}"
            session.fail_run(run_id, BAD_FRAME, message)
            await self._refuse(exc.code, exc.message, counts=False)
            return
        await self._refuse(exc.code, exc.message, fatal=exc.code in FATAL_FRAME_ERRORS)

    async def _hello(self, session: NodeSession, frame: Mapping[str, Any]) -> None:
        # The codec already refused any other protocol version.
        if self.greeted:
            # Each hello would cost a config frame and a log line: one per session.
            await self._refuse("bad_hello", "this session has already said hello")
            return
        if frame["node_id"] != self.node_id:
            await self._refuse(
                "bad_hello",
                f"hello must name node {self.node_id!r}, the node it signed in as",
                fatal=True,
            )
            return
        log.info("node %s: connected (agent %s)", self.node_id, frame["agent_version"])
        session.agent_version = frame["agent_version"]
        self.greeted = True
        if self.hello_deadline is not None:
            self.hello_deadline.cancel()
            self.hello_deadline = None
        self.runtime.keep_alive.add(self)
        config = self.runtime.config
        node = config.node(self.node_id)
        if node is not None:
            await self.send_frame(
                wire.config(config.revision, node_canonical(node), features=EDGE_FEATURES)
            )

    async def _config_ack(self, session: NodeSession, frame: Mapping[str, Any]) -> None:
        if frame.get("refresh_id"):
            session.resolve_ack(frame)
        if frame["status"] == "applied":
            self.runtime.nodes.mark_ready(session, frame["revision"])
            # Written in batches off the frame path: run events never wait behind the database.
            self.runtime.acks.record(self.node_id, frame["revision"])
        else:
            session.warnings.log(
                log,
                logging.ERROR,
                "node %s: rejected config %s: %s",
                self.node_id,
                frame["revision"],
                frame["error"],
            )

    def _provider_health(self, session: NodeSession, frame: Mapping[str, Any]) -> None:
        node = self.runtime.config.node(self.node_id)
        own = {p.id for p in node.providers} if node else set()
        foreign = []
        for provider_id, health in frame["providers"].items():
            if provider_id in own:
                self.runtime.pool.set_provider_health(
                    provider_id, health["healthy"], health["detail"]
                )
            else:
                foreign.append(provider_id)
        if foreign:
            session.warnings.warning(
                log,
                "node %s: ignored health of %d provider(s) not its own: %s",
                self.node_id,
                len(foreign),
                ", ".join(foreign[:IDS_SHOWN]) + (", ..." if len(foreign) > IDS_SHOWN else ""),
            )

    async def _refuse(
        self, code: str, message: str, fatal: bool = False, counts: bool = True
    ) -> None:
        """Answer a bad frame with an `error` frame; repeated abuse closes the session."""
        self.bad_frames += counts
        await self.send(text_data=wire.encode(wire.error(code, message)))
        if fatal or self.bad_frames >= MAX_BAD_FRAMES:
            self.closing = True
            log.warning(
                "node %s: closing after bad frames (%s)", getattr(self, "node_id", "?"), message
            )
            await self.close(code=wire.CLOSE_PROTOCOL_ERROR)

    # -- keep-alive (nodes.keepalive) -------------------------------------------------------

    def _hello_overdue(self) -> None:
        # A socket that signed in but never speaks would hold its Node's slot forever.
        self.hello_deadline = None
        self.acting = asyncio.create_task(self._keep_alive_act(self._refuse_silent_hello))

    async def _refuse_silent_hello(self, session: NodeSession) -> None:
        timeout = settings.IOP_NODE_HELLO_TIMEOUT_S
        await self._refuse("hello_timeout", f"no hello within {timeout:g} s", fatal=True)
        self.runtime.nodes.detach(session)

    def keep_alive_due(self) -> None:
        """Once per ping interval (``runtime.keep_alive``): ping a Node quiet for an interval;
        drop one silent for SILENT_INTERVALS, so its runs fail (their slots come back) and its
        providers leave the pool."""
        session = self.session
        if session is None or session.closed:
            self.runtime.keep_alive.discard(self)
            return
        if self.acting is not None and not self.acting.done():
            return  # the last ping is still being written
        interval = self.runtime.keep_alive.interval_s
        step = keep_alive_step(time.monotonic() - self.last_heard, interval)
        if step == DROP:
            self.runtime.keep_alive.discard(self)
            self.acting = asyncio.create_task(self._keep_alive_act(self._drop_silent))
        elif step == PING:
            self.acting = asyncio.create_task(self._keep_alive_act(self._ping))

    async def _keep_alive_act(self, act: Callable[[NodeSession], Awaitable[None]]) -> None:
        session = self.session
        if session is None or session.closed:
            return
        try:
            await act(session)
        except ConnectionError:
            return
        except Exception:
            log.exception("node %s: keep-alive failed", self._node_name)
            await self._abandon()

    async def _ping(self, session: NodeSession) -> None:
        await self.send_frame(wire.ping(time.time()))

    async def _drop_silent(self, session: NodeSession) -> None:
        # Detached first: a frozen Node must not get runs while its socket closes.
        silence = SILENT_INTERVALS * self.runtime.keep_alive.interval_s
        log.warning("node %s: no frame for %.0f s, dropping it", self.node_id, silence)
        self.runtime.nodes.detach(session)
        await self.close(code=wire.CLOSE_PROTOCOL_ERROR)
