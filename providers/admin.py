from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from edge.admin_mixins import ReadOnlyAdmin, ReadOnlyInline
from edge.dashboard.links import dashboard_link
from providers.models import CatalogModel, Provider, Route


@admin.register(Provider)
class ProviderAdmin(ReadOnlyAdmin):
    list_display = (
        "provider_id",
        "node",
        "adapter",
        "enabled",
        "capacity",
        "long_context_slots",
        "priority",
        "max_queue",
        "queue_timeout_s",
        "live",
    )
    list_filter = ("enabled", "node", "priority")
    # An adapter names itself by its node: without adapter__node every row costs a query.
    list_select_related = ("node", "adapter", "adapter__node")
    search_fields = ("provider_id", "node__node_id", "served_models")
    readonly_fields = ("live",)

    @admin.display(description="live state")
    def live(self, provider: Provider) -> str:
        return dashboard_link("provider", provider.provider_id)


class RouteInline(ReadOnlyInline):
    model = Route
    fields = ("provider", "served_model")
    readonly_fields = fields


@admin.register(CatalogModel)
class CatalogModelAdmin(ReadOnlyAdmin):
    list_display = ("model_id", "default_max_tokens", "max_tokens_limit", "route_count", "live")
    list_filter = ("routes__provider", "routes__provider__node")
    search_fields = ("model_id", "routes__provider__provider_id")
    inlines = [RouteInline]
    readonly_fields = ("live",)

    @admin.display(description="live state")
    def live(self, model: CatalogModel) -> str:
        return dashboard_link("model", model.model_id)

    def get_queryset(self, request: HttpRequest) -> QuerySet[CatalogModel]:
        return super().get_queryset(request).annotate(routes_total=Count("routes"))

    @admin.display(description="routes", ordering="routes_total")
    def route_count(self, obj: CatalogModel) -> int:
        return obj.routes_total  # type: ignore[attr-defined]  # added by the annotation above


@admin.register(Route)
class RouteAdmin(ReadOnlyAdmin):
    list_display = ("model", "provider", "served_model")
    list_filter = ("model", "provider")
    list_select_related = ("model", "provider")
    search_fields = ("model__model_id", "provider__provider_id", "served_model")
