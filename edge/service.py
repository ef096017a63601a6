"""The run path: lease a provider, run the request on its Node, relay the events, release.

`open_run` is the one service function behind the OpenAI API. Whatever ends a run — done, error,
the caller going away, the Node going away, the deadline — the lease is released exactly once and
an unfinished run is cancelled on its Node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from edge.dispatch import Lease
from edge.runtime import EdgeRuntime
from nodes import wire
from nodes.sessions import NODE_DISCONNECTED, NodeSession, RunStream

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "deadline_exceeded"
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

    async def delta_batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The Node's chat.completion.chunk dicts, as many at a time as have arrived.

        Returns after `done`; raises RunFailed on an error, the Node's or the deadline's.
        Handing over what has already arrived in one go lets the caller write it in one send.
        """
        while True:
            events = [await self.stream.next_event(), *self.stream.drain()]
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
) -> AsyncIterator[ActiveRun]:
    """Acquire a lease (raising DispatchError) and start the run on the lease's Node.

    The caller iterates ``run.deltas()`` inside the block; leaving the block ends the run.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
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
