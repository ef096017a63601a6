"""The keep-alive round: one timer looks at every session once per interval, each at its slot.

The round is driven here through ``look_at_due`` with made-up times; its own timer is an interval
of 100 s away, so it never fires during a test.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from nodes.keepalive import SLOTS, KeepAliveRound

INTERVAL_S = 100.0
TICK_S = INTERVAL_S / SLOTS


class Member:
    def __init__(self, calls: list[tuple[Member, float]], clock: list[float]) -> None:
        self.calls = calls
        self.clock = clock

    def keep_alive_due(self) -> None:
        self.calls.append((self, self.clock[0]))


Calls = list[tuple[Member, float]]


def fleet(size: int) -> tuple[KeepAliveRound, list[Member], Calls, list[float]]:
    keep_alive = KeepAliveRound(INTERVAL_S)
    calls: Calls = []
    clock = [0.0]
    members = [Member(calls, clock) for _ in range(size)]
    for member in members:
        keep_alive.add(member)
    # Read after the adds: the round's grid starts at the first one, a moment before.
    clock[0] = asyncio.get_running_loop().time()
    return keep_alive, members, calls, clock


def walk(keep_alive: KeepAliveRound, clock: list[float], until: float) -> None:
    """Look at the round every tick up to ``until`` seconds from the clock's start."""
    start = clock[0]
    for tick in range(1, int(until / TICK_S) + 1):
        clock[0] = start + tick * TICK_S
        keep_alive.look_at_due(clock[0])


async def test_it_looks_at_each_member_once_per_interval_at_a_slot_of_its_own() -> None:
    keep_alive, members, calls, clock = fleet(200)

    walk(keep_alive, clock, until=3 * INTERVAL_S)

    times: dict[Member, list[float]] = {}
    for member, at in calls:
        times.setdefault(member, []).append(at)
    assert set(times) == set(members)
    assert all(len(at) == 3 for at in times.values())
    # Each keeps its slot: exactly one interval between two looks.
    assert all(at[1] - at[0] == pytest.approx(INTERVAL_S) for at in times.values())
    # Members that joined together are spread over the interval, not looked at in one burst.
    assert len({round(at[0], 6) for at in times.values()}) > SLOTS // 2


async def test_a_late_turn_looks_at_each_member_once_and_keeps_their_slots() -> None:
    keep_alive, members, calls, clock = fleet(100)
    walk(keep_alive, clock, until=INTERVAL_S)
    first = {member: at for member, at in calls}
    calls.clear()

    # The loop was held for three intervals: one look each, not three in a burst.
    keep_alive.look_at_due(clock[0] + 3 * INTERVAL_S + TICK_S / 2)
    assert sorted(map(id, (member for member, _ in calls))) == sorted(map(id, members))
    calls.clear()

    clock[0] += 3 * INTERVAL_S
    walk(keep_alive, clock, until=INTERVAL_S)
    again = {member: at for member, at in calls}
    assert set(again) == set(members)
    assert all(again[member] - first[member] == pytest.approx(4 * INTERVAL_S) for member in members)


async def test_a_discarded_member_is_not_looked_at() -> None:
    keep_alive, members, calls, clock = fleet(10)
    for member in members[:9]:
        keep_alive.discard(member)
    keep_alive.discard(members[0])  # twice: no error

    walk(keep_alive, clock, until=INTERVAL_S)
    assert [member for member, _ in calls] == [members[9]]

    keep_alive.discard(members[9])
    assert len(keep_alive) == 0


async def test_a_member_that_raises_leaves_the_others_looked_at(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep_alive, members, calls, clock = fleet(50)

    class Broken:
        def keep_alive_due(self) -> None:
            raise RuntimeError("boom")

    keep_alive.add(Broken())
    with caplog.at_level(logging.ERROR, logger="nodes.keepalive"):
        walk(keep_alive, clock, until=INTERVAL_S)

    assert {member for member, _ in calls} == set(members)
    assert "keep-alive of" in caplog.text


async def test_its_timer_looks_at_the_members_on_the_loop() -> None:
    keep_alive = KeepAliveRound(interval_s=0.02)
    looked = asyncio.Event()

    class Once:
        def keep_alive_due(self) -> None:
            keep_alive.discard(self)
            looked.set()

    keep_alive.add(Once())
    await asyncio.wait_for(looked.wait(), 5)
    assert len(keep_alive) == 0
