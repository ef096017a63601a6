"""The writes of a refresh (``refresh.persist``) made in the plan worker, on the plan it holds.

A fleet-wide apply writes megabytes (the mirror's changed rows, a record whose result lists every
change, the config file and its backup): seconds of CPU at thousands of nodes. In a thread of the
Edge that CPU competes with the event loop for the interpreter, and the loop, which gives it up
at every socket call, waits behind it each time: beside 3,000 Node sessions requests were held up
for up to a second (docs/benchmarks.md, "Fleet"). The worker holds the plan, its configs and its
text already; the Edge sends only how its result differs (status, errors, pushes) and who asked.

The worker imports this module to run these, before anything has set Django up in it: that comes
first, here (in the Edge it is set up already, or being set up: this does nothing).
"""

from __future__ import annotations

import django
from django.apps import apps

if not apps.models_ready:
    django.setup()

from django.db import close_old_connections

from refresh.models import RefreshRecord
from refresh.persist import ApplyOrder, RecordOrder, save_pushes, save_record, write_apply
from refresh.plan import NodePush, RefreshResult
from refresh.plan_worker import HeldPlan, PlanNotHeld


def save_record_held(held: HeldPlan, order: RecordOrder) -> None:
    with _fresh_connection():
        save_record(_ordered(held, order), held.candidate_text, order)


def write_apply_held(held: HeldPlan, order: ApplyOrder) -> None:
    if held.candidate is None:
        raise PlanNotHeld(f"{held.result.refresh_id} has no candidate to apply")
    result = _ordered(held, order.record)
    record = RefreshRecord.of(result, held.candidate_text, **order.record.asker)
    with _fresh_connection():
        write_apply(
            order.config_path,
            held.running,
            held.candidate,
            held.candidate_text,
            record,
            order.guard,
        )


def save_pushes_held(held: HeldPlan, pushes: list[NodePush]) -> None:
    held.result.node_pushes = pushes
    with _fresh_connection():
        save_pushes(held.result)


def _ordered(held: HeldPlan, order: RecordOrder) -> RefreshResult:
    """The worker's result as the Edge has it now."""
    held.result.status, held.result.errors = order.status, list(order.errors)
    return held.result


class _fresh_connection:
    """A connection the database dropped since the worker's last write is opened again."""

    def __enter__(self) -> None:
        close_old_connections()

    def __exit__(self, *exc_info: object) -> None:
        close_old_connections()
