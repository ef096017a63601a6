"""URLconf of the loopback operator listener (`edge.admin_listen`): the operator API only."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from edge.operator_api.permissions import LoopbackOnly
from edge.operator_api.status import StatusView
from refresh.views import RefreshView

urlpatterns = [
    path("refresh", RefreshView.as_view(), name="refresh"),
    path("status", StatusView.as_view(), name="status"),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(urlconf=__name__, permission_classes=[LoopbackOnly]),
        name="schema",
    ),
]
