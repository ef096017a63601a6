"""What became of a dry run, derived from the records after it (plain Python, no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from refresh.outcome import DryRun, Outcome, Switch, describe, outcome_of

A, B, C = (f"sha256:{letter * 64}" for letter in "abc")
PLAN = DryRun(pk=10, base_revision=A, candidate_revision=B)
WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def switch(pk: int, base: str, candidate: str, applied_from: int | None = None) -> Switch:
    return Switch(
        pk=pk,
        refresh_id=f"rf-{pk}",
        mode="apply",
        base_revision=base,
        candidate_revision=candidate,
        applied_from=applied_from,
        requested_by="admin alice",
        created_at=WHEN,
    )


@pytest.mark.parametrize(
    ("switches", "running", "state", "by"),
    [
        ([], A, "pending", None),
        ([switch(11, A, B, applied_from=10)], B, "applied", 11),
        # The same base to the same candidate, not linked (an unpinned apply): the plan ran.
        ([switch(11, A, B)], B, "applied", 11),
        # Applied, then taken back: still applied, never offered again.
        ([switch(11, A, B, applied_from=10), switch(12, B, A)], A, "applied", 11),
        ([switch(11, A, C)], C, "superseded", 11),
        # Moved off and back: the plan applies as it stands again.
        ([switch(11, A, C), switch(12, C, A)], A, "pending", None),
        # The latest move off the base says why it is not running.
        ([switch(11, A, C), switch(12, C, A), switch(13, A, C)], C, "superseded", 13),
        # Nothing recorded explains the change (records from before starts were recorded).
        ([], C, "stale", None),
        ([], None, "stale", None),
        # Records before the dry run do not count.
        ([switch(9, A, B, applied_from=10), switch(8, A, C)], C, "stale", None),
    ],
)
def test_it_derives_the_outcome(
    switches: list[Switch], running: str | None, state: str, by: int | None
) -> None:
    outcome = outcome_of(PLAN, reversed(switches), running)

    assert outcome.state == state
    assert (outcome.by.pk if outcome.by else None) == by
    assert outcome.running == running


def test_it_prefers_the_linked_apply_over_an_earlier_equivalent_one() -> None:
    outcome = outcome_of(PLAN, [switch(11, A, B), switch(12, A, B, applied_from=10)], B)

    assert outcome.by is not None and outcome.by.pk == 12


def test_it_says_the_outcome_in_words() -> None:
    applied = Outcome("applied", B, switch(11, A, B, applied_from=10))
    superseded = Outcome("superseded", C, switch(11, A, C))

    assert describe(Outcome("pending", A), A) == (
        "Pending: the Edge still runs this plan's base; it can be applied."
    )
    assert describe(applied, A) == "Applied by rf-11 (admin alice) at 2026-12-01 09:30:00 UTC."
    assert describe(superseded, A) == (
        "Superseded by rf-11 (admin alice) at 2026-12-01 09:30:00 UTC, which took the Edge "
        f"from this plan's base {A} to {C}."
    )
    assert describe(Outcome("stale", C), A) == (
        f"Stale: the Edge now runs {C}, not this plan's base {A}."
    )
    assert describe(Outcome("stale", None), A) == (
        f"Stale: the Edge now runs no recorded revision, not this plan's base {A}."
    )
