"""The provider pool: in-memory admission by capacity, priority and long-context slots (DESIGN §4).

The pool belongs to one asyncio event loop and must only be touched from it (Django sync code
hops onto the loop first). It holds no locks: every method runs to completion without awaiting,
so the only suspension point is a waiter's future inside ``acquire``.

Waking waiters is event-driven, never polled. A release offers the freed slot to the first
waiter in line (weighted fair order across principals, see ``fair``), across the models that
provider serves, that the slot fits; rarer events (snapshot swap, a Node turning ready, a
provider turning healthy) re-run admission over the affected models.

Passive health (``report_success``/``report_failure``, see ``passive``) reads an injected clock;
a cooldown ends at the first ``acquire`` after it, so no timer is needed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Mapping

from edge.dispatch.errors import (
    ContextTooLong,
    DispatchError,
    EdgeShuttingDown,
    ModelNotFound,
    NoProviderAvailable,
    QueueFull,
    QueueTimeout,
)
from edge.dispatch.fair import BATCH, BATCH_AGING_SHARE, UNSHARED, Share
from edge.dispatch.lease import Lease
from edge.dispatch.passive import HALF_OPEN, OPEN
from edge.dispatch.snapshot import PoolSnapshot
from edge.dispatch.state import NOBODY, GroupRoute, ModelGroup, ProviderState, Waiter
from edge.dispatch.stats import ModelStats, PoolStats, ProviderStats

LAST = (True, float("inf"), 0)  # ranks after every waiter


class ProviderPool:
    """Dispatch over a ``PoolSnapshot``.

    Nodes start not ready (``set_node_ready``); providers start healthy until their Node reports
    otherwise (``set_provider_health``), since a Node only reports health after it is connected
    and a fresh Node's providers would otherwise be unusable until the first report. A Node whose
    session ends starts its next one the same way: what its providers' health was is forgotten.
    ``clock`` (seconds, monotonic) times passive health only.
    """

    def __init__(
        self, snapshot: PoolSnapshot, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._providers: dict[str, ProviderState] = {}
        self._groups: dict[str, ModelGroup] = {}
        self._by_node: dict[str, list[ProviderState]] = {}
        self._ready_nodes: set[str] = set()
        self._unhealthy: set[str] = set()
        self._health_detail: dict[str, str] = {}
        self._cooling: set[ProviderState] = set()  # breakers open, waiting for their cooldown
        self._waiting = 0
        self._seq = itertools.count()
        self._queued: dict[str, int] = {}  # waiters by principal
        self._now: Callable[[], float] = time.monotonic  # the loop's clock, set by each wait
        self._snapshot: PoolSnapshot | None = None  # the one in force
        self.apply_snapshot(snapshot)

    # -- admission ---------------------------------------------------------------------------

    def try_acquire(
        self, model: str, estimated_input_tokens: int, exclude: frozenset[str] = NOBODY
    ) -> Lease | None:
        """A lease if a candidate (not in ``exclude``) is free right now, else None; never waits.

        Raises ``ModelNotFound``. Costs a dict lookup plus a scan of this model's routes only.
        """
        if self._cooling:
            self._end_cooldowns()
        group = self._groups.get(model)
        if group is None:
            raise ModelNotFound(model)
        long = estimated_input_tokens >= self._threshold
        route = group.select(long, exclude)
        if route is None:
            return None
        return self._admit(group, route.state, route.served, long, 0.0)

    def providers_of(self, model: str) -> frozenset[str]:
        """The ids of the providers routed for ``model`` now (usable or not); empty if unknown."""
        group = self._groups.get(model)
        return frozenset(group.served) if group is not None else NOBODY

    async def acquire(
        self,
        model: str,
        estimated_input_tokens: int,
        exclude: frozenset[str] = NOBODY,
        share: Share = UNSHARED,
    ) -> Lease:
        """A lease on a provider for ``model``, waiting in the model's queue if needed.

        ``exclude``: provider ids it must not get (a run failing over leaves out the ones that
        failed it). ``share``: whose request it is, for the order waiters are admitted in
        (``fair``); it plays no part when a slot is free. Raises ``ModelNotFound``,
        ``ContextTooLong``, ``NoProviderAvailable``, ``QueueFull`` or ``QueueTimeout``.
        """
        lease = self.try_acquire(model, estimated_input_tokens, exclude)
        if lease is not None:
            return lease
        return await self._wait(self._groups[model], estimated_input_tokens, exclude, share)

    def queued_by_principal(self) -> dict[str, int]:
        """How many requests wait for a slot, by principal key (absent: none), all models."""
        return dict(self._queued)

    async def _wait(
        self, group: ModelGroup, tokens: int, exclude: frozenset[str], share: Share
    ) -> Lease:
        long = tokens >= self._threshold
        if long and not group.takes_long():
            raise ContextTooLong(group.model_id, tokens, self._threshold)
        serving = group.serving(long, exclude)
        if not serving:
            raise NoProviderAvailable(group.model_id, self._out_reasons(group, long, exclude))
        if group.waiting >= sum(state.spec.max_queue for state in serving):
            victim = self._displaced(group, share.principal)
            if victim is None:
                raise QueueFull(group.model_id)
            self._fail(victim, QueueFull(group.model_id))
        timeout_s = max(state.spec.queue_timeout_s for state in serving)
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._now = loop.time
        principal = share.principal
        waiter = Waiter(
            next(self._seq),
            group,
            long,
            loop.create_future(),
            now,
            exclude,
            principal=principal,
            tags=group.virtual.tag(principal, share.weight, share.charge or tokens),
            batch=share.priority_class == BATCH,
            ages_at=now + timeout_s * BATCH_AGING_SHARE,
        )
        if exclude:
            group.picky.append(waiter)
        else:
            group.queue(long).push(waiter)
        self._waiting += 1
        self._queued[principal] = self._queued.get(principal, 0) + 1
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
                self._leave(waiter, granted=False)
            raise
        if isinstance(outcome, DispatchError):
            raise outcome
        return outcome

    def _displaced(self, group: ModelGroup, principal: str) -> Waiter | None:
        """Who leaves a full queue for a newcomer of ``principal``: the newest waiter of the
        principal with the most waiters, if that is at least two more than the newcomer's own.

        So one heavy principal filling the bound cannot turn the others away; the bound holds.
        Only runs when the queue is full: O(waiters of the model).
        """
        newest: dict[str, Waiter] = {}
        counts: dict[str, int] = {}
        for waiter in (*group.normal_queue, *group.long_queue, *self._picky(group)):
            key = waiter.principal
            counts[key] = counts.get(key, 0) + 1
            if key not in newest or waiter.seq > newest[key].seq:
                newest[key] = waiter
        if not counts:
            return None
        heaviest = max(counts, key=lambda key: (counts[key], newest[key].seq))
        if counts[heaviest] < counts.get(principal, 0) + 2:
            return None
        return newest[heaviest]

    def _admit(
        self, group: ModelGroup, state: ProviderState, served: str, long: bool, queued_ms: float
    ) -> Lease:
        state.in_flight += 1
        if long:
            state.long_in_flight += 1
        lease = Lease(
            state, group.model_id, served, long, queued_ms, lambda: self._release(state, long)
        )
        if state.breaker.state == HALF_OPEN:
            state.breaker.trial = lease  # half-open: this run decides, nothing else is admitted
        return lease

    def _grant(self, waiter: Waiter, state: ProviderState) -> None:
        self._leave(waiter, granted=True)
        loop = waiter.future.get_loop()
        queued_ms = (loop.time() - waiter.enqueued_at) * 1000.0
        served = waiter.group.served[state.id]
        waiter.future.set_result(self._admit(waiter.group, state, served, waiter.long, queued_ms))

    def _leave(self, waiter: Waiter, *, granted: bool) -> None:
        waiter.pending = False
        if waiter.timer is not None:
            waiter.timer.cancel()
        if waiter.exclude:
            waiter.group.picky.remove(waiter)
        else:
            waiter.group.queue(waiter.long).discard()
        self._waiting -= 1
        principal = waiter.principal
        left = self._queued[principal] - 1
        if left:
            self._queued[principal] = left
        else:
            del self._queued[principal]
        virtual = waiter.group.virtual
        if granted:
            virtual.granted(waiter.tag)
        else:
            virtual.withdrawn(principal, waiter.tag, waiter.finish)

    def _fail(self, waiter: Waiter, error: DispatchError) -> None:
        self._leave(waiter, granted=False)
        if not waiter.future.done():
            waiter.future.set_result(error)

    def _expire(self, waiter: Waiter, timeout_s: float) -> None:
        if waiter.pending:
            self._fail(waiter, QueueTimeout(waiter.group.model_id, timeout_s))

    def _head(self, group: ModelGroup, long: bool, now: float) -> Waiter | None:
        """The first waiter in line still able to take a slot; drops ones whose task was
        cancelled."""
        queue = group.queue(long)
        waiter = queue.head(now)
        while waiter is not None and waiter.future.done():
            self._leave(waiter, granted=False)
            waiter = queue.head(now)
        return waiter

    def _picky(self, group: ModelGroup) -> list[Waiter]:
        """The group's waiters that exclude providers, still able to take a slot (a copy)."""
        for waiter in [w for w in group.picky if w.future.done()]:
            self._leave(waiter, granted=False)
        return list(group.picky)

    # -- wake-ups ----------------------------------------------------------------------------

    def _release(self, state: ProviderState, long: bool) -> None:
        state.in_flight -= 1
        if long:
            state.long_in_flight -= 1
        trial = state.breaker.trial
        if trial is not None and trial.released:
            state.breaker.trial = None  # ended without a verdict (e.g. cancelled): try again
        if not state.listed:
            if state.idle and self._providers.get(state.id) is state:
                del self._providers[state.id]
            return
        if self._waiting:
            self._offer(state)

    def _offer(self, state: ProviderState) -> None:
        """Give the provider's free slots to the first waiters in line (``Waiter.rank``),
        across its models, that fit."""
        now = self._now()
        while state.has_slot(False):
            long_fits = state.has_slot(True)
            first: Waiter | None = None
            first_rank = LAST
            for group in state.groups:
                origin = group.virtual.now
                for long in (False, True) if long_fits else (False,):
                    waiter = self._head(group, long, now)
                    if waiter is not None and (rank := waiter.rank(now, origin)) < first_rank:
                        first, first_rank = waiter, rank
                if group.picky:
                    for waiter in self._picky(group):
                        if (
                            (long_fits or not waiter.long)
                            and state.id not in waiter.exclude
                            and (rank := waiter.rank(now, origin)) < first_rank
                        ):
                            first, first_rank = waiter, rank
            if first is None:
                return
            self._grant(first, state)

    def _pump(self, groups: Iterable[ModelGroup]) -> None:
        """Admit waiters of these models, first in line first, each to its best free candidate.

        Waiters of one model and class share their candidates, so once one of them finds
        nothing free, the rest of that queue is skipped; only admissions happen meanwhile.
        Waiters that exclude providers are each considered on their own.
        """
        now = self._now()
        # Ranks count from each model's clock as it is now, so the heap stays ordered while
        # grants move the clocks on (within a model the order is the tags' either way).
        origins: dict[ModelGroup, float] = {}
        heads: list[tuple[tuple[bool, float, int], Waiter]] = []
        for group in groups:
            origin = origins[group] = group.virtual.now
            for long in (False, True):
                waiter = self._head(group, long, now)
                if waiter is not None:
                    heads.append((waiter.rank(now, origin), waiter))
            if group.picky:
                heads.extend((waiter.rank(now, origin), waiter) for waiter in self._picky(group))
        heapq.heapify(heads)
        while heads:
            _, waiter = heapq.heappop(heads)
            route = waiter.group.select(waiter.long, waiter.exclude)
            if route is None:
                continue
            self._grant(waiter, route.state)
            if waiter.exclude:
                continue
            following = self._head(waiter.group, waiter.long, now)
            if following is not None:
                heapq.heappush(heads, (following.rank(now, origins[following.group]), following))

    def _fail_unservable(self, groups: Iterable[ModelGroup]) -> None:
        """Waiters that no provider would serve any more fail now instead of at their timeout."""
        for group in groups:
            for long in (False, True):
                queue = group.queue(long)
                if queue.live and not group.serving(long):
                    error = NoProviderAvailable(group.model_id, self._out_reasons(group, long))
                    for waiter in list(queue):
                        self._fail(waiter, error)
            for waiter in self._picky(group) if group.picky else ():
                if not group.serving(waiter.long, waiter.exclude):
                    reasons = self._out_reasons(group, waiter.long, waiter.exclude)
                    self._fail(waiter, NoProviderAvailable(group.model_id, reasons))

    # -- live inputs ---------------------------------------------------------------------------

    def apply_snapshot(self, snapshot: PoolSnapshot) -> None:
        """Swap in a new snapshot. Counters carry over by provider id; running work is kept.

        Waiters are re-evaluated: a vanished model fails ``model_not_found``, a model no provider
        would serve fails ``no_provider_available``, and free slots are handed out. A waiter
        keeps its context class and deadline.

        The work follows what changed: a provider or model whose spec is the object already in
        force is left as it is, and a snapshot built over the one in force
        (``PoolSnapshot.sharing``) has only its delta's providers visited.
        """
        delta = snapshot.delta_over(self._snapshot)
        if delta is None:
            providers: dict[str, ProviderState] = {}
            specs, gone = snapshot.providers, list(self._providers.items())
        else:
            providers = dict(self._providers)
            specs = delta.providers
            gone = [(pid, self._providers[pid]) for pid in delta.dropped_provider_ids]
        # Of the new or changed specs, the ones whose place in their models' tiers may have moved
        # (new, back, or of another priority) and whose usability may have (also enabled or
        # not): a change of capacity alone needs neither looked at again.
        retiered: dict[str, ProviderState] = {}
        reassessed: list[ProviderState] = []
        for spec in specs:
            state = self._providers.get(spec.id)
            if state is not None and state.spec is spec and state.listed:
                providers[spec.id] = state
                continue
            if state is not None and state.spec.node_id != spec.node_id:
                # The id moved to another Node: its runs there are not this Node's, nor its health.
                self._orphan(state)
                self._forget_health(spec.id)
                state = None
            if state is None:
                state = ProviderState(spec)
                self._by_node.setdefault(spec.node_id, []).append(state)
                retiered[spec.id] = state
                reassessed.append(state)
            else:
                old = state.spec
                if not state.listed:  # back in the snapshot before its last lease was released
                    self._by_node.setdefault(spec.node_id, []).append(state)
                    retiered[spec.id] = state
                    reassessed.append(state)
                else:
                    if old.priority != spec.priority:
                        retiered[spec.id] = state
                    if old.enabled != spec.enabled:
                        reassessed.append(state)
                state.adopt(spec)
            providers[spec.id] = state
        for provider_id, state in gone:
            if providers.get(provider_id) is not state and state.listed:
                self._orphan(state)
            if delta is not None and providers.get(provider_id) is state:
                # Dropped from the snapshot: orphaned, and kept only while leases hold it.
                self._orphan(state)
                if state.idle:
                    del providers[provider_id]
            elif provider_id not in providers and not state.idle:
                providers[provider_id] = state  # dropped once its last lease is released

        groups: dict[str, ModelGroup] = {}
        for model in snapshot.models:
            group = self._groups.get(model.id)
            if group is None:
                group = ModelGroup(model.id)
            elif group.spec is model and not _routes_touched(model.routes, retiered):
                groups[model.id] = group
                continue
            for route in group.routes:
                if group in route.state.groups:
                    route.state.groups.remove(group)
            routes = [GroupRoute(providers[pid], served) for pid, served in model.routes.items()]
            group.set_routes(routes, model)
            for route in routes:
                route.state.groups.append(group)
            groups[model.id] = group
        vanished = [g for model_id, g in self._groups.items() if model_id not in groups]
        for group in vanished:
            for route in group.routes:
                if group in route.state.groups:
                    route.state.groups.remove(group)

        self._snapshot = snapshot
        self._threshold = snapshot.long_context_threshold_tokens
        self._passive = snapshot.passive_health
        self._providers = providers
        self._groups = groups
        for state in reassessed:
            self._refresh_usable(state)

        for group in vanished:
            for waiter in [*group.normal_queue, *group.long_queue, *self._picky(group)]:
                self._fail(waiter, ModelNotFound(group.model_id))
        if self._waiting:
            waiting = [g for g in groups.values() if g.waiting]
            self._fail_unservable(waiting)
            self._pump(waiting)

    def fail_waiting(self) -> None:
        """Answer every request still waiting for a slot: the Edge is stopping."""
        for group in self._groups.values():
            for waiter in [*group.normal_queue, *group.long_queue, *self._picky(group)]:
                self._fail(waiter, EdgeShuttingDown(group.model_id))

    def _orphan(self, state: ProviderState) -> None:
        """A provider no longer in the snapshot: no admissions; its leases still release here."""
        state.listed = False
        state.usable = False
        state.groups = []
        node_states = self._by_node.get(state.spec.node_id, [])
        if state in node_states:
            node_states.remove(state)

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

        Leases already held on a gone Node stay counted until their holders release them. A
        gone Node's providers are healthy again until its next session reports otherwise: what
        the last session said (a drain's "unhealthy", a breaker) is about that session.
        """
        states = self._by_node.get(node_id, [])
        if not ready:
            for state in states:
                self._forget_health(state.id)
                state.breaker.reset()
                self._cooling.discard(state)
        if ready == (node_id in self._ready_nodes):
            return
        if ready:
            self._ready_nodes.add(node_id)
        else:
            self._ready_nodes.discard(node_id)
        for state in states:
            self._refresh_usable(state)
        self._reevaluate(states, gained=ready)

    def set_provider_health(self, provider_id: str, healthy: bool, detail: str = "") -> None:
        """The provider's health as last reported by its Node (``detail``: why, e.g. a failing
        probe's reason, shown in ``stats``); unknown ids are remembered."""
        self._health_detail[provider_id] = detail
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

    def _forget_health(self, provider_id: str) -> None:
        self._unhealthy.discard(provider_id)
        self._health_detail.pop(provider_id, None)

    def _refresh_usable(self, state: ProviderState) -> None:
        spec = state.spec
        state.usable = (
            state.listed
            and spec.enabled
            and spec.id not in self._unhealthy
            and spec.node_id in self._ready_nodes
            and state.breaker.state != OPEN
        )

    def _out_reasons(
        self, group: ModelGroup, long: bool, exclude: frozenset[str] = NOBODY
    ) -> tuple[tuple[str, str], ...]:
        """Why each provider of the model would not serve this request (for the error)."""
        reasons = []
        for route in group.routes:
            state = route.state
            if state.id in exclude:
                why = "failed this request"
            elif not state.spec.enabled:
                why = "disabled"
            elif state.spec.node_id not in self._ready_nodes:
                why = "node not connected"
            elif state.breaker.state == OPEN:
                why = state.breaker.reason
            elif state.id in self._unhealthy:
                why = "unhealthy"
            elif long and state.long_slots == 0:
                why = "takes no long requests"
            else:
                continue
            reasons.append((state.id, why))
        return tuple(reasons)

    def _reevaluate(self, states: list[ProviderState], gained: bool) -> None:
        if not self._waiting:
            return
        groups = list({id(g): g for state in states for g in state.groups}.values())
        if gained:
            self._pump(groups)
        else:
            self._fail_unservable(groups)

    # -- passive health ------------------------------------------------------------------------

    def report_success(self, lease: Lease) -> None:
        """The lease's run went through (its upstream answered): a half-open provider closes."""
        state = lease.provider_state
        closed = state.breaker.trial is lease and state.breaker.succeed()
        if closed and state.listed and self._waiting:
            self._offer(state)

    def report_failure(self, lease: Lease, reason: str, *, trip: bool = False) -> None:
        """The lease's run failed because of its provider (``reason``: a short code).

        ``passive_health.failures`` of them within ``window_s`` — or one ``trip`` — take the
        provider out for ``cooldown_s``. Half-open, only the trial run's outcome counts.
        """
        state = lease.provider_state
        breaker = state.breaker
        if breaker.state == HALF_OPEN and breaker.trial is not lease:
            return
        if breaker.fail(self._clock(), reason, self._passive, trip=trip):
            self._cooling.add(state)
            if state.listed:
                self._refresh_usable(state)
                self._reevaluate([state], gained=False)

    def _end_cooldowns(self) -> None:
        now = self._clock()
        cooled = [state for state in self._cooling if state.breaker.cool(now, self._passive)]
        if not cooled:
            return
        self._cooling.difference_update(cooled)
        listed = [state for state in cooled if state.listed]
        for state in listed:
            self._refresh_usable(state)
        self._reevaluate(listed, gained=True)

    # -- figures -------------------------------------------------------------------------------

    def stats(self) -> PoolStats:
        """Read only: a breaker whose cooldown is over shows half-open, as the next acquire
        will find it."""
        now, passive = self._clock(), self._passive
        unhealthy, ready_nodes, details = self._unhealthy, self._ready_nodes, self._health_detail
        providers = {}
        for provider_id, state in self._providers.items():
            spec, breaker = state.spec, state.breaker
            shown = breaker.shown(now, passive)
            providers[provider_id] = ProviderStats(
                provider_id,
                spec.node_id,
                state.in_flight,
                state.long_in_flight,
                state.capacity,
                state.long_slots,
                provider_id not in unhealthy and shown != OPEN,
                details.get(provider_id, ""),
                shown,
                breaker.reason,
                breaker.recent_failures(now, passive),
                breaker.reopens_in(now, passive),
                spec.enabled,
                spec.node_id in ready_nodes,
                state.listed,
            )
        models = {}
        for model_id, group in self._groups.items():
            picky = self._picky(group)
            oldest_wait_s = 0.0
            if group.waiting:
                # Fair order is not arrival order: the oldest waiter may sit anywhere.
                waiters = (*group.normal_queue, *group.long_queue, *picky)
                oldest = min(waiters, key=lambda w: w.seq)
                oldest_wait_s = oldest.future.get_loop().time() - oldest.enqueued_at
            models[model_id] = ModelStats(
                model_id=model_id,
                queue_depth=group.waiting,
                long_queue_depth=group.long_queue.live + sum(w.long for w in picky),
                oldest_wait_s=oldest_wait_s,
            )
        return PoolStats(providers=providers, models=models)


def _routes_touched(routes: Mapping[str, str], touched: Mapping[str, ProviderState]) -> bool:
    """Whether a model's routes reach one of these providers (whose tier may have moved)."""
    if len(touched) < len(routes):
        return any(provider_id in routes for provider_id in touched)
    return any(provider_id in touched for provider_id in routes)
