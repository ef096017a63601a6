"""The dashboard's admin views: the page, the JSON it polls, and a row's way to its mirror page.

Staff only, as every admin page: the page sends others to the login, the JSON answers them 403
(a polling script gets an answer it can read, not a login form).
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from edge.dashboard.data import PoolReading, SharedFeed, dashboard_data, read_pool
from edge.runtime import EdgeRuntime, get_runtime
from nodes.models import Node
from providers.models import CatalogModel, Provider
from refresh.models import RefreshRecord

REFRESHES_SHOWN = 5
# Viewers polling within this long of each other share one reading of the pool.
SHARED_FOR_S = 0.5

# A dashboard row's kind -> its mirror model, the field holding the config id, its admin page.
MIRRORS: dict[str, tuple[type[Model], str, str]] = {
    "node": (Node, "node_id", "admin:nodes_node_change"),
    "provider": (Provider, "provider_id", "admin:providers_provider_change"),
    "model": (CatalogModel, "model_id", "admin:providers_catalogmodel_change"),
}


def dashboard_page(request: HttpRequest) -> TemplateResponse:
    context = {
        **admin.site.each_context(request),
        "title": "Live pool",
        "feed_url": reverse("edge-dashboard-data"),
        "mirror_url": reverse("edge-dashboard-mirror", args=["KIND", "KEY"]),
    }
    return TemplateResponse(request, "admin/dashboard/index.html", context)


@never_cache
@require_GET
def dashboard_feed(request: HttpRequest) -> HttpResponse:
    if not admin.site.has_permission(request):
        return JsonResponse({"detail": "Staff login required."}, status=403)
    return HttpResponse(FEED.get(get_runtime()), content_type="application/json")


def mirror_page(request: HttpRequest, kind: str, key: str) -> HttpResponse:
    """The mirror admin page of a Node, provider or model the dashboard names by config id."""
    if kind not in MIRRORS:
        raise Http404(f"no mirror page for {kind!r}")
    model, field, page = MIRRORS[kind]
    row = get_object_or_404(model, **{field: key})
    return redirect(page, row.pk)


def _feed_body(runtime: EdgeRuntime) -> bytes:
    data = dashboard_data(async_to_sync(_read_on_loop)(runtime))
    data["refreshes"] = _recent_refreshes()
    return json.dumps(data, separators=(",", ":")).encode()


async def _read_on_loop(runtime: EdgeRuntime) -> PoolReading:
    # Sync views run in a worker thread; async_to_sync runs this on the loop that owns the pool.
    return read_pool(runtime)


def _recent_refreshes() -> list[dict[str, Any]]:
    records = RefreshRecord.objects.only(
        "refresh_id", "mode", "status", "requested_by", "created_at"
    )[:REFRESHES_SHOWN]
    return [
        {
            "refresh_id": record.refresh_id,
            "mode": record.mode,
            "status": record.status,
            "requested_by": record.requested_by,
            "created_at": record.created_at.isoformat(),
            "url": reverse("admin:refresh_refreshrecord_change", args=[record.pk]),
        }
        for record in records
    ]


FEED = SharedFeed(_feed_body, max_age_s=SHARED_FOR_S)
