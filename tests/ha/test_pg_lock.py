"""The leader lock on real PostgreSQL: one holder per Edge id, lost when the server ends the
session (as it does for a crashed or partitioned Edge), then taken by the other; and only its
holder may commit an apply."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import psycopg
import pytest
from django.db import transaction

from edge.ha.cluster import leader_commit_guard, lock_conninfo
from edge.ha.pg_lock import PgLeaderLock
from edge.ha.role import NotLeading, lock_key
from tests.e2e.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def locks(pg_url: str) -> Iterator[list[PgLeaderLock]]:
    made: list[PgLeaderLock] = []
    yield made
    for lock in made:
        lock.stop()


def make_lock(locks: list[PgLeaderLock], edge_id: str, name: str) -> PgLeaderLock:
    lock = PgLeaderLock(lock_conninfo(), lock_key(edge_id), application_name=f"test lock {name}")
    locks.append(lock)
    lock.start()
    return lock


def lock_holders(key: int) -> list[str]:
    """The application names of the sessions holding advisory lock ``key``: a bigint key is
    held as its high and low 32 bits (``classid``, ``objid``) with ``objsubid`` 1."""
    with psycopg.connect(**lock_conninfo(), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
            (key,),
        ).fetchall()
    return [row[0] for row in rows]


def terminate(application_name: str) -> None:
    with psycopg.connect(**lock_conninfo(), autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )


def test_one_edge_of_an_id_holds_the_lock_and_the_other_takes_it_when_it_is_lost(
    locks: list[PgLeaderLock],
) -> None:
    first = make_lock(locks, "edge-lock-test", "first")
    wait_until(lambda: first.held_term == 1, what="the first lock")
    second = make_lock(locks, "edge-lock-test", "second")
    other_id = make_lock(locks, "edge-other", "other")
    wait_until(lambda: other_id.held_term == 1, what="another Edge id's own lock")

    wait_until(lambda: lock_holders(first.key) == ["test lock first"], what="one holder")
    assert second.held_term is None

    terminate("test lock first")  # what the server does to a session it gave up on
    wait_until(lambda: first.held_term is None, timeout=10, what="the first to notice")
    assert "terminat" in first.last_error
    wait_until(lambda: second.held_term == 1, timeout=10, what="the second to take over")
    assert lock_holders(first.key) == ["test lock second"]
    assert first.held_term is None  # the lost lock is not taken back while the other holds it


def test_a_released_lock_goes_to_the_standby(locks: list[PgLeaderLock]) -> None:
    first = make_lock(locks, "edge-release-test", "first")
    wait_until(lambda: first.held_term == 1, what="the first lock")
    second = make_lock(locks, "edge-release-test", "second")

    first.release()

    wait_until(lambda: second.held_term == 1, timeout=10, what="the standby to take it")
    assert lock_holders(first.key) == ["test lock second"]


def test_only_the_lock_holder_may_commit_an_apply(locks: list[PgLeaderLock]) -> None:
    leader = make_lock(locks, "edge-guard-test", "leader")
    wait_until(lambda: leader.held_term == 1, what="the lock")
    standby = make_lock(locks, "edge-guard-test", "standby")
    taken_while_leading = leader_commit_guard(leader, "edge-guard-test")
    with transaction.atomic():
        taken_while_leading()  # holds: the commit may go on
    with transaction.atomic():
        pickle.loads(pickle.dumps(taken_while_leading))()  # as another process checks it

    terminate("test lock leader")
    wait_until(lambda: standby.held_term == 1, timeout=10, what="the other to take over")
    with pytest.raises(NotLeading, match="stopped leading"), transaction.atomic():
        leader_commit_guard(leader, "edge-guard-test")()
    # Taken before the lock was lost, it still asks the database.
    with pytest.raises(NotLeading, match="stopped leading"), transaction.atomic():
        taken_while_leading()
    with transaction.atomic():
        leader_commit_guard(standby, "edge-guard-test")()
