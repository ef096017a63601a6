"""The refresh history: what became of each dry run, who asked and why, in the database and
on the admin's list."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from refresh.actions import run_refresh
from refresh.history import outcomes
from refresh.models import RefreshRecord
from tests.refresh.refresh_helpers import make_config, with_capacity, yaml_of

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:refresh_refreshrecord_changelist"


def refresh(runtime, capacity: int, mode: str = "dry_run", **kwargs) -> RefreshRecord:
    kwargs.setdefault("requested_by", "test")
    result = async_to_sync(run_refresh)(
        runtime, mode=mode, config_yaml=yaml_of(with_capacity(make_config(), capacity)), **kwargs
    )
    return RefreshRecord.objects.get(refresh_id=result.refresh_id)


def apply_pinned(runtime, plan: RefreshRecord) -> RefreshRecord:
    """Apply ``plan``'s candidate pinned to its revisions, as the CLI's apply line does."""
    result = async_to_sync(run_refresh)(
        runtime,
        mode="apply",
        config_yaml=plan.candidate_yaml,
        base_revision=plan.base_revision,
        candidate_revision=plan.candidate_revision,
        requested_by="test",
    )
    return RefreshRecord.objects.get(refresh_id=result.refresh_id)


def outcome(record: RefreshRecord):
    return outcomes([record])[record.pk]


def test_it_keeps_who_asked_and_why(installed_runtime):
    record = refresh(
        installed_runtime,
        8,
        requested_by="alice with operator-token",
        token_name="operator-token",
        os_user="alice",
        reason="more room for the nightly batch",
    )

    assert (record.requested_by, record.token_name, record.os_user) == (
        "alice with operator-token",
        "operator-token",
        "alice",
    )
    assert record.reason == "more room for the nightly batch"


def test_it_links_an_apply_pinned_to_a_dry_runs_revisions_to_it(installed_runtime):
    older = refresh(installed_runtime, 8)
    plan = refresh(installed_runtime, 8)

    applied = apply_pinned(installed_runtime, plan)

    assert applied.applied_from == plan  # the latest dry run of that pair
    assert outcome(plan).state == "applied" and outcome(plan).by.pk == applied.pk
    # The older dry run of the same plan was carried out all the same.
    assert outcome(older).state == "applied"


def test_it_counts_an_unpinned_apply_of_the_same_plan_as_applied(installed_runtime):
    plan = refresh(installed_runtime, 8)

    applied = refresh(installed_runtime, 8, mode="apply")

    assert applied.applied_from is None
    assert (outcome(plan).state, outcome(plan).by.pk) == ("applied", applied.pk)


def test_it_tells_pending_superseded_and_back_again(installed_runtime):
    plan = refresh(installed_runtime, 8)
    assert outcome(plan).state == "pending"

    other = refresh(installed_runtime, 6, mode="apply")
    assert (outcome(plan).state, outcome(plan).by.pk) == ("superseded", other.pk)

    refresh(installed_runtime, 4, mode="apply")  # back to the plan's base
    assert outcome(plan).state == "pending"


def test_it_calls_a_plan_stale_when_no_record_explains_the_running_config(installed_runtime):
    plan = refresh(installed_runtime, 8)
    applied = refresh(installed_runtime, 6, mode="apply")
    applied.delete()  # as if the change came before changes were recorded

    assert outcome(plan).state == "stale"
    assert outcome(plan).running == installed_runtime.config.revision


def test_it_gives_no_outcome_to_what_is_not_an_ok_dry_run(installed_runtime):
    applied = refresh(installed_runtime, 8, mode="apply")
    no_change = refresh(installed_runtime, 8)

    assert outcomes([applied, no_change]) == {}


def test_it_lists_each_dry_run_with_its_outcome(admin_client, installed_runtime):
    superseded = refresh(installed_runtime, 5)
    plan = refresh(installed_runtime, 8)
    applied = apply_pinned(installed_runtime, plan)
    pending = refresh(installed_runtime, 6, reason="try six")

    content = admin_client.get(reverse(CHANGELIST)).content.decode()

    applied_url = reverse("admin:refresh_refreshrecord_change", args=[applied.pk])
    rows = {
        record.refresh_id: content.split(record.refresh_id)[1].split("</tr>")[0]
        for record in (superseded, plan, pending)
    }
    linked = f'<a href="{applied_url}" title="{{}} by {applied.refresh_id}">'
    assert linked.format("applied") in rows[plan.refresh_id]
    assert linked.format("superseded") in rows[superseded.refresh_id]
    assert '<span class="iop-status">pending</span>' in rows[pending.refresh_id]
    assert '<td class="field-reason_short">try six</td>' in rows[pending.refresh_id]


def test_it_lists_outcomes_in_queries_that_do_not_grow_with_the_page(
    admin_client, installed_runtime
):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse(CHANGELIST)).status_code == 200
        return len(captured)

    for capacity in (5, 6):
        refresh(installed_runtime, capacity)
    few = queries()
    for capacity in (7, 8, 9, 10, 11, 12):
        refresh(installed_runtime, capacity)
    refresh(installed_runtime, 7, mode="apply")

    assert queries() == few
