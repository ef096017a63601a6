"""URLs of the loopback operator listener (`edge.admin_listen`): the operator API only."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from refresh.permissions import LoopbackOnly
from refresh.status import StatusView
from refresh.views import RefreshView

urlpatterns = [
    path("refresh", RefreshView.as_view(), name="refresh"),
    path("status", StatusView.as_view(), name="status"),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(
            urlconf="iop_site.operator_urls", permission_classes=[LoopbackOnly]
        ),
        name="schema",
    ),
]
