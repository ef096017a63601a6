"""The run path: lease a provider, run the request on its Node, relay the events, release.

`open_run` is the one service function behind the OpenAI API. It owns where a run goes: a Node
that refused a run before starting it costs the caller nothing, the run goes elsewhere. Whatever
ends a run — done, error, the caller going away, the Node going away, the deadline — each lease is
released exactly once and an unfinished run is cancelled on its Node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from edge.dispatch import Lease
from edge.runtime import EdgeRuntime
from nodes import wire
from nodes.sessions import NODE_DISCONNECTED, NodeSession, RunStream

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "deadline_exceeded"
# First events that mean the Node never started the run: nothing ran, so it may go elsewhere.
# A draining Node refuses new runs before its "unhealthy" report has reached the Edge.
REFUSALS = frozenset({wire.ERROR_NODE_DRAINING})
MAX_ATTEMPTS = 2  # the first try and once more elsewhere
_run_ids = itertools.count(1)
_run_prefix = os.urandom(4).hex()


class RunFailed(Exception):
    """A run that ended in an error: from the Node, its upstream, or the Edge itself."""

    def __init__(self, code: str, message: str, upstream_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.upstream_status = upstream_status


class ActiveRun:
    """A run in flight on a Node: iterate its deltas; ``status`` says how it ended."""

    def __init__(self, lease: Lease, session: NodeSession) -> None:
        self.lease = lease
        self.session = session
        self.run_id = f"run-{_run_prefix}-{next(_run_ids)}"
        self.stream: RunStream = session.open_run(self.run_id)
        self.finished = False
        self.usage: dict[str, int] | None = None
        self.finish_reason: str | None = None
        self.status = "cancelled"
        self._first_event: tuple[str, dict[str, Any]] | None = None

    async def _refused(self) -> bool:
        """Wait for the first event (kept for the deltas); True when it refuses the run."""
        self._first_event = await self.stream.next_event()
        event, data = self._first_event
        if event == "error" and data["code"] in REFUSALS:
            self.finished = True  # the Node ended it: nothing to cancel
            return True
        return False

    async def delta_batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The Node's chat.completion.chunk dicts, as many at a time as have arrived.

        Returns after `done`; raises RunFailed on an error, the Node's or the deadline's.
        Handing over what has already arrived in one go lets the caller write it in one send.
        """
        while True:
            events = [await self._next_event(), *self.stream.drain()]
            batch = []
            for event, data in events:
                if event == "delta":
                    batch.append(data)
                    continue
                if batch:
                    yield batch
                self._end(event, data)
                return
            yield batch

    async def deltas(self) -> AsyncIterator[dict[str, Any]]:
        """The same, one chunk at a time."""
        async for batch in self.delta_batches():
            for chunk in batch:
                yield chunk

    async def _next_event(self) -> tuple[str, dict[str, Any]]:
        if self._first_event is None:
            return await self.stream.next_event()
        first, self._first_event = self._first_event, None
        return first

    def _end(self, event: str, data: dict[str, Any]) -> None:
        if event == DEADLINE_EXCEEDED:
            # The Edge gives up; the Node's run is still going and gets cancelled.
            self.status = DEADLINE_EXCEEDED
            raise RunFailed(DEADLINE_EXCEEDED, "the run did not finish in time")
        self.finished = True
        if event == "done":
            self.usage = data["usage"]
            self.finish_reason = data["finish_reason"]
            self.status = "ok"
            return
        self.status = data["code"]
        raise RunFailed(data["code"], data["message"], data.get("status"))


@asynccontextmanager
async def open_run(
    runtime: EdgeRuntime,
    model: str,
    request: Mapping[str, Any],
    estimated_input_tokens: int,
    timeout_s: float,
    on_attempt: Callable[[Lease], None] | None = None,
) -> AsyncIterator[ActiveRun]:
    """Acquire a lease (raising DispatchError), start the run on its Node, await its first event.

    A run its Node refused (see REFUSALS) is released, its provider marked unhealthy (the Node
    says so soon) and the run tried once more, within the same deadline, which covers queueing
    and every attempt. The run yielded is the one that serves: its lease is final. The caller
    iterates ``run.deltas()`` inside the block; leaving the block ends the run. ``on_attempt``
    sees each attempt's lease as it starts, so a caller that leaves before the first event still
    knows where its run was.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    for attempt in range(1, MAX_ATTEMPTS + 1):
        async with _start_run(runtime, model, request, estimated_input_tokens, deadline) as run:
            if on_attempt is not None:
                on_attempt(run.lease)
            if not await run._refused() or attempt == MAX_ATTEMPTS:
                yield run
                return
        runtime.pool.set_provider_health(run.lease.provider_id, False)


@asynccontextmanager
async def _start_run(
    runtime: EdgeRuntime,
    model: str,
    request: Mapping[str, Any],
    estimated_input_tokens: int,
    deadline: float,
) -> AsyncIterator[ActiveRun]:
    """One attempt: a lease, and the run sent to the lease's Node; both end with the block."""
    loop = asyncio.get_running_loop()
    lease = await _acquire_current(runtime, model, estimated_input_tokens, deadline)
    run: ActiveRun | None = None
    try:
        session = runtime.nodes.ready(lease.node_id)
        if session is None:
            raise RunFailed(NODE_DISCONNECTED, f"node {lease.node_id} is not connected")
        run = ActiveRun(lease, session)
        # One timer per run: at the deadline the run's own stream says so.
        deadline_timer = loop.call_at(deadline, run.stream.push, DEADLINE_EXCEEDED, {})
        body = dict(request, model=lease.served_model)
        frame = wire.run_request(
            run.run_id,
            lease.provider_id,
            lease.adapter_id,
            lease.served_model,
            body,
            time.time() + (deadline - loop.time()),
        )
        try:
            await session.send(frame)
        except ConnectionError as exc:
            raise RunFailed(NODE_DISCONNECTED, f"node {lease.node_id}: {exc}") from None
        yield run
    finally:
        try:
            if run is not None:
                deadline_timer.cancel()
                run.session.forget_run(run.run_id, unfinished=not run.finished)
                if not run.finished and not run.session.closed:
                    await _cancel_quietly(run)
        finally:
            lease.release()


async def _acquire_current(
    runtime: EdgeRuntime, model: str, estimated_input_tokens: int, deadline: float
) -> Lease:
    """A lease that matches the snapshot in force, obtained before the run's deadline.

    A queued request granted a slot just before a refresh swapped the snapshot wakes up after
    the Node got its new config: its route may be gone, so it asks again.
    """
    try:
        async with asyncio.timeout_at(deadline):
            lease = await runtime.pool.acquire(model, estimated_input_tokens)
            while not runtime.pool.is_current(lease):
                lease.release()
                lease = await runtime.pool.acquire(model, estimated_input_tokens)
    except TimeoutError:
        raise RunFailed(DEADLINE_EXCEEDED, "no provider was free before the deadline") from None
    return lease


async def _cancel_quietly(run: ActiveRun) -> None:
    """Tell the Node to stop a run nobody is reading; a Node already gone needs no telling."""
    try:
        await run.session.send(wire.run_cancel(run.run_id))
    except Exception as exc:
        log.debug("run %s: cancel not sent: %s", run.run_id, exc)
