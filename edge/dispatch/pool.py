"""The provider pool: in-memory admission by capacity, priority and long-context slots (DESIGN §4).

The pool belongs to one asyncio event loop and must only be touched from it (Django sync code
hops onto the loop first). It holds no locks: every method runs to completion without awaiting,
so the only suspension point is a waiter's future inside ``acquire``.

Waking waiters is event-driven, never polled. A release offers the freed slot to the oldest
waiter, across the models that provider serves, that the slot fits; rarer events (snapshot swap,
a Node turning ready, a provider turning healthy) re-run admission over the affected models.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Iterable

from edge.dispatch.errors import (
    DispatchError,
    ModelNotFound,
    NoProviderAvailable,
    QueueFull,
    QueueTimeout,
)
from edge.dispatch.lease import Lease
from edge.dispatch.snapshot import PoolSnapshot
from edge.dispatch.state import GroupRoute, ModelGroup, ProviderState, Waiter
from edge.dispatch.stats import ModelStats, PoolStats, ProviderStats


class ProviderPool:
    """Dispatch over a ``PoolSnapshot``.

    Nodes start not ready (``set_node_ready``); providers start healthy until their Node reports
    otherwise (``set_provider_health``), since a Node only reports health after it is connected
    and a fresh Node's providers would otherwise be unusable until the first report.
    """

    def __init__(self, snapshot: PoolSnapshot) -> None:
        self._providers: dict[str, ProviderState] = {}
        self._groups: dict[str, ModelGroup] = {}
        self._by_node: dict[str, list[ProviderState]] = {}
        self._ready_nodes: set[str] = set()
        self._unhealthy: set[str] = set()
        self._waiting = 0
        self._seq = itertools.count()
        self.apply_snapshot(snapshot)

    # -- admission ---------------------------------------------------------------------------

    def try_acquire(self, model: str, estimated_input_tokens: int) -> Lease | None:
        """A lease if a candidate is free right now, else None; never waits.

        Raises ``ModelNotFound``. Costs a dict lookup plus a scan of this model's routes only.
        """
        group = self._groups.get(model)
        if group is None:
            raise ModelNotFound(model)
        long = estimated_input_tokens >= self._threshold
        route = group.select(long)
        if route is None:
            return None
        return self._admit(group, route.state, route.served, long, 0.0)

    async def acquire(self, model: str, estimated_input_tokens: int) -> Lease:
        """A lease on a provider for ``model``, waiting in the model's FIFO queue if needed.

        Raises ``ModelNotFound``, ``NoProviderAvailable``, ``QueueFull`` or ``QueueTimeout``.
        """
        lease = self.try_acquire(model, estimated_input_tokens)
        if lease is not None:
            return lease
        return await self._wait(self._groups[model], estimated_input_tokens >= self._threshold)

    async def _wait(self, group: ModelGroup, long: bool) -> Lease:
        serving = group.serving(long)
        if not serving:
            raise NoProviderAvailable(group.model_id)
        if group.waiting >= sum(state.spec.max_queue for state in serving):
            raise QueueFull(group.model_id)
        timeout_s = max(state.spec.queue_timeout_s for state in serving)
        loop = asyncio.get_running_loop()
        waiter = Waiter(next(self._seq), group, long, loop.create_future(), loop.time())
        group.queue(long).push(waiter)
        self._waiting += 1
        waiter.timer = loop.call_later(timeout_s, self._expire, waiter, timeout_s)
        try:
            # The future carries a Lease or a DispatchError as its *result*, so a waiter that
            # is failed and cancelled at once never logs "exception was never retrieved".
            outcome = await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled():
                granted = future.result()
                if isinstance(granted, Lease):
                    # Granted in the same loop turn as the cancel: hand the slot back.
                    granted.release()
            elif waiter.pending:
                self._leave(waiter)
            raise
        if isinstance(outcome, DispatchError):
            raise outcome
        return outcome

    def _admit(
        self, group: ModelGroup, state: ProviderState, served: str, long: bool, queued_ms: float
    ) -> Lease:
        state.in_flight += 1
        if long:
            state.long_in_flight += 1
        return Lease(
            state, group.model_id, served, long, queued_ms, lambda: self._release(state, long)
        )

    def _grant(self, waiter: Waiter, state: ProviderState) -> None:
        self._leave(waiter)
        loop = waiter.future.get_loop()
        queued_ms = (loop.time() - waiter.enqueued_at) * 1000.0
        served = waiter.group.served[state.id]
        waiter.future.set_result(self._admit(waiter.group, state, served, waiter.long, queued_ms))

    def _leave(self, waiter: Waiter) -> None:
        waiter.pending = False
        if waiter.timer is not None:
            waiter.timer.cancel()
        waiter.group.queue(waiter.long).discard()
        self._waiting -= 1

    def _fail(self, waiter: Waiter, error: DispatchError) -> None:
        self._leave(waiter)
        if not waiter.future.done():
            waiter.future.set_result(error)

    def _expire(self, waiter: Waiter, timeout_s: float) -> None:
        if waiter.pending:
            self._fail(waiter, QueueTimeout(waiter.group.model_id, timeout_s))

    def _head(self, group: ModelGroup, long: bool) -> Waiter | None:
        """The oldest waiter still able to take a slot; drops ones whose task was cancelled."""
        queue = group.queue(long)
        waiter = queue.head()
        while waiter is not None and waiter.future.done():
            self._leave(waiter)
            waiter = queue.head()
        return waiter

    # -- wake-ups ----------------------------------------------------------------------------

    def _release(self, state: ProviderState, long: bool) -> None:
        state.in_flight -= 1
        if long:
            state.long_in_flight -= 1
        if not state.listed:
            if state.idle and self._providers.get(state.id) is state:
                del self._providers[state.id]
            return
        if self._waiting:
            self._offer(state)

    def _offer(self, state: ProviderState) -> None:
        """Give the provider's free slots to the oldest waiters, across its models, that fit."""
        while state.has_slot(False):
            long_fits = state.has_slot(True)
            oldest: Waiter | None = None
            for group in state.groups:
                for long in (False, True) if long_fits else (False,):
                    waiter = self._head(group, long)
                    if waiter is not None and (oldest is None or waiter.seq < oldest.seq):
                        oldest = waiter
            if oldest is None:
                return
            self._grant(oldest, state)

    def _pump(self, groups: Iterable[ModelGroup]) -> None:
        """Admit waiters of these models, oldest first, each to its best free candidate.

        Waiters of one model and class share their candidates, so once one of them finds
        nothing free, the rest of that queue is skipped; only admissions happen meanwhile.
        """
        heads: list[tuple[int, Waiter]] = []
        for group in groups:
            for long in (False, True):
                waiter = self._head(group, long)
                if waiter is not None:
                    heads.append((waiter.seq, waiter))
        heapq.heapify(heads)
        while heads:
            _, waiter = heapq.heappop(heads)
            route = waiter.group.select(waiter.long)
            if route is None:
                continue
            self._grant(waiter, route.state)
            following = self._head(waiter.group, waiter.long)
            if following is not None:
                heapq.heappush(heads, (following.seq, following))

    def _fail_unservable(self, groups: Iterable[ModelGroup]) -> None:
        """Waiters that no provider would serve any more fail now instead of at their timeout."""
        for group in groups:
            for long in (False, True):
                queue = group.queue(long)
                if queue.live and not group.serving(long):
                    for waiter in list(queue):
                        self._fail(waiter, NoProviderAvailable(group.model_id))

    # -- live inputs ---------------------------------------------------------------------------

    def apply_snapshot(self, snapshot: PoolSnapshot) -> None:
        """Swap in a new snapshot. Counters carry over by provider id; running work is kept.

        Waiters are re-evaluated: a vanished model fails ``model_not_found``, a model no provider
        would serve fails ``no_provider_available``, and free slots are handed out. A waiter
        keeps its context class and deadline.
        """
        providers: dict[str, ProviderState] = {}
        for spec in snapshot.providers:
            state = self._providers.get(spec.id)
            if state is not None and state.spec.node_id != spec.node_id:
                # The id moved to another Node: its runs there are not this Node's, nor its health.
                self._orphan(state)
                self._unhealthy.discard(spec.id)
                state = None
            if state is None:
                state = ProviderState(spec)
            else:
                state.adopt(spec)
            state.groups = []
            providers[spec.id] = state
        for provider_id, state in self._providers.items():
            if provider_id not in providers:
                self._orphan(state)
                if not state.idle:
                    providers[provider_id] = state  # dropped once its last lease is released

        groups: dict[str, ModelGroup] = {}
        for model in snapshot.models:
            group = self._groups.get(model.id) or ModelGroup(model.id)
            routes = [GroupRoute(providers[pid], served) for pid, served in model.routes.items()]
            group.set_routes(routes)
            for route in routes:
                route.state.groups.append(group)
            groups[model.id] = group
        vanished = [g for model_id, g in self._groups.items() if model_id not in groups]

        self._threshold = snapshot.long_context_threshold_tokens
        self._providers = providers
        self._groups = groups
        self._by_node = {}
        for state in providers.values():
            if state.listed:
                self._by_node.setdefault(state.spec.node_id, []).append(state)
                self._refresh_usable(state)

        for group in vanished:
            for long in (False, True):
                for waiter in list(group.queue(long)):
                    self._fail(waiter, ModelNotFound(group.model_id))
        if self._waiting:
            waiting = [g for g in groups.values() if g.waiting]
            self._fail_unservable(waiting)
            self._pump(waiting)

    @staticmethod
    def _orphan(state: ProviderState) -> None:
        """A provider no longer in the snapshot: no admissions; its leases still release here."""
        state.listed = False
        state.usable = False
        state.groups = []

    def is_current(self, lease: Lease) -> bool:
        """Whether ``lease`` still matches the snapshot in force.

        A waiter granted a slot just before a swap wakes up after it; its route may be gone.
        """
        group = self._groups.get(lease.model)
        return (
            group is not None
            and self._providers.get(lease.provider_id) is lease.provider_state
            and lease.provider_state.listed
            and group.served.get(lease.provider_id) == lease.served_model
        )

    def set_node_ready(self, node_id: str, ready: bool) -> None:
        """A Node acked its config (ready) or its session ended (not ready / gone).

        Leases already held on a gone Node stay counted until their holders release them.
        """
        if ready == (node_id in self._ready_nodes):
            return
        if ready:
            self._ready_nodes.add(node_id)
        else:
            self._ready_nodes.discard(node_id)
        states = self._by_node.get(node_id, [])
        for state in states:
            self._refresh_usable(state)
        self._reevaluate(states, gained=ready)

    def set_provider_health(self, provider_id: str, healthy: bool) -> None:
        """The provider's health as last reported by its Node; unknown ids are remembered."""
        if healthy == (provider_id not in self._unhealthy):
            return
        if healthy:
            self._unhealthy.discard(provider_id)
        else:
            self._unhealthy.add(provider_id)
        state = self._providers.get(provider_id)
        if state is not None and state.listed:
            self._refresh_usable(state)
            self._reevaluate([state], gained=healthy)

    def _refresh_usable(self, state: ProviderState) -> None:
        spec = state.spec
        state.usable = (
            state.listed
            and spec.enabled
            and spec.id not in self._unhealthy
            and spec.node_id in self._ready_nodes
        )

    def _reevaluate(self, states: list[ProviderState], gained: bool) -> None:
        if not self._waiting:
            return
        groups = list({id(g): g for state in states for g in state.groups}.values())
        if gained:
            self._pump(groups)
        else:
            self._fail_unservable(groups)

    # -- figures -------------------------------------------------------------------------------

    def stats(self) -> PoolStats:
        providers = {
            provider_id: ProviderStats(
                provider_id=provider_id,
                node_id=state.spec.node_id,
                in_flight=state.in_flight,
                long_in_flight=state.long_in_flight,
                capacity=state.capacity,
                long_context_slots=state.long_slots,
                healthy=provider_id not in self._unhealthy,
                enabled=state.spec.enabled,
                node_ready=state.spec.node_id in self._ready_nodes,
                listed=state.listed,
            )
            for provider_id, state in self._providers.items()
        }
        models = {}
        for model_id, group in self._groups.items():
            oldest = min(
                (w for w in (group.normal_queue.head(), group.long_queue.head()) if w),
                key=lambda w: w.seq,
                default=None,
            )
            oldest_wait_s = 0.0
            if oldest is not None:
                oldest_wait_s = oldest.future.get_loop().time() - oldest.enqueued_at
            models[model_id] = ModelStats(
                model_id=model_id,
                queue_depth=group.waiting,
                long_queue_depth=group.long_queue.live,
                oldest_wait_s=oldest_wait_s,
            )
        return PoolStats(providers=providers, models=models)
