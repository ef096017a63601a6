"""A hypothesis state machine mixing every pool input, checked against a reference model.

The event loop runs on a virtual clock: each step calls the pool, then lets the loop run a
bounded number of turns, so timeouts fire exactly when the clock is advanced and nothing depends
on real time. After every step it checks: counters equal the leases held; admissions respect the
capacity and long slots in force; no waiter is lost, admitted twice or passed out of order
(FIFO within a principal, interactive before batch that has not aged); no waiter sits while a
slot it could take is free; no request gets a provider it excludes (a run failing over); a full
queue turns away a newcomer or displaces the heaviest principal's newest waiter, as the rule
says. At the end every counter is back to zero.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from edge.dispatch import (
    ContextTooLong,
    DispatchError,
    Lease,
    ModelNotFound,
    ModelSpec,
    NoProviderAvailable,
    PoolSnapshot,
    ProviderPool,
    ProviderSpec,
    QueueFull,
    QueueTimeout,
    Share,
)
from edge.dispatch.fair import BATCH_AGING_SHARE

NODE_OF = {"p0": "n0", "p1": "n0", "p2": "n1", "p3": "n1"}
ROUTES = {"m0": ("p0", "p1", "p2"), "m1": ("p1", "p2", "p3"), "m2": ("p3",)}
THRESHOLD = 100
TOKENS = {False: 1, True: THRESHOLD}
SETTLE_TURNS = 20
# Three principals: two interactive of different weights, one batch.
SHARES = {
    "a": Share("a", 1.0),
    "b": Share("b", 3.0),
    "c": Share("c", 1.0, "batch"),
}


@dataclass(frozen=True)
class Params:
    capacity: int = 1
    priority: int = 1
    long_slots: int | None = 1
    enabled: bool = True
    max_queue: int = 3
    timeout_s: float = 3.0


@dataclass
class Request:
    seq: int
    model: str
    long: bool
    task: asyncio.Task
    enqueued_at: float
    timeout_s: float | None = None
    exclude: frozenset[str] = frozenset()  # a run failing over
    principal: str = "a"

    @property
    def batch(self) -> bool:
        return SHARES[self.principal].priority_class == "batch"

    def aged(self, now: float) -> bool:
        assert self.timeout_s is not None
        return self.batch and now >= self.enqueued_at + self.timeout_s * BATCH_AGING_SHARE


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.loop = asyncio.new_event_loop()
        self.loop.time = lambda: self.now  # type: ignore[method-assign]
        # Mixed starting shapes, so long-slot limits bite before any refresh changes them.
        self.params = {
            "p0": Params(capacity=2, long_slots=1),
            "p1": Params(capacity=1, long_slots=None),
            "p2": Params(capacity=2, long_slots=0),
            "p3": Params(capacity=2, long_slots=1),
        }
        self.listed = set(NODE_OF)
        self.models = set(ROUTES)
        self.ready = set(NODE_OF.values())
        self.unhealthy: set[str] = set()
        self.applied = self.snapshot()
        self.pool = ProviderPool(self.applied)
        for node in self.ready:
            self.pool.set_node_ready(node, True)
        self.held: list[Lease] = []
        self.waiting: list[Request] = []
        self.seq = 0

    # -- the reference model ---------------------------------------------------------------

    def snapshot(self) -> PoolSnapshot:
        providers = tuple(
            ProviderSpec(
                id=pid,
                node_id=NODE_OF[pid],
                adapter_id="echo",
                served_models=("served",),
                enabled=p.enabled,
                capacity=p.capacity,
                long_context_slots=p.long_slots,
                priority=p.priority,
                max_queue=p.max_queue,
                queue_timeout_s=p.timeout_s,
            )
            for pid, p in self.params.items()
            if pid in self.listed
        )
        models = tuple(
            ModelSpec(model, {pid: f"{model}@{pid}" for pid in self.routes(model)})
            for model in sorted(self.models)
        )
        return PoolSnapshot(providers, models, THRESHOLD)

    def apply(self, share: bool) -> None:
        """Swap in the current snapshot, built fresh or sharing unchanged specs with the last
        one (as a refresh does): the pool must end up the same either way."""
        snapshot = self.snapshot()
        self.applied = snapshot.sharing(self.applied) if share else snapshot
        self.pool.apply_snapshot(self.applied)

    def routes(self, model: str) -> list[str]:
        return [pid for pid in ROUTES[model] if pid in self.listed]

    def usable(self, pid: str) -> bool:
        return (
            pid in self.listed
            and self.params[pid].enabled
            and pid not in self.unhealthy
            and NODE_OF[pid] in self.ready
        )

    def held_counts(self) -> tuple[Counter[str], Counter[str]]:
        normal = Counter(lease.provider_id for lease in self.held)
        long = Counter(lease.provider_id for lease in self.held if lease.context_class == "long")
        return normal, long

    def is_free(self, pid: str, long: bool) -> bool:
        in_flight, long_in_flight = self.held_counts()
        params = self.params[pid]
        if not self.usable(pid) or in_flight[pid] >= params.capacity:
            return False
        return not long or params.long_slots is None or long_in_flight[pid] < params.long_slots

    def serving(self, model: str, long: bool, exclude: frozenset[str] = frozenset()) -> list[str]:
        return [
            pid
            for pid in self.routes(model)
            if self.usable(pid)
            and (not long or self.params[pid].long_slots != 0)
            and pid not in exclude
        ]

    # -- driving the loop --------------------------------------------------------------------

    def settle(self) -> tuple[list[tuple[Request, Lease]], list[tuple[Request, BaseException]]]:
        async def turns() -> None:
            for _ in range(SETTLE_TURNS):
                await asyncio.sleep(0)

        self.loop.run_until_complete(turns())
        admitted, failed = [], []
        for request in [r for r in self.waiting if r.task.done()]:
            self.waiting.remove(request)
            if request.task.cancelled():
                continue
            error = request.task.exception()
            if error is None:
                lease = request.task.result()
                self.held.append(lease)
                admitted.append((request, lease))
            else:
                failed.append((request, error))
        return admitted, failed

    def step(self) -> None:
        """Settle after an input, then check what the pool did about it."""
        admitted, failed = self.settle()
        self.check_admissions(admitted)
        self.check_waiter_failures(failed)
        self.check_state()

    # -- rules -------------------------------------------------------------------------------

    @rule(
        model=st.sampled_from([*ROUTES, "unknown"]),
        long=st.booleans(),
        principal=st.sampled_from(sorted(SHARES)),
    )
    def acquire(self, model: str, long: bool, principal: str) -> None:
        self.acquire_one(model, long, principal=principal)

    @rule(
        model=st.sampled_from(sorted(ROUTES)),
        requests=st.lists(
            st.tuples(st.booleans(), st.sampled_from(sorted(SHARES))), min_size=2, max_size=5
        ),
    )
    def acquire_burst(self, model: str, requests: list[tuple[bool, str]]) -> None:
        """Several requests for one model in a row, so queues actually build up."""
        for long, principal in requests:
            self.acquire_one(model, long, principal=principal)

    @rule(
        model=st.sampled_from(sorted(ROUTES)),
        long=st.booleans(),
        principal=st.sampled_from(sorted(SHARES)),
        data=st.data(),
    )
    def acquire_excluding(
        self, model: str, long: bool, principal: str, data: st.DataObject
    ) -> None:
        """A run failing over: some of the model's providers failed it already."""
        exclude = data.draw(st.frozensets(st.sampled_from(ROUTES[model]), min_size=1))
        self.acquire_one(model, long, exclude, principal)

    def acquire_one(
        self,
        model: str,
        long: bool,
        exclude: frozenset[str] = frozenset(),
        principal: str = "a",
    ) -> None:
        expected = self.expected_admission(model, long, exclude)
        displaced = None
        if expected is QueueFull:
            displaced = self.displaced(model, principal)
            if displaced is not None:
                serving = self.serving(model, long, exclude)
                expected = max(self.params[pid].timeout_s for pid in serving)
        self.seq += 1
        share = SHARES[principal]
        task = self.loop.create_task(self.pool.acquire(model, TOKENS[long], exclude, share))
        request = Request(
            self.seq, model, long, task, self.now, exclude=exclude, principal=principal
        )
        self.waiting.append(request)
        admitted, failed = self.settle()
        if displaced is not None:
            assert [(r, type(e)) for r, e in failed] == [(displaced, QueueFull)]
            assert request in self.waiting and not admitted
            request.timeout_s = expected  # type: ignore[assignment]
        elif isinstance(expected, set):
            assert [r for r, _ in admitted] == [request] and not failed
            lease = admitted[0][1]
            assert lease.provider_id in expected and lease.queued_ms == 0.0
            self.check_admissions(admitted)
        elif isinstance(expected, float):
            assert request in self.waiting and not admitted and not failed
            request.timeout_s = expected
        else:
            assert [(r, type(e)) for r, e in failed] == [(request, expected)] and not admitted
        self.check_state()

    def expected_admission(
        self, model: str, long: bool, exclude: frozenset[str]
    ) -> set[str] | float | type:
        """Providers it may get, or the timeout it will wait with, or the error it must get."""
        if model not in self.models:
            return ModelNotFound
        free = [pid for pid in self.routes(model) if self.is_free(pid, long) and pid not in exclude]
        if long and all(self.params[pid].long_slots == 0 for pid in self.routes(model)):
            return ContextTooLong
        if free:
            best = min(self.params[pid].priority for pid in free)
            return {pid for pid in free if self.params[pid].priority == best}
        serving = self.serving(model, long, exclude)
        if not serving:
            return NoProviderAvailable
        queued = sum(1 for r in self.waiting if r.model == model)
        if queued >= sum(self.params[pid].max_queue for pid in serving):
            return QueueFull
        return max(self.params[pid].timeout_s for pid in serving)

    def displaced(self, model: str, principal: str) -> Request | None:
        """The waiter a full queue gives up for a newcomer of ``principal``, if any."""
        mine = [r for r in self.waiting if r.model == model]
        counts = Counter(r.principal for r in mine)
        if not mine:
            return None  # max_queue 0: nobody ever waits
        newest = {r.principal: r for r in sorted(mine, key=lambda r: r.seq)}
        heaviest = max(counts, key=lambda p: (counts[p], newest[p].seq))
        if counts[heaviest] < counts[principal] + 2:
            return None
        return newest[heaviest]

    @precondition(lambda self: self.held)
    @rule(data=st.data(), twice=st.booleans())
    def release(self, data: st.DataObject, twice: bool) -> None:
        lease = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        lease.release()
        if twice:
            lease.release()
        self.step()

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        request = self.waiting[data.draw(st.integers(0, len(self.waiting) - 1))]
        request.task.cancel()
        self.step()
        assert request.task.cancelled()

    @precondition(lambda self: self.held and self.waiting)
    @rule(data=st.data())
    def release_then_cancel_in_one_turn(self, data: st.DataObject) -> None:
        """The cancelled waiter may be the one the freed slot was just granted to."""
        lease = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        request = self.waiting[data.draw(st.integers(0, len(self.waiting) - 1))]
        lease.release()
        request.task.cancel()
        self.step()
        assert request.task.cancelled()

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.5]))
    def advance_time(self, seconds: float) -> None:
        self.now += seconds
        self.step()

    @rule(
        pid=st.sampled_from(sorted(NODE_OF)),
        capacity=st.integers(1, 3),
        priority=st.integers(0, 2),
        long_slots=st.sampled_from([None, 0, 1, 2, 3]),
        enabled=st.booleans(),
        max_queue=st.integers(0, 3),
        timeout_s=st.sampled_from([1.0, 2.0, 4.0]),
        share=st.booleans(),
    )
    def change_provider(
        self,
        pid: str,
        capacity: int,
        priority: int,
        long_slots: int | None,
        enabled: bool,
        max_queue: int,
        timeout_s: float,
        share: bool,
    ) -> None:
        if long_slots is not None:
            long_slots = min(long_slots, capacity)
        self.params[pid] = replace(
            self.params[pid],
            capacity=capacity,
            priority=priority,
            long_slots=long_slots,
            enabled=enabled,
            max_queue=max_queue,
            timeout_s=timeout_s,
        )
        self.apply(share)
        self.step()

    @rule(pid=st.sampled_from(sorted(NODE_OF)), share=st.booleans())
    def add_or_remove_provider(self, pid: str, share: bool) -> None:
        self.listed ^= {pid}
        self.apply(share)
        self.step()

    @rule(model=st.sampled_from(sorted(ROUTES)), share=st.booleans())
    def add_or_remove_model(self, model: str, share: bool) -> None:
        self.models ^= {model}
        self.apply(share)
        self.step()

    @rule(pid=st.sampled_from(sorted(NODE_OF)), healthy=st.booleans())
    def report_health(self, pid: str, healthy: bool) -> None:
        if healthy:
            self.unhealthy.discard(pid)
        else:
            self.unhealthy.add(pid)
        self.pool.set_provider_health(pid, healthy)
        self.step()

    @rule(node=st.sampled_from(sorted(set(NODE_OF.values()))), ready=st.booleans())
    def node_ready_or_gone(self, node: str, ready: bool) -> None:
        if ready:
            self.ready.add(node)
        else:
            self.ready.discard(node)
            # Its next session starts healthy until reported.
            self.unhealthy -= {pid for pid in self.listed if NODE_OF[pid] == node}
        self.pool.set_node_ready(node, ready)
        self.step()

    # -- checks ------------------------------------------------------------------------------

    def check_admissions(self, admitted: list[tuple[Request, Lease]]) -> None:
        in_flight, long_in_flight = self.held_counts()
        for request, lease in admitted:
            pid = lease.provider_id
            params = self.params[pid]
            assert lease.model == request.model
            assert lease.context_class == ("long" if request.long else "normal")
            assert pid in self.routes(request.model) and self.usable(pid)
            assert lease.served_model == f"{request.model}@{pid}"
            assert in_flight[pid] <= params.capacity
            if request.long:
                assert params.long_slots != 0
                assert params.long_slots is None or long_in_flight[pid] <= params.long_slots
            assert abs(lease.queued_ms - (self.now - request.enqueued_at) * 1000) < 1e-6
            assert pid not in request.exclude
            for other in self.waiting:
                # Every waiter still waiting that could have taken the slot it got...
                fits = not other.long or request.long
                if not (pid in self.routes(other.model) and fits and pid not in other.exclude):
                    continue
                # ...ranks after it: FIFO within a principal on a model (alike in aging; shares
                # are counted per model), and a batch request that has not aged goes after
                # every interactive one.
                if (
                    other.principal == request.principal
                    and other.model == request.model
                    and other.aged(self.now) == request.aged(self.now)
                ):
                    assert other.seq > request.seq
                if request.batch and not request.aged(self.now):
                    assert other.batch

    def check_waiter_failures(self, failed: list[tuple[Request, BaseException]]) -> None:
        for request, error in failed:
            assert isinstance(error, DispatchError)
            if isinstance(error, ModelNotFound):
                assert request.model not in self.models
            elif isinstance(error, NoProviderAvailable):
                assert not self.serving(request.model, request.long, request.exclude)
            else:
                assert isinstance(error, QueueTimeout)
                assert request.timeout_s is not None
                assert self.now - request.enqueued_at >= request.timeout_s

    def check_state(self) -> None:
        stats = self.pool.stats()
        in_flight, long_in_flight = self.held_counts()
        for pid in set(stats.providers) | set(in_flight):
            provider = stats.providers[pid]
            assert (provider.in_flight, provider.long_in_flight) == (
                in_flight[pid],
                long_in_flight[pid],
            )
            assert provider.listed == (pid in self.listed)
        assert set(stats.providers) >= self.listed
        assert set(stats.models) == self.models
        for model, figures in stats.models.items():
            mine = [r for r in self.waiting if r.model == model]
            assert figures.queue_depth == len(mine)
            assert figures.long_queue_depth == sum(1 for r in mine if r.long)
        for request in self.waiting:
            assert request.model in self.models
            assert self.serving(request.model, request.long, request.exclude)
            candidates = [pid for pid in self.routes(request.model) if pid not in request.exclude]
            assert not any(self.is_free(pid, request.long) for pid in candidates)
            assert request.timeout_s is not None
            assert self.now - request.enqueued_at < request.timeout_s

    def teardown(self) -> None:
        for lease in self.held:
            lease.release()
        self.held.clear()
        for request in self.waiting:
            request.task.cancel()
        self.settle()
        stats = self.pool.stats()
        self.loop.close()
        assert not self.held and not self.waiting
        assert all(p.in_flight == 0 and p.long_in_flight == 0 for p in stats.providers.values())
        assert all(p.listed for p in stats.providers.values())
        assert all(m.queue_depth == 0 for m in stats.models.values())


PoolMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, print_blob=True
)
TestPoolStateMachine = PoolMachine.TestCase
