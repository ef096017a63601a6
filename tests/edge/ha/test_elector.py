"""The elector's decisions: takeover on a held lock, fence on a lost or silent one, without a
database (the lock's report is a plain object here; `tests/ha/` runs the real lock)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from edge.ha.elector import FENCE, TAKE_OVER, Elector
from edge.ha.role import LEADER, STANDBY, TAKING_OVER, Leadership


@dataclass
class LockReport:
    held_term: int | None = None
    last_ok: float = 0.0
    last_error: str = ""
    releases: int = 0

    def release(self) -> None:
        self.releases += 1
        self.held_term = None


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Calls:
    takeovers: int = 0
    fences: list[str] = field(default_factory=list)
    admitting_at_fence: list[bool] = field(default_factory=list)


def make_elector(
    lock: LockReport, clock: Clock, calls: Calls, *, takeover_fails: bool = False
) -> Elector:
    leadership = Leadership(ha=True)

    async def take_over() -> None:
        calls.takeovers += 1
        if takeover_fails:
            raise RuntimeError("the database went away")

    async def fence(reason: str) -> None:
        calls.fences.append(reason)
        calls.admitting_at_fence.append(leadership.admitting)

    return Elector(
        lock, leadership, take_over=take_over, fence=fence, clock=clock, takeover_grace_s=0
    )


def test_it_waits_as_a_standby_while_another_edge_holds_the_lock() -> None:
    elector = make_elector(LockReport(), Clock(), Calls())

    assert [elector.step() for _ in range(3)] == [None, None, None]
    assert elector.leadership.state == STANDBY


def test_it_takes_over_once_per_term_and_stays_while_checks_answer() -> None:
    lock, clock = LockReport(held_term=1, last_ok=100.0), Clock()
    elector = make_elector(lock, clock, Calls())

    assert elector.step() == TAKE_OVER
    assert elector.leadership.state == TAKING_OVER
    elector.leadership.took_over()
    for _ in range(5):
        clock.now += 1.0
        lock.last_ok = clock.now
        assert elector.step() is None
    assert elector.leadership.state == LEADER


def test_it_fences_at_once_when_the_lock_is_lost() -> None:
    lock, clock = LockReport(held_term=1, last_ok=100.0), Clock()
    elector = make_elector(lock, clock, Calls())
    elector.step()
    elector.leadership.took_over()
    lock.held_term, lock.last_error = None, "terminating connection due to administrator command"

    assert elector.step() == FENCE
    assert not elector.leadership.admitting
    assert elector.fence_reason == "terminating connection due to administrator command"
    assert lock.releases == 1


def test_it_fences_a_leader_whose_database_session_went_silent() -> None:
    lock, clock = LockReport(held_term=1, last_ok=100.0), Clock()
    elector = make_elector(lock, clock, Calls())
    elector.step()
    elector.leadership.took_over()

    clock.now = 102.9  # within FENCE_AFTER_S of the last answer: still leading
    assert elector.step() is None
    clock.now = 103.5
    assert elector.step() == FENCE
    assert elector.leadership.role == STANDBY
    assert "did not answer for 3.5 s" in elector.fence_reason
    assert lock.releases == 1  # the session is dropped so that the server frees the lock


def test_it_takes_over_again_with_a_new_term_after_a_fence() -> None:
    lock, clock = LockReport(held_term=1, last_ok=100.0), Clock()
    elector = make_elector(lock, clock, Calls())
    elector.step()
    elector.leadership.took_over()
    lock.held_term = None
    elector.step()

    assert elector.step() is None  # the released term is not taken over again
    lock.held_term, lock.last_ok = 2, clock.now
    assert elector.step() == TAKE_OVER


async def test_it_runs_the_takeover_and_the_fence_it_decides() -> None:
    lock, clock, calls = LockReport(), Clock(), Calls()
    elector = make_elector(lock, clock, calls)
    task = asyncio.create_task(elector.run())
    try:
        lock.held_term, lock.last_ok = 1, clock.now
        async with asyncio.timeout(5):
            while elector.leadership.state != LEADER:
                await asyncio.sleep(0.01)
        lock.held_term = None
        async with asyncio.timeout(5):
            while not calls.fences:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await elector.aclose()

    assert calls.takeovers == 1
    assert calls.admitting_at_fence == [False]  # the fence starts with nothing admitted
    assert elector.leadership.terms == 1


async def test_a_failed_takeover_gives_the_lock_up_and_serves_nothing() -> None:
    lock, clock, calls = LockReport(held_term=1, last_ok=100.0), Clock(), Calls()
    elector = make_elector(lock, clock, calls, takeover_fails=True)
    task = asyncio.create_task(elector.run())
    try:
        async with asyncio.timeout(5):
            while not lock.releases:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await elector.aclose()

    assert calls.takeovers == 1
    assert elector.leadership.state == STANDBY
    assert elector.leadership.terms == 0


async def test_a_lock_lost_during_the_takeover_never_leads() -> None:
    lock, clock = LockReport(held_term=1, last_ok=100.0), Clock()
    gate = asyncio.Event()
    leadership = Leadership(ha=True)
    fences: list[str] = []

    async def take_over() -> None:
        await gate.wait()

    async def fence(reason: str) -> None:
        fences.append(reason)

    elector = Elector(
        lock, leadership, take_over=take_over, fence=fence, clock=clock, takeover_grace_s=0
    )
    task = asyncio.create_task(elector.run())
    try:
        async with asyncio.timeout(5):
            while leadership.state != TAKING_OVER:
                await asyncio.sleep(0.01)
        lock.held_term = None
        async with asyncio.timeout(5):
            while not fences:
                await asyncio.sleep(0.01)
        gate.set()
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await elector.aclose()

    assert leadership.state == STANDBY
    assert leadership.terms == 0


@pytest.mark.parametrize("quiet_s", [0.0, 2.99])
def test_it_keeps_a_leader_whose_checks_answer(quiet_s: float) -> None:
    lock, clock = LockReport(held_term=7, last_ok=100.0), Clock()
    elector = make_elector(lock, clock, Calls())
    elector.step()
    elector.leadership.took_over()
    clock.now = 100.0 + quiet_s

    assert elector.step() is None
    assert elector.leadership.admitting


async def test_a_takeover_serves_only_after_the_grace() -> None:
    """The old leader learns of its lost lock at its next check at the latest: the new one
    starts serving later than that."""
    lock = LockReport(held_term=1, last_ok=0.0)
    leadership = Leadership(ha=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    async def take_over() -> None:
        done.set()

    async def fence(reason: str) -> None:
        raise AssertionError(reason)

    elector = Elector(
        lock,
        leadership,
        take_over=take_over,
        fence=fence,
        clock=loop.time,
        takeover_grace_s=0.3,
    )
    lock.last_ok = loop.time() + 60  # checks keep answering
    started = loop.time()
    task = asyncio.create_task(elector.run())
    try:
        async with asyncio.timeout(5):
            await done.wait()
        assert leadership.state == TAKING_OVER  # the config is in, the grace is not over
        async with asyncio.timeout(5):
            while leadership.state != LEADER:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await elector.aclose()

    assert loop.time() - started >= 0.3
