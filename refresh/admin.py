"""Refresh records in admin: a read-only list and a review page per refresh, like a change log.

Records are never added, edited or deleted here (every refresh writes its own). The review page
shows the plan as a table and what became of it; *Apply this plan* on an `ok` dry run opens a
confirmation page (GET) whose button applies it (POST), through the same `run_refresh` action as
`POST /refresh` and `manage.py refresh`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.views.decorators.http import require_http_methods

from edge.admin_mixins import ReadOnlyAdmin, hash_display, status_badge
from edge.ha.role import STANDBY_REFRESH_REFUSAL
from edge.runtime import get_runtime, runtime_installed
from refresh.actions import run_refresh
from refresh.actor import by_admin
from refresh.history import is_plan, outcomes
from refresh.models import MAX_REASON_CHARS, RefreshRecord
from refresh.outcome import Outcome, describe
from refresh.plan import SUCCESSES
from refresh.report import outcome
from refresh.review import review_of

LIST_REASON_CHARS = 40


class ApplyForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=MAX_REASON_CHARS,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text=f"Why, kept on the apply's record (up to {MAX_REASON_CHARS} characters).",
    )


class RecordChangeList(ChangeList):
    """The page's records, each dry run with its outcome (two queries for the page)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        found = outcomes(self.result_list)
        for record in self.result_list:
            record.plan_outcome = found.get(record.pk)


@admin.register(RefreshRecord)
class RefreshRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "refresh_id",
        "mode",
        "status_column",
        "outcome_column",
        "requested_by",
        "reason_short",
        "created_at",
        "candidate_short",
    )
    list_filter = ("mode", "status", "created_at")
    search_fields = (
        "refresh_id",
        "request_id",
        "base_revision",
        "candidate_revision",
        "requested_by",
        "reason",
    )
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
                    "reason",
                    "user",
                    "token_name",
                    "os_user",
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
        "reason",
        "user",
        "token_name",
        "os_user",
        "request_id",
        "created_at",
        "base_revision",
        "candidate_revision",
        "applied_from",
        "applied_by",
    )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RecordChangeList

    @admin.display(description="status", ordering="status")
    def status_column(self, record: RefreshRecord) -> str:
        return status_badge(record.status)

    @admin.display(description="outcome")
    def outcome_column(self, record: RefreshRecord) -> str:
        """A dry run's fate, linked to the record that applied or superseded it."""
        fate: Outcome | None = getattr(record, "plan_outcome", None)
        if fate is None:
            return "-"
        if fate.by is None:
            return status_badge(fate.state)
        url = reverse("admin:refresh_refreshrecord_change", args=[fate.by.pk])
        return format_html(
            '<a href="{}" title="{} by {}">{}</a>',
            url,
            fate.state,
            fate.by.refresh_id,
            status_badge(fate.state),
        )

    @admin.display(description="reason", ordering="reason")
    def reason_short(self, record: RefreshRecord) -> str:
        return Truncator(record.reason).chars(LIST_REASON_CHARS) or "-"

    @admin.display(description="candidate", ordering="candidate_revision")
    def candidate_short(self, record: RefreshRecord) -> str:
        return hash_display(record.candidate_revision)

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

    @method_decorator(require_http_methods(["GET", "POST"]))
    def apply_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what applying the dry run would do, with a confirm button; POST: apply it."""
        record = self.get_object(request, unquote(object_id))
        if record is None:
            raise Http404("no such refresh record")
        if not may_apply(request):
            raise PermissionDenied
        here = reverse("admin:refresh_refreshrecord_change", args=[record.pk])
        fate = outcomes([record]).get(record.pk)
        refusal = _refusal(record, fate)
        if refusal:
            self.message_user(request, refusal, messages.ERROR)
            return HttpResponseRedirect(here)
        form = ApplyForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            return self._carry_out(request, record, form.cleaned_data["reason"])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": record,
            "title": f"Apply {record.refresh_id}?",
            "form": form,
            "review": review_of(record),
            "warning": (
                f"{describe(fate, record.base_revision)} An apply will be refused as stale: "
                "run a new dry run."
                if fate is not None and fate.state != "pending"
                else ""
            ),
            "review_url": here,
        }
        return TemplateResponse(
            request, "admin/refresh/refreshrecord/apply_confirmation.html", context
        )

    def _carry_out(self, request: HttpRequest, record: RefreshRecord, reason: str) -> HttpResponse:
        """Apply the recorded candidate YAML against the revision it was planned on."""
        result = async_to_sync(run_refresh)(
            get_runtime(),
            mode="apply",
            config_yaml=record.candidate_yaml,
            base_revision=record.base_revision,
            requested_by=by_admin(request.user.get_username()),
            user_id=request.user.pk,
            request_id=request.headers.get("X-Request-Id", "")[:64],
            applied_from=record.pk,
            reason=reason,
        )
        applied = RefreshRecord.objects.get(refresh_id=result.refresh_id)
        done = result.status in SUCCESSES
        self.message_user(
            request, outcome(result.to_dict()), messages.SUCCESS if done else messages.ERROR
        )
        return HttpResponseRedirect(
            reverse("admin:refresh_refreshrecord_change", args=[applied.pk])
        )


def _refusal(record: RefreshRecord, fate: Outcome | None) -> str:
    """Why this record cannot be applied from here at all, or ``""``."""
    if not is_plan(record):
        return (
            f"Only a dry run with status ok can be applied; this is a {record.mode} "
            f"that ended {record.status}."
        )
    if fate is not None and fate.state == "applied":
        return f"This plan was already applied: {describe(fate, record.base_revision)}"
    if not runtime_installed():
        return "This process does not run the Edge; apply from its admin."
    if not get_runtime().leadership.admitting:
        return STANDBY_REFRESH_REFUSAL
    return ""


def may_apply(request: HttpRequest) -> bool:
    return request.user.has_perm("refresh.apply_refreshrecord")
