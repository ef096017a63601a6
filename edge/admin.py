from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, F, QuerySet, Sum
from django.http import HttpRequest
from django.utils import timezone

from edge.admin_mixins import ReadOnlyAdmin
from edge.models import ConfigRevision, PrincipalToken, UsageRecord


@admin.register(PrincipalToken)
class PrincipalTokenAdmin(ReadOnlyAdmin):
    list_display = ("token_ref", "principal_ref", "alias", "short_hash")
    list_filter = ("principal_ref",)
    search_fields = ("token_ref", "principal_ref", "alias")

    @admin.display(description="token hash")
    def short_hash(self, obj: PrincipalToken) -> str:
        return f"{obj.token_hash_sha256[:12]}…"


@admin.register(ConfigRevision)
class ConfigRevisionAdmin(ReadOnlyAdmin):
    list_display = ("revision", "active", "source", "created_at")
    list_filter = ("active", "created_at")
    search_fields = ("revision", "source")
    fields = ("revision", "active", "source", "created_at", "yaml_text")
    readonly_fields = fields


class PeriodFilter(admin.SimpleListFilter):
    """The period the list and its sums cover."""

    title = "period"
    parameter_name = "period"
    PERIODS = {
        "1h": timedelta(hours=1),
        "24h": timedelta(days=1),
        "7d": timedelta(days=7),
        "30d": timedelta(days=30),
    }

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [
            ("1h", "Last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("30d", "Last 30 days"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        span = self.PERIODS.get(self.value() or "")
        return queryset.filter(created_at__gte=timezone.now() - span) if span else queryset


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """Usage rows, read-only, with sums per principal and per token_ref over the filtered rows."""

    list_display = (
        "created_at",
        "principal_ref",
        "token_ref",
        "model",
        "provider",
        "node",
        "context_class",
        "prompt_tokens",
        "completion_tokens",
        "queue_ms",
        "total_ms",
        "status",
        "attempts",
        "providers_tried",
    )
    list_filter = (
        PeriodFilter,
        "principal_ref",
        "token_ref",
        "model",
        "provider",
        "status",
        "context_class",
    )
    search_fields = ("request_id", "principal_ref", "token_ref", "alias", "model")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in UsageRecord._meta.fields]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)  # absent on a redirect
        changelist = context.get("cl") if context is not None else None
        if context is not None and changelist is not None:
            rows = changelist.queryset.order_by()
            context["usage_sums"] = {
                "principal": usage_sums(rows, "principal_ref"),
                "token": usage_sums(rows, "principal_ref", "token_ref"),
            }
        return response


def usage_sums(rows: QuerySet, *keys: str) -> list[dict[str, Any]]:
    """Requests and tokens per group of ``keys``, largest first."""
    # Aliases unlike the field names: an annotation named `prompt_tokens` would make the
    # `F("prompt_tokens")` of the total refer to that aggregate (Django refuses a Sum of it).
    groups = (
        rows.values(*keys)
        .annotate(
            requests=Count("id"),
            prompt_sum=Sum("prompt_tokens"),
            completion_sum=Sum("completion_tokens"),
            total_sum=Sum(F("prompt_tokens") + F("completion_tokens")),
        )
        .order_by("-total_sum", *keys)
    )
    return [
        {
            **{key: group[key] for key in keys},
            "requests": group["requests"],
            "prompt_tokens": group["prompt_sum"],
            "completion_tokens": group["completion_sum"],
            "total_tokens": group["total_sum"],
        }
        for group in groups
    ]
