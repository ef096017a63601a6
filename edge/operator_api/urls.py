"""URLconf of the loopback operator listener (`edge.admin_listen`): the operator API only."""

from __future__ import annotations

from django.urls import path

from edge.operator_api.metrics import MetricsView
from edge.operator_api.schema import schema_view
from edge.operator_api.status import StatusView
from refresh.views import RefreshView

urlpatterns = [
    path("refresh", RefreshView.as_view(), name="refresh"),
    path("status", StatusView.as_view(), name="status"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("api/schema/", schema_view, name="schema"),
]

# Django's own answers on this listener are JSON too (edge.operator_api.errors).
handler400 = "edge.operator_api.errors.bad_request"
handler403 = "edge.operator_api.errors.forbidden"
handler404 = "edge.operator_api.errors.not_found"
handler500 = "edge.operator_api.errors.server_error"
