"""The pool's mutable bookkeeping: provider counters, model groups and their wait queues.

Only ``ProviderPool`` changes these. They are slotted classes rather than dataclasses because the
acquire path reads their attributes on every request.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Iterator

from edge.dispatch.fair import VirtualClock
from edge.dispatch.passive import Breaker
from edge.dispatch.snapshot import ModelSpec, ProviderSpec

NOBODY: frozenset[str] = frozenset()  # the usual exclusion: none

# A queue is rebuilt once it holds more abandoned entries than this and than live ones, so
# cancellations in the middle cost O(log n) amortized and never grow the heaps without bound.
COMPACT_AFTER_DEAD = 32


class ProviderState:
    """Counters and admission inputs of one provider id. Outlives snapshot swaps (DESIGN §4.6)."""

    __slots__ = (
        "breaker",
        "capacity",
        "groups",
        "id",
        "in_flight",
        "listed",
        "long_in_flight",
        "long_slots",
        "spec",
        "usable",
    )

    def __init__(self, spec: ProviderSpec) -> None:
        self.id = spec.id
        self.in_flight = 0
        self.long_in_flight = 0
        # Everything but the counters: listed in the snapshot, enabled, healthy (as its Node
        # reports it, and its breaker not open), on a ready node.
        self.usable = False
        self.groups: list[ModelGroup] = []
        self.breaker = Breaker()
        self.adopt(spec)

    def adopt(self, spec: ProviderSpec) -> None:
        self.spec = spec
        self.listed = True
        self.capacity = spec.capacity
        self.long_slots = spec.long_context_slots

    def has_slot(self, long: bool) -> bool:
        """A free slot right now, for a request of that class (half-open: one trial run at most)."""
        if not self.usable or self.in_flight >= self.capacity or self.breaker.trial is not None:
            return False
        return not long or self.long_slots is None or self.long_in_flight < self.long_slots

    def would_serve(self, long: bool) -> bool:
        """Would take the request once a slot frees up: usable, and long slots not set to 0."""
        return self.usable and (not long or self.long_slots != 0)

    @property
    def idle(self) -> bool:
        return self.in_flight == 0 and self.long_in_flight == 0


class GroupRoute:
    """A model group's way to one provider, under the name that provider serves it as."""

    __slots__ = ("served", "state")

    def __init__(self, state: ProviderState, served: str) -> None:
        self.state = state
        self.served = served


class Tier:
    """Routes sharing one priority; ``next`` is where the round-robin scan starts."""

    __slots__ = ("next", "routes")

    def __init__(self, routes: list[GroupRoute]) -> None:
        self.routes = routes
        self.next = 0


class Waiter:
    """A request waiting for a slot; ``exclude``: providers it must not get (they failed it).

    ``tag``/``finish``: its fair-queuing tags (``fair.VirtualClock``); waiters order by
    ``(tag, seq)``. ``batch``: of the batch class, which ages at ``ages_at`` (loop time).
    """

    __slots__ = (
        "ages_at",
        "batch",
        "enqueued_at",
        "exclude",
        "finish",
        "future",
        "group",
        "long",
        "pending",
        "principal",
        "seq",
        "tag",
        "timer",
    )

    def __init__(
        self,
        seq: int,
        group: ModelGroup,
        long: bool,
        future: asyncio.Future,
        now: float,
        exclude: frozenset[str] = NOBODY,
        *,
        principal: str = "",
        tags: tuple[float, float] = (0.0, 0.0),
        batch: bool = False,
        ages_at: float = 0.0,
    ) -> None:
        self.seq = seq
        self.group = group
        self.long = long
        self.future = future
        self.enqueued_at = now
        self.exclude = exclude
        self.principal = principal
        self.tag, self.finish = tags
        self.batch = batch
        self.ages_at = ages_at
        self.pending = True
        self.timer: asyncio.TimerHandle | None = None

    def __lt__(self, other: Waiter) -> bool:
        return self.tag < other.tag or (self.tag == other.tag and self.seq < other.seq)

    def rank(self, now: float, origin: float) -> tuple[bool, float, int]:
        """Smaller goes first: interactive (or aged batch), then the fair tag, then arrival.

        The tag counts from ``origin``, its model's virtual time, so waiters of models sharing
        a provider compare by how far ahead of their own model's clock they are."""
        return (self.batch and now < self.ages_at, self.tag - origin, self.seq)


class WaitQueue:
    """Waiters of one model and context class, in fair order, with lazy deletion.

    Two heaps by ``(tag, seq)``, interactive and batch; ``head(now)`` is the interactive head
    unless the batch head has aged and ranks before it (or no interactive waiter is left). A
    waiter that leaves is only flagged (``pending``). Invariant: each heap's top, if any, is
    pending — so reading the head is O(1).
    """

    __slots__ = ("_batch", "_dead", "_interactive", "live")

    def __init__(self) -> None:
        self._interactive: list[Waiter] = []
        self._batch: list[Waiter] = []
        self._dead = 0
        self.live = 0

    def push(self, waiter: Waiter) -> None:
        heapq.heappush(self._batch if waiter.batch else self._interactive, waiter)
        self.live += 1

    def head(self, now: float) -> Waiter | None:
        first = self._interactive[0] if self._interactive else None
        if not self._batch:
            return first
        batch = self._batch[0]
        if first is None or (now >= batch.ages_at and batch < first):
            return batch
        return first

    def discard(self) -> None:
        """Account for a waiter that just stopped being pending."""
        self.live -= 1
        self._dead += 1
        for entries in (self._interactive, self._batch):
            while entries and not entries[0].pending:
                heapq.heappop(entries)
                self._dead -= 1
        if self._dead > COMPACT_AFTER_DEAD and self._dead > self.live:
            for entries in (self._interactive, self._batch):
                entries[:] = [w for w in entries if w.pending]
                heapq.heapify(entries)
            self._dead = 0

    def __iter__(self) -> Iterator[Waiter]:
        return (w for w in (*self._interactive, *self._batch) if w.pending)


class ModelGroup:
    """One model's routes in priority tiers, and its waiters split by context class.

    The split lets a freed normal slot reach a normal waiter even when a long waiter that cannot
    take it (long slots full) ranks first; order across the two is kept by ``Waiter.rank``.
    Waiters that exclude providers (a run failing over) do not share their candidates with the
    rest, so they wait apart, in ``picky`` (few at a time), each considered on its own.
    """

    __slots__ = (
        "long_queue",
        "model_id",
        "normal_queue",
        "picky",
        "routes",
        "served",
        "spec",
        "tiers",
        "virtual",
    )

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.spec: ModelSpec | None = None  # what the routes were last built from
        self.normal_queue = WaitQueue()
        self.long_queue = WaitQueue()
        self.picky: list[Waiter] = []
        self.routes: list[GroupRoute] = []
        self.served: dict[str, str] = {}
        self.tiers: list[Tier] = []
        # Fair queuing's clock: a principal's share is counted per model, so heavy use of one
        # model costs it nothing on another.
        self.virtual = VirtualClock()

    def set_routes(self, routes: list[GroupRoute], spec: ModelSpec) -> None:
        self.spec = spec
        # Where each tier's round-robin would go next, so a swap does not restart the rotation.
        upcoming = {tier.routes[tier.next].state.id for tier in self.tiers}
        routes = sorted(routes, key=lambda r: (r.state.spec.priority, r.state.id))
        self.routes = routes
        self.served = {r.state.id: r.served for r in routes}
        tiers: list[Tier] = []
        for route in routes:
            if tiers and tiers[-1].routes[0].state.spec.priority == route.state.spec.priority:
                tiers[-1].routes.append(route)
            else:
                tiers.append(Tier([route]))
        for tier in tiers:
            tier.next = next(
                (i for i, route in enumerate(tier.routes) if route.state.id in upcoming), 0
            )
        self.tiers = tiers

    def queue(self, long: bool) -> WaitQueue:
        return self.long_queue if long else self.normal_queue

    @property
    def waiting(self) -> int:
        return self.normal_queue.live + self.long_queue.live + len(self.picky)

    def select(self, long: bool, exclude: frozenset[str] = NOBODY) -> GroupRoute | None:
        """The free route to use: lowest priority tier first, round-robin inside a tier."""
        for tier in self.tiers:
            routes = tier.routes
            count = len(routes)
            start = tier.next
            for offset in range(count):
                index = start + offset
                if index >= count:
                    index -= count
                route = routes[index]
                if route.state.has_slot(long) and not (exclude and route.state.id in exclude):
                    tier.next = index + 1 if index + 1 < count else 0
                    return route
        return None

    def serving(self, long: bool, exclude: frozenset[str] = NOBODY) -> list[ProviderState]:
        """Providers that would serve a request of this class once a slot frees up."""
        return [
            r.state for r in self.routes if r.state.would_serve(long) and r.state.id not in exclude
        ]

    def takes_long(self) -> bool:
        """Whether any provider of the model may ever take a long request (slots not 0)."""
        return any(r.state.long_slots != 0 for r in self.routes)
