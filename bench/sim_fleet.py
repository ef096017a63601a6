"""A simulated Node fleet: one process holding many Node sessions with the Edge, for benchmarks.

Each ``SimulatedNode`` speaks docs/wire.md as the Node agent does (``nodes/agent/session.py``):
``hello``, a ``config.ack`` for each ``config`` and ``config.refresh``, then ``provider.health``;
a ``pong`` for each ``ping`` and a ``ping`` of its own on the agent's interval; runs answered as
the echo adapter answers them (``run.event`` deltas or one response, then ``done``), stopped by
``run.cancel`` or their deadline. It costs less than an agent because it leaves out what a
benchmark of the Edge does not need:

- every adapter answers as echo, whatever its type (an ``openai_http`` fleet needs no upstream);
  ``token_delay_ms`` sets the pace of those that are not echo already;
- health is what the agent reports first, for every adapter as echo: after each applied
  config, one ``provider.health`` per adapter as its probe answers (``(True, "echo")``), each
  covering the providers of the adapters answered so far; no probes after that (an agent
  probes an ``openai_http`` upstream again every ``health_interval_s``);
- no environment checks (``api_key_env`` is never read), no drain, no logging;
- ``hello`` names the agent version with ``+sim``, so the Edge's view tells the two apart.

tests/bench/test_sim_fleet.py holds it to the real agent, frame for frame, through a recording
proxy. The command line signs in nodes ``node-00000``... of ``bench/fleet_config.py``:

    python bench/sim_fleet.py --edge ws://127.0.0.1:8000/ws/node/ --nodes 1000

and prints the time to ready, then one JSON object as its last line (``--hold-until-stopped``: a
first one once ready, the last after SIGINT or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from edge.ports import raise_open_files_limit
from nodes import wire
from nodes.agent.adapters import Adapter, AdapterError
from nodes.agent.adapters.echo import EchoAdapter
from nodes.agent.agent import Backoff
from nodes.agent.registry import Registry
from nodes.agent.session import (
    AGENT_VERSION,
    CLOSE_GOING_AWAY,
    RUN_FRAMES,
    admit_run,
    heartbeat,
    serve_run,
)
from nodes.wire.pacing import keepalive_ping_interval

SIM_VERSION = f"{AGENT_VERSION}+sim"
OPEN_TIMEOUT_S = 10.0  # the agent's (AgentSettings.open_timeout_s)


@dataclass(frozen=True, slots=True)
class RefreshAck:
    refresh_id: str
    status: str  # "applied" or "rejected"
    at: float  # time.monotonic() when sent


@dataclass(frozen=True, slots=True)
class Drop:
    """A session that ended without the fleet asking: closed by the Edge, or lost."""

    at: float
    code: int | None  # None: no closing handshake (the network, or an Edge that died)
    reason: str


class Tally:
    """What a fleet's nodes have done, counted as it happens, and waits on those counts."""

    def __init__(self) -> None:
        self.ready = 0  # nodes whose current session has applied a config
        self.refresh_acks: Counter[str] = Counter()  # applied acks sent, by refresh id
        self.rejected = 0  # configs refused (a payload the Node's parser rejects)
        self.dropped = 0
        self.connect_failed = 0
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def changed(self) -> None:
        for check, future in self._waiters:
            if not future.done() and check():
                future.set_result(None)
        self._waiters = [(c, f) for c, f in self._waiters if not f.done()]

    async def wait_for(self, check: Callable[[], bool], timeout: float) -> bool:
        """Whether ``check`` held within ``timeout`` seconds."""
        if check():
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((check, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        return True


class SimulatedNode:
    """One Node's session with the Edge (a new one after each end, with ``reconnect``), and what
    happened on it. The times are ``time.monotonic()``, of the latest session."""

    def __init__(
        self,
        node_id: str,
        token: str,
        *,
        reconnect: bool = False,
        token_delay_ms: float = 0.0,
        open_timeout_s: float = OPEN_TIMEOUT_S,
        tally: Tally | None = None,
    ) -> None:
        self.node_id = node_id
        self._headers = {"Authorization": f"Bearer {token}", "X-IOP-Node": node_id}
        self._reconnect = reconnect
        self._token_delay_ms = token_delay_ms
        self._open_timeout_s = open_timeout_s
        self.tally = tally or Tally()
        self.dialed_at: float | None = None
        self.connected_at: float | None = None
        self.config_at: float | None = None  # the session's first config received
        self.ready_at: float | None = None  # its first applied ack sent
        self.refresh_acks: list[RefreshAck] = []
        self.drops: list[Drop] = []
        self.connect_errors: list[str] = []
        self.ready = False
        self._ws: ClientConnection | None = None
        self._registry: Registry | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._parts = wire.Reassembler()  # large run.requests on their way in
        self._gate: asyncio.Semaphore | None = None  # held from dialing to the first config
        self._closing = asyncio.Event()

    @property
    def runs_in_flight(self) -> int:
        """Runs this node is serving now (a cancelled one leaves at once)."""
        return len(self._runs)

    async def run(self, edge_ws_url: str, gate: asyncio.Semaphore | None = None) -> None:
        """Hold a session until ``close``. ``gate`` bounds the nodes signing in at once."""
        backoff = Backoff()
        while not self._closing.is_set():
            if gate is not None:
                await gate.acquire()
                self._gate = gate
            try:
                was_ready = await self._session(edge_ws_url)
            finally:
                self._let_gate_go()
            if self._closing.is_set() or not self._reconnect:
                return
            # As the agent: a superseded session means another holder of this id; keep backing off.
            if was_ready and not (self.drops and self.drops[-1].code == wire.CLOSE_SUPERSEDED):
                backoff.reset()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), backoff.next_delay())

    async def close(self) -> None:
        """End the session (close 1001, as an agent that stops) and dial no more."""
        self._closing.set()
        if self._ws is not None:
            await self._ws.close(CLOSE_GOING_AWAY, "simulated node stopping")

    def _let_gate_go(self) -> None:
        if self._gate is not None:
            self._gate.release()
            self._gate = None

    async def _session(self, url: str) -> bool:
        """One connection, until it ends; whether it became ready."""
        self.dialed_at = time.monotonic()
        self.connected_at = self.config_at = self.ready_at = None
        try:
            ws = await connect(
                url,
                additional_headers=self._headers,
                open_timeout=self._open_timeout_s,
                # As the agent: above the frame limit, and no deflate for small JSON frames.
                max_size=wire.MAX_SOCKET_MESSAGE_BYTES,
                compression=None,
                ping_interval=keepalive_ping_interval(),
            )
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            self.connect_errors.append(f"{type(exc).__name__}: {exc}")
            self.tally.connect_failed += 1
            self.tally.changed()
            return False
        self._ws = ws
        self.connected_at = time.monotonic()
        if self._closing.is_set():  # close() came while dialing
            await ws.close(CLOSE_GOING_AWAY, "simulated node stopping")
        beat: asyncio.Task[None] | None = None
        try:
            await self._send(wire.hello(self.node_id, SIM_VERSION))
            beat = asyncio.create_task(heartbeat(self._send))
            async for text in ws:
                await self._handle(text)
        except ConnectionClosed:
            pass
        finally:
            if beat is not None:
                beat.cancel()
            runs = list(self._runs.values())
            for task in runs:
                task.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            await ws.close()
            self._registry = None
            self._parts = wire.Reassembler()
        was_ready = self.ready
        if was_ready:
            self.ready = False
            self.tally.ready -= 1
        if not self._closing.is_set():
            close = ws.protocol.close_rcvd
            self.drops.append(
                Drop(time.monotonic(), close.code if close else None, close.reason if close else "")
            )
            self.tally.dropped += 1
        self.tally.changed()
        return was_ready

    # -- frames from the Edge (as EdgeSession._handle) -------------------------------------

    async def _handle(self, text: str | bytes) -> None:
        try:
            frame = wire.decode(text, accept=wire.EDGE_TO_NODE)
        except wire.FrameError as exc:
            await self._refuse_run(wire.run_id_of(text, RUN_FRAMES), exc)
            return
        if frame["type"] == "part":
            try:
                whole = self._parts.take(frame, wire.SPLIT_EDGE_TO_NODE)
            except wire.FrameError as exc:
                await self._refuse_run(frame["run_id"], exc)
                return
            if whole is None:
                return
            frame = whole
        if frame["type"] == "ping" and frame.get("ts") is not None:
            await self._send(wire.pong(frame["ts"]))
        elif frame["type"] == "run.request":
            await self._start_run(frame)
        elif frame["type"] == "run.cancel":
            self._parts.discard(frame["run_id"])
            task = self._runs.get(frame["run_id"])
            if task is not None:  # else it already ended: the cancel crossed its last event
                task.cancel()
        elif frame["type"] == "config":
            self.config_at = time.monotonic()
            await self._apply_config(frame["revision"], frame["node"], None)
        elif frame["type"] == "config.refresh":
            await self._apply_config(frame["revision"], frame["node"], frame["refresh_id"])
        # "pong" and "error" need no answer (the agent logs an error frame).

    async def _refuse_run(self, run_id: str | None, exc: wire.FrameError) -> None:
        """A broken run frame that still names its run gets an error for that run."""
        if run_id is not None:
            self._parts.discard(run_id)
            await self._send(wire.run_error(run_id, wire.ERROR_BAD_REQUEST, exc.message))

    async def _apply_config(
        self, revision: str, node: wire.NodePayload, refresh_id: str | None
    ) -> None:
        try:
            spec = wire.parse_node_config(node, node_id=self.node_id)
        except wire.NodeConfigError as exc:
            await self._send(wire.config_ack(revision, refresh_id=refresh_id, error=str(exc)))
            self._acked(refresh_id, "rejected")
            return
        self._registry = Registry.build(spec, revision, adapter_factory=self._adapter)
        await self._send(wire.config_ack(revision, refresh_id=refresh_id))
        self._acked(refresh_id, "applied")
        await self._report_health(self._registry)

    def _acked(self, refresh_id: str | None, status: str) -> None:
        now = time.monotonic()
        if refresh_id is not None:
            self.refresh_acks.append(RefreshAck(refresh_id, status, now))
        if status == "rejected":
            self.tally.rejected += 1
        else:
            if refresh_id is not None:
                self.tally.refresh_acks[refresh_id] += 1
            if not self.ready:
                self.ready = True
                self.ready_at = now
                self.tally.ready += 1
        self._let_gate_go()  # signed in, ready or not: the next node may dial
        self.tally.changed()

    async def _report_health(self, registry: Registry) -> None:
        """As the agent's HealthMonitor first reports: each adapter's probe in turn, each report
        covering the providers of the adapters answered so far."""
        answered: dict[str, tuple[bool, str]] = {}
        for adapter in registry.adapters.values():
            answered[adapter.id] = await adapter.probe()
            health = {
                pid: answered[entry.adapter.id]
                for pid, entry in registry.providers.items()
                if entry.adapter.id in answered
            }
            await self._send(wire.provider_health(health))

    def _adapter(self, spec: wire.AdapterSpec) -> Adapter:
        if spec.type == "echo":
            return EchoAdapter(spec)
        return EchoAdapter(wire.AdapterSpec(spec.id, "echo", token_delay_ms=self._token_delay_ms))

    # -- runs (admitted and served by the agent's own admit_run and serve_run) -------------------

    async def _start_run(self, frame: wire.RunRequest) -> None:
        run_id = frame["run_id"]
        try:
            adapter = admit_run(frame, self._registry, self._runs)
        except AdapterError as refused:
            await self._send(refused.event(run_id))
            return
        task = asyncio.create_task(serve_run(frame, adapter, self._send))
        self._runs[run_id] = task
        task.add_done_callback(lambda _: self._runs.pop(run_id, None))

    # -- sending ---------------------------------------------------------------------------

    async def _send(self, frame: wire.Frame) -> None:
        """Send a frame, in parts when too large for one; a run event too large even for that
        fails its run (``output_too_large``)."""
        ws = self._ws
        if ws is None:
            raise RuntimeError("no session to send on")
        try:
            texts = wire.split(frame)
        except wire.FrameError as exc:
            if frame["type"] != "run.event":
                raise
            raise AdapterError(wire.ERROR_OUTPUT_TOO_LARGE, exc.message) from None
        for text in texts:
            await ws.send(text)


class SimulatedFleet:
    """Many ``SimulatedNode``s on one event loop, counted in one ``Tally``."""

    def __init__(
        self,
        *,
        reconnect: bool = False,
        token_delay_ms: float = 0.0,
        open_timeout_s: float = OPEN_TIMEOUT_S,
    ) -> None:
        self._node_options: dict[str, Any] = {
            "reconnect": reconnect,
            "token_delay_ms": token_delay_ms,
            "open_timeout_s": open_timeout_s,
        }
        self.tally = Tally()
        self.nodes: list[SimulatedNode] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(
        self, edge_ws_url: str, nodes: Iterable[tuple[str, str]], concurrency: int | None = None
    ) -> None:
        """Dial every ``(node_id, token)``; ``concurrency`` bounds how many sign in at once
        (from dialing to answering their first config), None dials them all at once."""
        gate = asyncio.Semaphore(concurrency) if concurrency else None
        for node_id, token in nodes:
            node = SimulatedNode(node_id, token, tally=self.tally, **self._node_options)
            self.nodes.append(node)
            self._tasks.append(asyncio.create_task(node.run(edge_ws_url, gate)))

    @property
    def ready_count(self) -> int:
        return self.tally.ready

    @property
    def dropped(self) -> int:
        return self.tally.dropped

    @property
    def refresh_acks(self) -> Counter[str]:
        return self.tally.refresh_acks

    async def wait_ready(self, timeout: float) -> bool:
        """Whether every node was ready within ``timeout`` seconds."""
        return await self.tally.wait_for(lambda: self.tally.ready >= len(self.nodes), timeout)

    async def wait_refresh_acks(self, refresh_id: str, count: int, timeout: float) -> bool:
        """Whether ``count`` nodes acked refresh ``refresh_id`` (applied) within ``timeout``."""
        return await self.tally.wait_for(
            lambda: self.tally.refresh_acks[refresh_id] >= count, timeout
        )

    async def close(self) -> None:
        await asyncio.gather(*(node.close() for node in self.nodes))
        await asyncio.gather(*self._tasks)


# -- the command line ------------------------------------------------------------------------


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentile(values: Sequence[float], p: float) -> float | None:
    data = sorted(values)
    if not data:
        return None
    return round(data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))], 1)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    # A sibling module: this file runs as a script, with bench/ on sys.path.
    from fleet_config import node_id, node_token

    members = [(node_id(i), node_token(i)) for i in range(args.first, args.first + args.nodes)]
    rss_before, cpu_before = rss_kb(), time.process_time()
    fleet = SimulatedFleet(reconnect=args.reconnect, token_delay_ms=args.token_delay_ms)
    started = time.monotonic()
    await fleet.start(args.edge, members, concurrency=args.concurrency)
    deadline = started + args.ready_timeout
    while not await fleet.wait_ready(min(5.0, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            break
        print(f"  {time.monotonic() - started:6.1f} s: {fleet.ready_count}/{len(members)} ready")
    ready_s = time.monotonic() - started
    sign_in_ms = [
        (n.ready_at - n.dialed_at) * 1000
        for n in fleet.nodes
        if n.ready_at is not None and n.dialed_at is not None
    ]
    storm_cpu_s = time.process_time() - cpu_before
    rss_ready = rss_kb()
    print(
        f"ready: {fleet.ready_count}/{len(members)} in {ready_s:.2f} s "
        f"(sign-in p50 {percentile(sign_in_ms, 50)} ms, p99 {percentile(sign_in_ms, 99)} ms), "
        f"{fleet.tally.connect_failed} failed to connect, {fleet.tally.rejected} rejected"
    )
    summary: dict[str, Any] = {
        "nodes": len(members),
        "ready": fleet.ready_count,
        "ready_s": round(ready_s, 3),
        "sign_in_ms_p50": percentile(sign_in_ms, 50),
        "sign_in_ms_p99": percentile(sign_in_ms, 99),
        "connect_failed": fleet.tally.connect_failed,
        "rejected": fleet.tally.rejected,
        "storm_cpu_s": round(storm_cpu_s, 2),
        "rss_mb": round(rss_ready / 1024, 1),
        "rss_kb_per_session": round((rss_ready - rss_before) / max(1, fleet.ready_count), 1),
    }
    if args.hold_until_stopped:
        print(json.dumps(summary), flush=True)  # the sign-in figures, for a caller that waits
    if args.hold > 0 or args.hold_until_stopped:
        cpu_held, held_from = time.process_time(), time.monotonic()
        await hold(None if args.hold_until_stopped else args.hold)
        held_s = time.monotonic() - held_from
        print(f"held {held_s:.0f} s: {fleet.dropped} dropped, {fleet.ready_count} ready")
        summary["held_s"] = round(held_s, 1)
        summary["held_cpu_pct"] = round((time.process_time() - cpu_held) / held_s * 100, 1)
        summary["still_ready"] = fleet.ready_count
    summary["dropped"] = fleet.dropped
    summary["drop_codes"] = dict(Counter(str(d.code) for n in fleet.nodes for d in n.drops))
    await fleet.close()
    return summary


async def hold(seconds: float | None) -> None:
    """Stay connected for ``seconds``, or until SIGINT or SIGTERM when None."""
    if seconds is not None:
        await asyncio.sleep(seconds)
        return
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A simulated Node fleet signing in to an Edge.")
    parser.add_argument("--edge", default="ws://127.0.0.1:8000/ws/node/", help="node websocket")
    parser.add_argument("--nodes", type=int, default=1000, help="how many nodes sign in")
    parser.add_argument("--first", type=int, default=0, help="index of the first node")
    parser.add_argument(
        "--concurrency", type=int, default=None, help="nodes signing in at once (default: all)"
    )
    parser.add_argument("--ready-timeout", type=float, default=120.0, metavar="SECONDS")
    parser.add_argument(
        "--hold", type=float, default=0.0, metavar="SECONDS", help="stay connected this long"
    )
    parser.add_argument(
        "--hold-until-stopped",
        action="store_true",
        help="print the sign-in figures once ready, stay connected until SIGINT or SIGTERM",
    )
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pace of replies")
    parser.add_argument("--reconnect", action="store_true", help="dial again after a drop")
    args = parser.parse_args(argv)
    limit = raise_open_files_limit()
    if limit < args.nodes + 64:
        parser.error(f"--nodes: {args.nodes} sessions need more open files than the limit {limit}")
    print(json.dumps(asyncio.run(bench(args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
