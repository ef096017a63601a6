"""Refresh records in admin: the list, the review page, "Apply this plan", read-only records."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from nodes.models import Node
from providers.models import Provider
from refresh.actions import run_refresh
from refresh.models import RefreshRecord
from tests.refresh.refresh_helpers import (
    FakeNodeLink,
    connect_node,
    edited,
    make_config,
    with_adapter_change,
    with_capacity,
    yaml_of,
)

pytestmark = pytest.mark.django_db


def make_record(runtime, config, mode="dry_run", **kwargs) -> RefreshRecord:
    result = async_to_sync(run_refresh)(
        runtime,
        mode=mode,
        config_yaml=config if isinstance(config, str) else yaml_of(config),
        requested_by="loopback 127.0.0.1",
        **kwargs,
    )
    return RefreshRecord.objects.get(refresh_id=result.refresh_id)


def review_url(record: RefreshRecord) -> str:
    return reverse("admin:refresh_refreshrecord_change", args=[record.pk])


def apply_url(record: RefreshRecord) -> str:
    return reverse("admin:refresh_refreshrecord_apply", args=[record.pk])


def test_it_lists_records_with_filters_and_search(admin_client, installed_runtime):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))
    make_record(installed_runtime, with_adapter_change(make_config()))

    response = admin_client.get(reverse("admin:refresh_refreshrecord_changelist"))

    content = response.content.decode()
    assert response.status_code == 200
    assert plan.refresh_id in content and "restart_required" in content
    assert plan.candidate_revision[:19] in content  # the short candidate revision
    for choice in ("?mode=dry_run", "?status=ok", "?status=restart_required", "?created_at__gte="):
        assert f'href="{choice}' in content  # the mode, status and date filters
    searched = admin_client.get(
        reverse("admin:refresh_refreshrecord_changelist"), {"q": plan.candidate_revision}
    )
    assert list(searched.context["cl"].result_list) == [plan]


def test_it_reviews_changes_with_live_and_restart_badges(admin_client, installed_runtime):
    record = make_record(installed_runtime, with_adapter_change(with_capacity(make_config(), 8)))

    response = admin_client.get(review_url(record))

    content = response.content.decode()
    assert response.status_code == 200
    assert "<code>nodes[node-a].providers[echo-1].capacity</code>" in content
    assert "<code>4</code>" in content and "<code>8</code>" in content
    assert '<span class="refresh-badge refresh-badge-live">live</span>' in content
    assert '<span class="refresh-badge refresh-badge-restart">restart</span>' in content
    assert 'id="refresh-restart-paths"' in content
    assert "<li><code>nodes[node-a].adapters[echo-2]</code></li>" in content
    assert "Restart required: 1 change cannot apply live" in content
    assert record.base_revision in content and record.candidate_revision in content
    assert "Apply this plan" not in content


def test_it_reviews_node_pushes_of_an_apply(admin_client, installed_runtime):
    connect_node(installed_runtime, FakeNodeLink(answer="rejected", error="adapters[echo]: bad"))
    record = make_record(installed_runtime, with_capacity(make_config(), 8), mode="apply")

    content = admin_client.get(review_url(record)).content.decode()

    assert 'id="refresh-node-pushes"' in content
    assert '<td class="refresh-push-rejected">rejected</td>' in content
    assert "adapters[echo]: bad" in content


def test_it_escapes_the_candidate_yaml(admin_client, installed_runtime):
    text = "# <b>bold</b> comment\n" + yaml_of(with_capacity(make_config(), 8))
    record = make_record(installed_runtime, text)

    content = admin_client.get(review_url(record)).content.decode()

    assert "<b>bold</b>" not in content
    assert "# &lt;b&gt;bold&lt;/b&gt; comment" in content


def test_it_escapes_errors_and_withholds_an_invalid_candidate(admin_client, installed_runtime):
    config = make_config()
    config["<script>alert(1)</script>"] = 1
    config["nodes"][0]["adapters"][0]["api_key"] = "sk-raw-secret-value"
    record = make_record(installed_runtime, config)

    content = admin_client.get(review_url(record)).content.decode()

    assert record.status == "invalid"
    assert 'id="refresh-errors"' in content
    assert "<script>alert(1)</script>" not in content
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content
    assert "nodes[node-a].adapters[echo].api_key" in content
    assert "sk-raw-secret-value" not in content
    assert 'id="refresh-candidate-withheld"' in content


def test_it_applies_an_ok_plan_through_its_confirmation_page(
    admin_client, admin_user, installed_runtime
):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))
    review = admin_client.get(review_url(plan)).content.decode()
    assert f'href="{apply_url(plan)}">Apply this plan…</a>' in review
    assert "Pending: the Edge still runs this plan&#x27;s base" in review

    confirmation = admin_client.get(apply_url(plan))

    content = confirmation.content.decode()
    assert confirmation.status_code == 200
    assert "Plan: 1 change (1 live, 0 restart required)." in content
    assert "<code>nodes[node-a].providers[echo-1].capacity</code>" in content
    assert 'value="Yes, apply this plan"' in content and 'id="refresh-stale-warning"' not in content
    assert installed_runtime.config.revision == plan.base_revision  # a GET changes nothing
    assert not RefreshRecord.objects.filter(applied_from=plan).exists()

    response = admin_client.post(apply_url(plan), {"reason": "more room for echo"}, follow=True)

    applied = RefreshRecord.objects.get(applied_from=plan)
    assert response.redirect_chain == [(review_url(applied), 302)]
    assert (applied.mode, applied.status) == ("apply", "applied")
    assert applied.requested_by == f"admin {admin_user.username}"
    assert applied.user == admin_user
    assert applied.reason == "more room for echo"
    assert applied.candidate_yaml == plan.candidate_yaml
    assert installed_runtime.config.revision == plan.candidate_revision
    content = response.content.decode()
    assert "Applied sha256:" in content and "no Node config changed" not in content
    assert "not_connected" in content  # node-a changed but no Node is connected
    assert "more room for echo" in content
    # The plan's page now says it was applied, by which record, and offers no apply.
    review = admin_client.get(review_url(plan)).content.decode()
    assert f"Applied by {applied.refresh_id} (admin {admin_user.username}) at " in review
    assert "Apply this plan" not in review


def test_it_never_applies_an_applied_plan_again(admin_client, installed_runtime):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))
    admin_client.post(apply_url(plan))
    count = RefreshRecord.objects.count()

    shown = admin_client.get(apply_url(plan), follow=True)
    posted = admin_client.post(apply_url(plan), follow=True)

    for response in (shown, posted):
        assert response.redirect_chain == [(review_url(plan), 302)]
        assert "This plan was already applied: Applied by rf-" in response.content.decode()
    assert RefreshRecord.objects.count() == count


def test_it_refuses_a_reason_too_long_and_applies_nothing(admin_client, installed_runtime):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))

    response = admin_client.post(apply_url(plan), {"reason": "x" * 501})

    assert response.status_code == 200
    assert "Ensure this value has at most 500 characters (it has 501)." in response.content.decode()
    assert not RefreshRecord.objects.filter(applied_from=plan).exists()
    assert installed_runtime.config.revision == plan.base_revision


def test_it_warns_of_a_stale_plan_at_the_top_and_refuses_it(admin_client, installed_runtime):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))
    other = make_record(installed_runtime, with_capacity(make_config(), 6), mode="apply")
    running = installed_runtime.config
    review = admin_client.get(review_url(plan)).content.decode()
    assert f"Superseded by {other.refresh_id} (loopback 127.0.0.1) at " in review

    confirmation = admin_client.get(apply_url(plan)).content.decode()

    warning = confirmation.index('id="refresh-stale-warning"')
    assert warning < confirmation.index('id="refresh-changes"')
    assert (
        f"took the Edge from this plan&#x27;s base {plan.base_revision} to {running.revision}"
        in confirmation
    )
    assert "An apply will be refused as stale: run a new dry run." in confirmation

    response = admin_client.post(apply_url(plan), follow=True)

    refused = RefreshRecord.objects.get(applied_from=plan)
    assert refused.status == "stale"
    assert installed_runtime.config is running
    content = response.content.decode()
    assert "Stale: the plan was made against" in content
    assert f"config is now {running.revision}; plan again" in content


def test_it_applies_only_ok_dry_runs(admin_client, installed_runtime):
    restart = make_record(installed_runtime, with_adapter_change(make_config()))
    count = RefreshRecord.objects.count()

    posted = admin_client.post(apply_url(restart), follow=True)
    shown = admin_client.get(apply_url(restart), follow=True)

    assert RefreshRecord.objects.count() == count
    for response in (posted, shown):
        assert "Only a dry run with status ok can be applied" in response.content.decode()
    assert admin_client.put(apply_url(restart)).status_code == 405


def test_it_shows_what_a_list_gained_and_links_each_path_to_its_object(
    admin_client, installed_runtime
):
    def edit(config):
        config["nodes"][0]["providers"][0]["served_models"] = ["echo-big", "echo-small"]
        config["nodes"][0]["providers"].append(
            {"id": "echo-2", "adapter": "echo", "served_models": ["echo-small"], "capacity": 1}
        )

    record = make_record(installed_runtime, edited(make_config(), edit))

    content = admin_client.get(review_url(record)).content.decode()

    provider = Provider.objects.get(provider_id="echo-1")
    provider_url = reverse("admin:providers_provider_change", args=[provider.pk])
    path = "nodes[node-a].providers[echo-1].served_models"
    assert f'<a href="{provider_url}"><code>{path}</code></a>' in content
    assert '<span class="refresh-added">+ <code>echo-big</code></span>' in content
    assert '<code>["echo-big","echo-small"]</code>' not in content  # no whole arrays
    # An item the plan adds has no mirror row yet: shown, not linked.
    assert "<td><code>nodes[node-a].providers[echo-2]</code></td>" in content


def test_it_needs_staff_and_a_csrf_token_to_apply(admin_user, installed_runtime):
    plan = make_record(installed_runtime, with_capacity(make_config(), 8))
    anonymous = Client()
    assert anonymous.post(apply_url(plan)).status_code == 302  # to the login page
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    assert strict.post(apply_url(plan)).status_code == 403
    clerk = User.objects.create_user("clerk", password="x", is_staff=True)
    clerk_client = Client()
    clerk_client.force_login(clerk)
    assert clerk_client.post(apply_url(plan)).status_code == 403  # no view permission

    assert not RefreshRecord.objects.filter(applied_from=plan).exists()
    assert installed_runtime.config.revision == plan.base_revision


def test_it_lets_a_viewer_review_but_never_edit(installed_runtime):
    record = make_record(installed_runtime, with_capacity(make_config(), 8))
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_refreshrecord"))
    client = Client()
    client.force_login(viewer)

    assert client.get(review_url(record)).status_code == 200
    assert client.post(review_url(record), {"status": "applied"}).status_code == 403
    record.refresh_from_db()
    assert record.status == "ok"


def test_it_applies_only_for_users_with_the_apply_permission(installed_runtime):
    record = make_record(installed_runtime, with_capacity(make_config(), 8))
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_refreshrecord"))
    client = Client()
    client.force_login(viewer)

    assert "Apply this plan" not in client.get(review_url(record)).content.decode()
    apply_url = reverse("admin:refresh_refreshrecord_apply", args=[record.pk])
    assert client.get(apply_url).status_code == 403
    assert client.post(apply_url).status_code == 403
    assert installed_runtime.config.revision == record.base_revision

    viewer.user_permissions.add(Permission.objects.get(codename="apply_refreshrecord"))
    client.force_login(User.objects.get(pk=viewer.pk))
    assert "Apply this plan" in client.get(review_url(record)).content.decode()
    assert client.post(apply_url).status_code == 302
    assert installed_runtime.config.revision == record.candidate_revision


def test_it_offers_no_add_change_or_delete(admin_client, installed_runtime):
    record = make_record(installed_runtime, with_capacity(make_config(), 8))

    assert admin_client.get(reverse("admin:refresh_refreshrecord_add")).status_code == 403
    assert admin_client.post(review_url(record), {"status": "applied"}).status_code == 403
    delete = reverse("admin:refresh_refreshrecord_delete", args=[record.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    changelist = admin_client.get(reverse("admin:refresh_refreshrecord_changelist"))
    assert "delete_selected" not in changelist.content.decode()
    record.refresh_from_db()
    assert record.status == "ok"


def test_it_shows_the_revision_a_node_last_acked(admin_client, installed_runtime):
    revision = installed_runtime.config.revision
    Node.objects.filter(node_id="node-a").update(
        last_acked_revision=revision, last_acked_at=timezone.now()
    )
    node = Node.objects.get(node_id="node-a")

    listing = admin_client.get(reverse("admin:nodes_node_changelist")).content.decode()
    detail = admin_client.get(reverse("admin:nodes_node_change", args=[node.pk]))

    assert f"{revision[:19]}…" in listing
    assert revision in detail.content.decode()
    readonly = detail.context["adminform"].readonly_fields
    assert {"last_acked_revision", "last_acked_at"} <= set(readonly)
