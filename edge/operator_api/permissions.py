"""Loopback-only access for the operator surface."""

from __future__ import annotations

import ipaddress
from typing import Any

from rest_framework.permissions import BasePermission


def is_loopback_address(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class LoopbackOnly(BasePermission):
    """Only clients connecting from a loopback address.

    Reads the socket peer (REMOTE_ADDR) and never `X-Forwarded-For`, so a proxy header cannot
    open the operator surface; checked even though the listener itself is loopback-only.
    """

    message = "The operator API answers loopback clients only."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_loopback_address(request.META.get("REMOTE_ADDR"))
