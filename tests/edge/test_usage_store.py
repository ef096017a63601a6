"""The usage writer keeps the rollup in step with the rows; the migration fills it from old rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Sum

from edge.models import UsageDayRollup, UsageRecord, UsageRollup, UsageSums
from edge.usage import Usage
from edge.usage_rollup import LATENCY_FIELDS
from edge.usage_store import write_batch

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def make_usage(index: int, **fields) -> Usage:
    values = {
        "request_id": f"r{index}",
        "model": "m",
        "status": "ok",
        "principal_ref": "team-a",
        "token_ref": "app-1",
        "prompt_tokens": 10 + index,
        "completion_tokens": index,
        "total_ms": 3.0 * index,
        "created_at": NOON + timedelta(minutes=7 * index),
    }
    return Usage(**{**values, **fields})


def rollup_sums(model: type[UsageSums] = UsageRollup) -> dict:
    return model.objects.aggregate(
        requests=Sum("requests"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        **{name: Sum(name) for name in LATENCY_FIELDS},
    )


def row_sums() -> dict:
    return UsageRecord.objects.aggregate(
        requests=Count("id"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
    )


@pytest.mark.django_db
def test_it_stores_the_rows_and_their_sums_per_hour():
    write_batch([make_usage(i) for i in range(20)])  # 20 rows over 2 h 13 min: 3 hours

    assert UsageRecord.objects.count() == 20
    hours = list(UsageRollup.objects.order_by("hour").values_list("hour", "day", "requests"))
    assert hours == [
        (NOON, NOON.date(), 9),
        (NOON + timedelta(hours=1), NOON.date(), 9),
        (NOON + timedelta(hours=2), NOON.date(), 2),
    ]
    days = list(UsageDayRollup.objects.values_list("day", "requests"))
    assert days == [(NOON.date(), 20)]
    for model in (UsageRollup, UsageDayRollup):
        sums = rollup_sums(model)
        assert {key: sums[key] for key in ("requests", "prompt", "completion")} == row_sums()
        assert sum(sums[name] for name in LATENCY_FIELDS) == 20


@pytest.mark.django_db
def test_later_batches_add_to_the_rows_of_their_hour():
    write_batch([make_usage(0), make_usage(1, status="upstream_error")])
    write_batch([make_usage(2), make_usage(3, token_ref="app-2")])

    rows = {
        (row.token_ref, row.status): row.requests for row in UsageRollup.objects.filter(hour=NOON)
    }
    assert rows == {("app-1", "ok"): 2, ("app-1", "upstream_error"): 1, ("app-2", "ok"): 1}
    for model in (UsageRollup, UsageDayRollup):
        sums = rollup_sums(model)
        assert {key: sums[key] for key in ("requests", "prompt", "completion")} == row_sums()


@pytest.mark.django_db(transaction=True)  # the writer drops its connection on a failure
def test_a_failed_batch_leaves_neither_rows_nor_sums():
    write_batch([make_usage(0)])
    refused = make_usage(2, prompt_tokens=-1)  # the column's CHECK refuses it, on either database

    with pytest.raises(IntegrityError):
        write_batch([make_usage(1), refused])

    assert UsageRecord.objects.count() == 1
    assert rollup_sums(UsageRollup)["requests"] == rollup_sums(UsageDayRollup)["requests"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_rollup_from_the_rows_already_stored():
    executor = MigrationExecutor(connection)
    before = [("edge", "0003_usage_attempts")]
    latest = executor.loader.graph.leaf_nodes("edge")
    executor.migrate(before)
    old_model = executor.loader.project_state(before).apps.get_model("edge", "UsageRecord")
    old_model.objects.bulk_create(
        old_model(
            request_id=f"r{i}",
            model="m",
            status="ok" if i % 3 else "deadline_exceeded",
            principal_ref="team-a",
            token_ref=f"app-{i % 2}",
            prompt_tokens=i,
            completion_tokens=1,
            total_ms=40.0,
            created_at=NOON + timedelta(minutes=20 * i),
        )
        for i in range(12)
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(latest)

    for model in (UsageRollup, UsageDayRollup):
        assert rollup_sums(model)["requests"] == 12
        assert rollup_sums(model)["prompt"] == sum(range(12))
        assert rollup_sums(model)["latency_le_50ms"] == 12
    errors = UsageRollup.objects.filter(status="deadline_exceeded").aggregate(n=Sum("requests"))
    assert errors["n"] == 4
    assert UsageRollup.objects.filter(hour=NOON, token_ref="app-0", status="ok").get().requests == 1
