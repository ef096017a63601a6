"""What became of dry runs, read from the database: the Django side of ``refresh.outcome``.

Two queries for any number of records (a list page's worth): the running revision, and the
records after them that changed the running config from their bases or carried them out.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q
from django.utils import timezone

from edge.models import ConfigRevision
from refresh.models import RefreshRecord
from refresh.outcome import DryRun, Outcome, Switch, outcome_of


def is_plan(record: RefreshRecord) -> bool:
    """A dry run that would apply: the only records with an outcome."""
    return record.mode == "dry_run" and record.status == "ok"


def running_revision() -> str | None:
    """The active config revision: what the Edge runs (its start and every apply write it)."""
    return ConfigRevision.objects.filter(active=True).values_list("revision", flat=True).first()


def outcomes(records: Iterable[RefreshRecord]) -> dict[int, Outcome]:
    """The outcome of each plan among ``records``, by pk."""
    plans = [record for record in records if is_plan(record)]
    if not plans:
        return {}
    switches = [
        Switch(
            pk=row["pk"],
            refresh_id=row["refresh_id"],
            mode=row["mode"],
            base_revision=row["base_revision"],
            candidate_revision=row["candidate_revision"],
            applied_from=row["applied_from"],
            requested_by=row["requested_by"],
            created_at=timezone.localtime(row["created_at"]),
        )
        for row in RefreshRecord.objects.filter(
            Q(base_revision__in={plan.base_revision for plan in plans})
            | Q(applied_from__in=[plan.pk for plan in plans]),
            status="applied",
            mode__in=("apply", "start"),
            pk__gt=min(plan.pk for plan in plans),
        )
        .order_by()
        .values(
            "pk",
            "refresh_id",
            "mode",
            "base_revision",
            "candidate_revision",
            "applied_from",
            "requested_by",
            "created_at",
        )
    ]
    running = running_revision()
    return {
        plan.pk: outcome_of(
            DryRun(plan.pk, plan.base_revision, plan.candidate_revision), switches, running
        )
        for plan in plans
    }
