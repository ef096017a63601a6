"""Refresh records in admin: a read-only list and a review page per refresh, like a change log.

Records are never added, edited or deleted here (every refresh writes its own). The review page
shows the plan as a table; an `ok` dry run can be applied from it with one POST, through the same
`run_refresh` action as `POST /refresh` and `manage.py refresh`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html_join
from django.views.decorators.http import require_POST

from edge.admin_mixins import ReadOnlyAdmin
from edge.runtime import get_runtime, runtime_installed
from refresh.actions import run_refresh
from refresh.classify import format_summary, render_value
from refresh.models import RefreshRecord
from refresh.plan import SUCCESSES
from refresh.report import changes_of, outcome, short_revision


@admin.register(RefreshRecord)
class RefreshRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "refresh_id",
        "mode",
        "status",
        "requested_by",
        "created_at",
        "candidate_short",
    )
    list_filter = ("mode", "status", "created_at")
    search_fields = ("refresh_id", "request_id", "base_revision", "candidate_revision")
    date_hierarchy = "created_at"
    list_select_related = ("user",)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "refresh_id",
                    "mode",
                    "status",
                    "requested_by",
                    "user",
                    "request_id",
                    "created_at",
                )
            },
        ),
        (
            "Revisions",
            {"fields": ("base_revision", "candidate_revision", "applied_from", "applied_by")},
        ),
    )
    readonly_fields = (
        "refresh_id",
        "mode",
        "status",
        "requested_by",
        "user",
        "request_id",
        "created_at",
        "base_revision",
        "candidate_revision",
        "applied_from",
        "applied_by",
    )

    @admin.display(description="candidate", ordering="candidate_revision")
    def candidate_short(self, record: RefreshRecord) -> str:
        return short_revision(record.candidate_revision)

    @admin.display(description="applied by")
    def applied_by(self, record: RefreshRecord) -> str:
        applications = record.applications.order_by("created_at", "id")
        if not applications:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a> ({})',
            (
                (reverse("admin:refresh_refreshrecord_change", args=[a.pk]), a.refresh_id, a.status)
                for a in applications
            ),
        )

    def get_urls(self) -> list[URLPattern]:
        apply = path(
            "<path:object_id>/apply/",
            self.admin_site.admin_view(self.apply_view),
            name="refresh_refreshrecord_apply",
        )
        # Before the default patterns: `<path:object_id>/` would swallow `…/apply/`.
        return [apply, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        record = self.get_object(request, unquote(object_id))
        if record is not None:
            review = review_of(record)
            review["can_apply"] = review["can_apply"] and may_apply(request)
            extra_context = {**(extra_context or {}), "refresh_review": review}
        return super().change_view(request, object_id, form_url, extra_context)

    @method_decorator(require_POST)
    def apply_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Apply a dry run's candidate YAML against the revision it was planned on."""
        record = self.get_object(request, unquote(object_id))
        if record is None:
            raise Http404("no such refresh record")
        if not may_apply(request):
            raise PermissionDenied
        here = reverse("admin:refresh_refreshrecord_change", args=[record.pk])
        if not is_applicable_plan(record):
            self.message_user(
                request,
                f"Only a dry run with status ok can be applied; this is a {record.mode} "
                f"that ended {record.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(here)
        if not runtime_installed():
            self.message_user(
                request, "This process does not run the Edge; apply from its admin.", messages.ERROR
            )
            return HttpResponseRedirect(here)
        result = async_to_sync(run_refresh)(
            get_runtime(),
            mode="apply",
            config_yaml=record.candidate_yaml,
            base_revision=record.base_revision,
            requested_by=f"admin {request.user.get_username()}",
            user_id=request.user.pk,
            request_id=request.headers.get("X-Request-Id", "")[:64],
            applied_from=record.pk,
        )
        applied = RefreshRecord.objects.get(refresh_id=result.refresh_id)
        done = result.status in SUCCESSES
        self.message_user(
            request, outcome(result.to_dict()), messages.SUCCESS if done else messages.ERROR
        )
        return HttpResponseRedirect(
            reverse("admin:refresh_refreshrecord_change", args=[applied.pk])
        )


def may_apply(request: HttpRequest) -> bool:
    return request.user.has_perm("refresh.apply_refreshrecord")


def is_applicable_plan(record: RefreshRecord) -> bool:
    return record.mode == "dry_run" and record.status == "ok"


def review_of(record: RefreshRecord) -> dict[str, Any]:
    """What the review template shows; values are plain strings, escaped by the template."""
    result = record.result or {}
    changes = changes_of(result)
    running = get_runtime().config.revision if runtime_installed() else None
    can_apply = is_applicable_plan(record)
    return {
        "changes": [
            {
                "path": change.path,
                "op": change.op,
                "old": "" if change.op == "added" else render_value(change.old),
                "new": "" if change.op == "removed" else render_value(change.new),
                "apply": change.apply,
            }
            for change in changes
        ],
        "errors": result.get("errors", []),
        "restart_required_paths": result.get("restart_required_paths", []),
        "node_pushes": result.get("node_pushes", []),
        "changed_nodes": result.get("changed_nodes", []),
        "changed_providers": result.get("changed_providers", []),
        "changed_models": result.get("changed_models", []),
        "summary": format_summary(changes),
        "outcome": outcome(result) if "status" in result else "",
        # An invalid candidate may hold what validation exists to keep out, such as a raw
        # credential (DESIGN §8), so its text is not shown; its errors say what was wrong.
        "candidate_yaml": "" if record.status == "invalid" else record.candidate_yaml,
        "can_apply": can_apply,
        "running_revision": running,
        "known_stale": can_apply and running is not None and running != record.base_revision,
        "apply_url": reverse("admin:refresh_refreshrecord_apply", args=[record.pk]),
    }
