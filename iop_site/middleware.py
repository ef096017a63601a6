"""Serve the operator URLconf on the operator listener, the public one elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest

from edge.runtime import runtime_installed
from iop_site.listeners import OPERATOR, listener_of_port

OPERATOR_URLCONF = "edge.operator_api.urls"


class ListenerURLConfMiddleware:
    """Picks the URLconf by listener; works in both sync and async stacks without a thread hop."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if runtime_installed():
            port = request.META.get("SERVER_PORT")
            if listener_of_port(int(port) if port and port.isdigit() else None) == OPERATOR:
                # Django reads a per-request `urlconf` attribute; the stubs do not declare it.
                request.urlconf = OPERATOR_URLCONF  # type: ignore[attr-defined]
        return self.get_response(request)
