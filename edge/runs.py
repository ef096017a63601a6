"""The run path: lease a provider, run the request on its Node, relay the events, release.

`open_run` (streams) and `complete_run` (whole answers) are the service functions behind the
OpenAI API. They own where a run goes: a run that failed before anything reached the caller —
its Node refused it or went away, its upstream was unreachable, overloaded, rate-limited or
refused the gateway's credentials — goes to another provider of the model, never back to one
that already failed it, within the run's deadline and ``failover.max_attempts``. Each attempt's
outcome feeds the provider's passive health. Whatever ends a run — done, error, the caller going
away, the Node going away, the deadline — each lease is released exactly once and an unfinished
run is cancelled on its Node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from edge.dispatch import UNSHARED, DispatchError, Lease, ProviderPool, Share
from edge.runtime import EdgeRuntime
from nodes import wire
from nodes.sessions import NODE_DISCONNECTED, NodeSession, RunStream

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "deadline_exceeded"
# The upstream refused the gateway's own credentials (HTTP 401/403): not the caller's problem.
UPSTREAM_AUTH_FAILED = "upstream_auth_failed"
AUTH_STATUSES = frozenset({401, 403})
# The Node never got to the upstream: the run may go elsewhere, and says nothing of the provider.
# A draining Node refuses new runs before its "unhealthy" report has reached the Edge.
NODE_FAILURES = frozenset({NODE_DISCONNECTED, wire.ERROR_NODE_DRAINING, wire.ERROR_NODE_NOT_READY})
# The provider itself failed (the request is not to blame): counts against its passive health.
PROVIDER_FAILURES = frozenset(
    {wire.ERROR_UPSTREAM_UNAVAILABLE, wire.ERROR_UPSTREAM_TIMEOUT, wire.ERROR_INTERNAL}
)
RATE_LIMITED = 429
REQUEST_TIMEOUT = 408
# One streamed chunk as the Node sent it: the upstream's dict, or (``relay_as``) the JSON text
# the caller gets.
Chunk = dict[str, Any] | str
_run_ids = itertools.count(1)
_run_prefix = os.urandom(4).hex()


class RunFailed(wire.RunError):
    """A run that ended in an error: from the Node, its upstream, or the Edge itself.

    ``attempts`` and ``tried`` (provider ids, in order) say where the run went before it failed;
    the run service sets them when it gives up.
    """

    attempts: int = 0
    tried: tuple[str, ...] = ()


def run_failure(lease: Lease, data: Mapping[str, Any]) -> RunFailed:
    """The RunFailed of a Node's `error` event for a run on ``lease``."""
    status = data.get("status")
    if data["code"] == wire.ERROR_UPSTREAM and status in AUTH_STATUSES:
        # The upstream's own words may quote the key: they stay out of the caller's answer.
        log.warning("provider %s: the upstream refused its credentials", lease.provider_id)
        return RunFailed(
            UPSTREAM_AUTH_FAILED,
            f"The upstream of provider {lease.provider_id} refused the gateway's credentials "
            f"(HTTP {status}).",
            status,
        )
    return RunFailed(
        data["code"],
        data["message"],
        status,
        retry_after=data.get("retry_after"),
        upstream_code=data.get("upstream_code"),
    )


def _provider_fault(failure: RunFailed) -> bool:
    """The provider broke, not the request: unreachable, timed out, 5xx, a failing Node."""
    if failure.code in PROVIDER_FAILURES:
        return True
    status = failure.status
    return failure.code == wire.ERROR_UPSTREAM and (
        status is None or status >= 500 or status == REQUEST_TIMEOUT
    )


def may_go_elsewhere(failure: RunFailed) -> bool:
    """Nothing in the failure blames the request, so another provider may well answer it."""
    return (
        failure.code in NODE_FAILURES
        or failure.code == UPSTREAM_AUTH_FAILED
        or (failure.code == wire.ERROR_UPSTREAM and failure.status == RATE_LIMITED)
        or _provider_fault(failure)
    )


def _passive_reason(failure: RunFailed) -> str:
    if failure.status is None:
        return failure.code
    return f"{failure.code} (HTTP {failure.status})"


class ActiveRun:
    """A run in flight on a Node: iterate its deltas; ``status`` says how it ended.

    ``attempts`` and ``tried`` count this run's attempt and those that failed before it;
    ``response`` is a non-streamed answer the Node sent whole; ``usage`` is the `done` event's,
    with the upstream's detail keys; ``finish_sent``: a relayed delta already carried the
    finish_reason (the upstream's own closing chunk).
    """

    def __init__(
        self, lease: Lease, session: NodeSession, relay_as: wire.RelayAs | None = None
    ) -> None:
        self.lease = lease
        self.session = session
        self.relay_as = relay_as
        self.run_id = f"run-{_run_prefix}-{next(_run_ids)}"
        self.stream: RunStream = session.open_run(self.run_id)
        self.finished = False
        self.attempts = 1
        self.tried: tuple[str, ...] = (lease.provider_id,)
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.finish_sent = False
        self.response: dict[str, Any] | None = None
        self.status = "cancelled"
        self.failure: RunFailed | None = None
        self._first_event: tuple[str, dict[str, Any]] | None = None

    async def started(self) -> None:
        """Wait for the first event (kept for the deltas); raise RunFailed when it is an error."""
        event, data = await self.stream.next_event()
        if event == "error" or event == DEADLINE_EXCEEDED:
            self._end(event, data)
        self._first_event = (event, data)

    async def delta_batches(self) -> AsyncIterator[list[Chunk]]:
        """The Node's chat.completion.chunk dicts (or, when the run asked with ``relay_as``,
        the texts of its ``chunk`` events), as many at a time as have arrived.

        Returns after `done`; raises RunFailed on an error, the Node's or the deadline's.
        Handing over what has already arrived in one go lets the caller write it in one send.
        A `response` event (a whole answer) is kept in ``response``, not yielded.
        """
        while True:
            events = [await self._next_event(), *self.stream.drain()]
            batch: list[Chunk] = []
            for event, data in events:
                if event == "delta":
                    batch.append(data)
                    continue
                if event == "chunk" and self.relay_as is not None:
                    batch.append(data["text"])
                    continue
                if event == "response":
                    self.response = data
                    continue
                if batch:
                    yield batch
                self._end(event, data)
                return
            if batch:
                yield batch

    async def deltas(self) -> AsyncIterator[dict[str, Any]]:
        """The same, one chunk at a time, for a run that did not ask for texts: a ``chunk``
        event fails such a run (``_end``), so all it yields are dicts."""
        async for batch in self.delta_batches():
            for chunk in batch:
                yield cast("dict[str, Any]", chunk)

    async def _next_event(self) -> tuple[str, dict[str, Any]]:
        if self._first_event is None:
            return await self.stream.next_event()
        first, self._first_event = self._first_event, None
        return first

    def _end(self, event: str, data: dict[str, Any]) -> None:
        if event == DEADLINE_EXCEEDED:
            # The Edge gives up; the Node's run is still going and gets cancelled.
            self.status = DEADLINE_EXCEEDED
            self.failure = RunFailed(DEADLINE_EXCEEDED, "the run did not finish in time")
            raise self.failure
        self.finished = True
        if event == "done":
            self.usage = data["usage"]
            self.finish_reason = data["finish_reason"]
            self.finish_sent = bool(data.get("finish_sent", False))
            self.status = "ok"
            return
        if event == "chunk":  # one the run did not ask for
            self.failure = RunFailed(
                wire.ERROR_INTERNAL, f"node {self.lease.node_id} sent a chunk text unasked"
            )
        else:
            self.failure = run_failure(self.lease, data)
        self.status = self.failure.code
        raise self.failure


@dataclass(frozen=True, slots=True)
class CompletedRun:
    """A run that went through to its end (``complete_run``): everything the caller answers."""

    lease: Lease
    attempts: int
    tried: tuple[str, ...]
    chunks: tuple[dict[str, Any], ...]  # the deltas, when the adapter streamed
    response: dict[str, Any] | None  # the chat.completion, when the Node sent it whole
    usage: dict[str, Any]
    finish_reason: str | None
    finish_sent: bool
    status: str


@asynccontextmanager
async def open_run(
    runtime: EdgeRuntime,
    model: str,
    request: Mapping[str, Any],
    estimated_input_tokens: int,
    timeout_s: float,
    on_attempt: Callable[[Lease], None] | None = None,
    *,
    endpoint: wire.Endpoint = wire.DEFAULT_ENDPOINT,
    avoid: frozenset[str] = frozenset(),
    share: Share = UNSHARED,
    relay_as: wire.RelayAs | None = None,
) -> AsyncIterator[ActiveRun]:
    """Acquire a lease (raising DispatchError), start the run on its Node, await its first event.

    A run whose first event is a failure that does not blame the request goes to another
    provider (see the module doc); when none is left, the last failure is raised. The run yielded
    is the one that serves: its lease is final, and a failure from then on is the caller's to
    relay (the stream's last event). The caller iterates ``run.delta_batches()`` inside the
    block; leaving the block ends the run. ``on_attempt`` sees each attempt's lease as it
    starts, so a caller that leaves before the first event still knows where its run was.
    ``endpoint``: the OpenAI endpoint ``request`` is a body of; ``avoid``: providers no attempt
    may go to (a follow-up pinned to the provider holding its state leaves out all the others);
    ``share``: whose request it is, for the pool's fair queuing; ``relay_as``: the id and model
    of the caller's chunks, which the Node then writes as the caller gets them.
    """
    failover = _Failover(
        runtime, model, estimated_input_tokens, timeout_s, on_attempt, avoid, share
    )
    while True:
        lease = await failover.next_lease()
        serving = False
        try:
            async with _run_on(
                runtime, lease, request, endpoint, failover.deadline, relay_as
            ) as run:
                failover.describe(run)
                await run.started()
                serving = True
                yield run
                return
        except RunFailed as failure:
            if not failover.goes_on(failure, answering=serving):
                raise


async def complete_run(
    runtime: EdgeRuntime,
    model: str,
    request: Mapping[str, Any],
    estimated_input_tokens: int,
    timeout_s: float,
    on_attempt: Callable[[Lease], None] | None = None,
    *,
    endpoint: wire.Endpoint = wire.DEFAULT_ENDPOINT,
    avoid: frozenset[str] = frozenset(),
    share: Share = UNSHARED,
) -> CompletedRun:
    """Run the request to its end, for a caller that gets nothing before the end.

    Nothing reaches the caller before the run completes, so a run failing at any point (not
    only before its first event) may go to another provider, as for ``open_run``. Raises
    DispatchError (no lease at all) or RunFailed (the last attempt's failure). ``endpoint``,
    ``avoid`` and ``share`` as for ``open_run``.
    """
    failover = _Failover(
        runtime, model, estimated_input_tokens, timeout_s, on_attempt, avoid, share
    )
    while True:
        lease = await failover.next_lease()
        try:
            async with _run_on(runtime, lease, request, endpoint, failover.deadline) as run:
                failover.describe(run)
                chunks = tuple([chunk async for chunk in run.deltas()])
                return CompletedRun(
                    lease=run.lease,
                    attempts=run.attempts,
                    tried=run.tried,
                    chunks=chunks,
                    response=run.response,
                    usage=run.usage or {},
                    finish_reason=run.finish_reason,
                    finish_sent=run.finish_sent,
                    status=run.status,
                )
        except RunFailed as failure:
            if not failover.goes_on(failure):
                raise


class _Failover:
    """One run's attempts: the deadline they share, where they went, whether to go on."""

    def __init__(
        self,
        runtime: EdgeRuntime,
        model: str,
        estimated_input_tokens: int,
        timeout_s: float,
        on_attempt: Callable[[Lease], None] | None,
        avoid: frozenset[str],
        share: Share,
    ) -> None:
        self._runtime = runtime
        self._avoid = avoid
        self._model = model
        self._tokens = estimated_input_tokens
        self._share = share
        self._on_attempt = on_attempt
        self._loop = asyncio.get_running_loop()
        self.deadline = self._loop.time() + timeout_s
        # Read once per run: a live refresh applies to the runs that start after it.
        self._max_attempts = runtime.config.failover.max_attempts
        self._tried: list[str] = []
        self._last: RunFailed | None = None

    async def next_lease(self) -> Lease:
        """The next attempt's lease, on a provider no attempt has used yet.

        The first attempt raises what the pool raises; a later one that finds no lease (no
        other provider, queue full, deadline) raises the last attempt's failure instead: that
        is what went wrong with the request.
        """
        exclude = self._avoid.union(self._tried)
        try:
            lease = await _acquire_current(
                self._runtime, self._model, self._tokens, self.deadline, exclude, self._share
            )
        except (DispatchError, RunFailed):
            if self._last is None:
                raise
            raise self._last from None
        self._tried.append(lease.provider_id)
        if self._on_attempt is not None:
            self._on_attempt(lease)
        return lease

    def describe(self, run: ActiveRun) -> None:
        run.attempts, run.tried = len(self._tried), tuple(self._tried)

    def goes_on(self, failure: RunFailed, *, answering: bool = False) -> bool:
        """Record an attempt's failure; True when the run should try another provider.

        ``answering``: the run had started answering its caller, so it ends here.
        """
        failure.attempts, failure.tried = len(self._tried), tuple(self._tried)
        self._last = failure
        if answering or not may_go_elsewhere(failure):
            return False
        if len(self._tried) >= self._max_attempts or self._loop.time() >= self.deadline:
            return False
        log.info(
            "run on %s failed before answering (%s): failing over", self._tried[-1], failure.code
        )
        return True


@asynccontextmanager
async def _run_on(
    runtime: EdgeRuntime,
    lease: Lease,
    request: Mapping[str, Any],
    endpoint: wire.Endpoint,
    deadline: float,
    relay_as: wire.RelayAs | None = None,
) -> AsyncIterator[ActiveRun]:
    """One attempt: the run sent to the lease's Node. The lease is released when the block
    ends, after the attempt's outcome went to the provider's passive health."""
    loop = asyncio.get_running_loop()
    run: ActiveRun | None = None
    try:
        session = runtime.nodes.ready(lease.node_id)
        if session is None:
            raise RunFailed(NODE_DISCONNECTED, f"node {lease.node_id} is not connected")
        run = ActiveRun(lease, session, relay_as)
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
            endpoint=endpoint,
            relay_as=relay_as,
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
                _record_outcome(runtime.pool, run)
                run.session.forget_run(run.run_id, unfinished=not run.finished)
                if not run.finished and not run.session.closed:
                    await _cancel_quietly(run)
        finally:
            lease.release()


def _record_outcome(pool: ProviderPool, run: ActiveRun) -> None:
    """What the attempt says about its provider, for passive health."""
    lease, failure = run.lease, run.failure
    if run.status == "ok":
        pool.report_success(lease)
    elif failure is None:
        return  # cancelled: says nothing
    elif failure.code == UPSTREAM_AUTH_FAILED:
        pool.report_failure(lease, UPSTREAM_AUTH_FAILED, trip=True)
    elif _provider_fault(failure):
        pool.report_failure(lease, _passive_reason(failure))
    elif failure.code == wire.ERROR_NODE_DRAINING:
        # Its Node says so soon; until then (or its next session) nothing more goes there.
        pool.set_provider_health(lease.provider_id, False, "node draining")
    elif failure.status is not None and failure.status != RATE_LIMITED:
        pool.report_success(lease)  # the upstream answered: it blamed the request


async def _acquire_current(
    runtime: EdgeRuntime,
    model: str,
    estimated_input_tokens: int,
    deadline: float,
    exclude: frozenset[str],
    share: Share,
) -> Lease:
    """A lease that matches the snapshot in force, obtained before the run's deadline.

    A queued request granted a slot just before a refresh swapped the snapshot wakes up after
    the Node got its new config: its route may be gone, so it asks again.
    """
    pool = runtime.pool
    try:
        async with asyncio.timeout_at(deadline):
            lease = await pool.acquire(model, estimated_input_tokens, exclude, share)
            while not pool.is_current(lease):
                lease.release()
                lease = await pool.acquire(model, estimated_input_tokens, exclude, share)
    except TimeoutError:
        raise RunFailed(DEADLINE_EXCEEDED, "no provider was free before the deadline") from None
    return lease


async def _cancel_quietly(run: ActiveRun) -> None:
    """Tell the Node to stop a run nobody is reading; a Node already gone needs no telling."""
    try:
        await run.session.send(wire.run_cancel(run.run_id))
    except Exception as exc:
        log.debug("run %s: cancel not sent: %s", run.run_id, exc)
