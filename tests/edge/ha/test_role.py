"""The leader/standby state machine and the lock key, without a database."""

from __future__ import annotations

import pytest

from edge.ha.role import LEADER, STANDBY, TAKING_OVER, Leadership, RoleError, lock_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_it_makes_a_single_edge_the_leader_for_good() -> None:
    single = Leadership(ha=False)

    assert (single.role, single.admitting, single.terms) == (LEADER, True, 1)
    for move in (single.lock_acquired, single.took_over, single.lost):
        with pytest.raises(RoleError, match=r"edge\.ha"):
            move()
    assert single.admitting


def test_it_starts_an_ha_edge_as_a_standby_that_admits_nothing() -> None:
    standby = Leadership(ha=True)

    assert (standby.state, standby.role, standby.admitting, standby.terms) == (
        STANDBY,
        STANDBY,
        False,
        0,
    )


def test_it_serves_only_once_the_takeover_is_done() -> None:
    clock = Clock()
    edge = Leadership(ha=True, clock=clock)
    clock.now = 1005.0
    edge.lock_acquired()

    assert (edge.state, edge.role, edge.admitting, edge.since) == (
        TAKING_OVER,
        STANDBY,
        False,
        1005.0,
    )
    edge.took_over()
    assert (edge.role, edge.admitting, edge.terms) == (LEADER, True, 1)


@pytest.mark.parametrize("took_over", [True, False])
def test_it_stops_admitting_when_the_lock_is_lost(took_over: bool) -> None:
    edge = Leadership(ha=True)
    edge.lock_acquired()
    if took_over:
        edge.took_over()

    assert edge.lost() is True
    assert (edge.role, edge.admitting) == (STANDBY, False)
    assert edge.lost() is False  # a second report of the same loss fences nothing again


def test_it_counts_each_term_as_leader() -> None:
    edge = Leadership(ha=True)
    for _ in range(3):
        edge.lock_acquired()
        edge.took_over()
        edge.lost()

    assert edge.terms == 3


@pytest.mark.parametrize(
    ("setup", "move"),
    [
        ([], "took_over"),  # a standby never leads without the lock
        (["lock_acquired"], "lock_acquired"),
        (["lock_acquired", "took_over"], "lock_acquired"),
        (["lock_acquired", "took_over"], "took_over"),
    ],
)
def test_it_refuses_transitions_it_does_not_have(setup: list[str], move: str) -> None:
    edge = Leadership(ha=True)
    for step in setup:
        getattr(edge, step)()
    before = edge.state

    with pytest.raises(RoleError, match="cannot go from"):
        getattr(edge, move)()
    assert edge.state == before


def test_the_lock_key_is_one_bigint_per_edge_id() -> None:
    keys = {lock_key(f"edge-{i}") for i in range(1000)}

    assert len(keys) == 1000
    assert all(-(2**63) <= key < 2**63 for key in keys)
    assert lock_key("edge-prod") == lock_key("edge-prod")
