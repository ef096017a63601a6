"""What became of a dry run (plain Python), derived from the records after it, never stored.

Records are never edited, so a dry run's fate is read from what came later: an apply that carried
it out (``applied_from``, or one that took the Edge from the same base to the same candidate),
an apply or start that moved the Edge off its base to something else, or the running revision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

State = Literal["pending", "applied", "superseded", "stale"]


@dataclass(frozen=True, slots=True)
class DryRun:
    """The parts of a dry run's record its outcome depends on."""

    pk: int
    base_revision: str
    candidate_revision: str


@dataclass(frozen=True, slots=True)
class Switch:
    """A later record that changed the running config: an applied apply, or a start."""

    pk: int
    refresh_id: str
    mode: str
    base_revision: str
    candidate_revision: str
    applied_from: int | None
    requested_by: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Outcome:
    """``by`` is the record that applied or superseded the dry run; ``running`` what runs now."""

    state: State
    running: str | None
    by: Switch | None = None


def outcome_of(dry_run: DryRun, changes: Iterable[Switch], running: str | None) -> Outcome:
    """The fate of an ``ok`` dry run, given the config changes recorded (any order) and the
    revision the Edge runs now (``None`` when none is recorded)."""
    later = sorted((c for c in changes if c.pk > dry_run.pk), key=lambda c: c.pk)
    carried_out = _first(later, lambda c: c.applied_from == dry_run.pk) or _first(
        later,
        lambda c: (c.base_revision, c.candidate_revision)
        == (dry_run.base_revision, dry_run.candidate_revision),
    )
    if carried_out is not None:
        return Outcome("applied", running, carried_out)
    if running == dry_run.base_revision:
        # Even after the Edge went elsewhere and came back: the plan applies as it stands.
        return Outcome("pending", running)
    moved_off = [c for c in later if c.base_revision == dry_run.base_revision]
    if moved_off:
        # The latest one: it explains why the base no longer runs.
        return Outcome("superseded", running, moved_off[-1])
    return Outcome("stale", running)


def describe(outcome: Outcome, base_revision: str) -> str:
    """The outcome in one sentence; ``by.created_at`` is shown as it is (localize it first)."""
    by = outcome.by
    if outcome.state == "pending":
        return "Pending: the Edge still runs this plan's base; it can be applied."
    if outcome.state == "stale" or by is None:
        running = outcome.running or "no recorded revision"
        return f"Stale: the Edge now runs {running}, not this plan's base {base_revision}."
    who = f"{by.refresh_id} ({by.requested_by}) at {by.created_at:%Y-%m-%d %H:%M:%S %Z}"
    if outcome.state == "applied":
        return f"Applied by {who}."
    return (
        f"Superseded by {who}, which took the Edge from this plan's base {base_revision} "
        f"to {by.candidate_revision}."
    )


def _first(changes: Sequence[Switch], matches: Callable[[Switch], bool]) -> Switch | None:
    return next((change for change in changes if matches(change)), None)
