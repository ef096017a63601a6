"""The dashboard's URLs, under `/admin/dashboard/` (iop_site.urls), staff only."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from edge.dashboard import views

urlpatterns = [
    path("", admin.site.admin_view(views.dashboard_page), name="edge-dashboard"),
    # Not behind admin_view: it answers 403 itself rather than redirecting to the login form.
    path("data.json", views.dashboard_feed, name="edge-dashboard-data"),
    path(
        "mirror/<str:kind>/<path:key>/",
        admin.site.admin_view(views.mirror_page),
        name="edge-dashboard-mirror",
    ),
]
