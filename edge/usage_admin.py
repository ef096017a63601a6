"""The usage admin: the rows (newest first, never counted whole), their sums, and CSV of both.

Every page here costs about the same at a million rows as at a thousand: the list reads one
page through an index that matches its filter and counts at most `CappedPaginator.cap` rows;
filter choices and sums come from the rollups (`edge/usage_rollup.py`), not from the rows.
"""

from __future__ import annotations

from datetime import UTC
from functools import cached_property
from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from edge.admin_mixins import ReadOnlyAdmin
from edge.models import UsageRecord
from edge.usage_html import rows_table, sums_table
from edge.usage_report import filter_choices, rows_csv, sum_rows, sums_csv
from edge.usage_scope import PERIODS, SUM_FILTERS, ScopeError, period_start, scope_from
from edge.usage_tables import filter_links, sums_tables
from providers.models import Provider

CONTEXT_CLASSES = ("normal", "long")
# The list's filters the sums cannot apply (the rollup has no such column).
LIST_ONLY_FILTERS = ("provider", "context_class", "q")
SUMS_TEMPLATE = "admin/edge/usagerecord/sums.html"


class PeriodFilter(admin.SimpleListFilter):
    """The period the rows cover, starting where the sums' does (`edge/usage_scope.py`)."""

    title = "period"
    parameter_name = "period"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(key, name) for key, (name, _) in PERIODS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        try:
            since = period_start(self.value() or "", timezone.now())
        except ScopeError as error:
            raise IncorrectLookupParameters(str(error)) from None
        return queryset if since is None else queryset.filter(created_at__gte=since)


class ValueFilter(admin.SimpleListFilter):
    """An exact-value filter on the column ``parameter_name`` names, offering the values of
    `offered` (from somewhere cheaper than the rows: a DISTINCT over a million rows is a full
    index scan on every page load)."""

    parameter_name: str

    def offered(self) -> list[str]:
        """The rollup's values, busiest first; subclasses with another source override it."""
        return filter_choices(self.parameter_name)

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(value, value or "(none)") for value in self.offered()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.parameter_name: value})


class PrincipalFilter(ValueFilter):
    title = parameter_name = "principal_ref"


class TokenFilter(ValueFilter):
    title = parameter_name = "token_ref"


class ModelFilter(ValueFilter):
    title = parameter_name = "model"


class StatusFilter(ValueFilter):
    title = parameter_name = "status"


class ProviderFilter(ValueFilter):
    """Providers of the running config (the mirror); a former one still filters by URL."""

    title = parameter_name = "provider"

    def offered(self) -> list[str]:
        return list(Provider.objects.values_list("provider_id", flat=True))


class ContextClassFilter(ValueFilter):
    title = parameter_name = "context_class"

    def offered(self) -> list[str]:
        return list(CONTEXT_CLASSES)


class CappedPaginator(Paginator):
    """Counts the matching rows up to ``cap``, never the whole table: past it the list says
    "10,000+" and older rows are reached by narrowing the period or the filters."""

    cap = 10_000
    capped = False

    @cached_property
    def count(self) -> int:
        rows = cast(QuerySet, self.object_list)
        # Unordered: which rows are counted does not matter, and an ordered count makes the
        # database walk them in the list's order instead of taking its best index.
        found = rows.order_by()[: self.cap + 1].count()
        self.capped = found > self.cap
        return min(found, self.cap)

    @property
    def count_text(self) -> str:
        """The count as the page says it: "37", "10,000+"."""
        return f"{self.count:,}{'+' if self.capped else ''}"


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """Usage rows, read-only, newest first; the sums are a page of their own (`sums/`)."""

    # The columns the rows table shows (`rows_table`); the admin's own per-cell rendering costs
    # several times more than the page's queries, and it is what a browsing operator repeats.
    list_display = ("created_at",)
    list_filter = (
        PeriodFilter,
        PrincipalFilter,
        TokenFilter,
        ModelFilter,
        StatusFilter,
        ProviderFilter,
        ContextClassFilter,
    )
    search_fields = ("request_id",)
    search_help_text = "A request id, exactly (the x-request-id header of the answer)."
    sortable_by = ()
    readonly_fields = [f.name for f in UsageRecord._meta.fields]
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        # Exact and indexed: a substring search would read every row.
        term = search_term.strip()
        return (queryset.filter(request_id=term) if term else queryset), False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("sums/", view(self.sums_view), name="edge_usagerecord_sums"),
            path("sums/csv/", view(self.sums_csv_view), name="edge_usagerecord_sums_csv"),
            path("csv/", view(self.rows_csv_view), name="edge_usagerecord_csv"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        params = request.GET
        context = {
            # The sums take the period and the filters they know; the page says what they leave.
            "sums_query": urlencode(
                {name: params[name] for name in ("period", *SUM_FILTERS) if name in params}
            ),
            "sums_left_out": [name for name in LIST_ONLY_FILTERS if params.get(name)],
            "rows_query": params.urlencode(),
            **(extra_context or {}),
        }
        response = super().changelist_view(request, context)
        data = getattr(response, "context_data", None)  # absent on a redirect
        if data is not None and "cl" in data:
            data["usage_rows"] = rows_table(data["cl"].result_list)
        return response

    def sums_view(self, request: HttpRequest) -> TemplateResponse:
        self._check_view(request)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Usage sums",
        }
        try:
            scope = scope_from(request.GET.dict(), timezone.now())
        except ScopeError as error:
            context["error"] = str(error)
            return TemplateResponse(request, SUMS_TEMPLATE, context, status=400)
        by_day = sum_rows(scope, ("day",))
        by_token_model = sum_rows(scope, ("principal_ref", "token_ref", "model"))
        context.update(
            scope=scope,
            tables=[
                (sums_table(table), table.more)
                for table in sums_tables(by_token_model, by_day, scope)
            ],
            has_rows=bool(by_day),
            filters=filter_links(scope, {field: filter_choices(field) for field in SUM_FILTERS}),
        )
        return TemplateResponse(request, SUMS_TEMPLATE, context)

    def sums_csv_view(self, request: HttpRequest) -> HttpResponse:
        self._check_view(request)
        try:
            scope = scope_from(request.GET.dict(), timezone.now())
        except ScopeError as error:
            return HttpResponse(f"{error}\n", status=400, content_type="text/plain")
        response = HttpResponse(sums_csv(sum_rows(scope)), content_type="text/csv")
        response["Content-Disposition"] = _attachment("usage-sums", scope.period)
        return response

    def rows_csv_view(self, request: HttpRequest) -> HttpResponseBase:
        """The rows the list shows with the same parameters, all of them, streamed."""
        self._check_view(request)
        try:
            rows = self.get_changelist_instance(request).queryset
        except IncorrectLookupParameters as error:
            return HttpResponse(f"{error}\n", status=400, content_type="text/plain")
        response = StreamingHttpResponse(rows_csv(rows), content_type="text/csv")
        period = request.GET.get("period", "")
        response["Content-Disposition"] = _attachment("usage-rows", period)
        return response

    def _check_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied


def _attachment(name: str, period: str) -> str:
    """A file name that says what it holds and when it was taken: usage-sums-24h-….csv."""
    stamp = f"{timezone.now().astimezone(UTC):%Y%m%dT%H%MZ}"
    return f'attachment; filename="{name}-{period if period in PERIODS else "all"}-{stamp}.csv"'
