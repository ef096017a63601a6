"""Who may call the operator API: a loopback peer, not a browser page of another site, holding
the operator token. Checked in that order; each refusal raises its own answer (403 or 401)."""

from __future__ import annotations

import ipaddress
from typing import Any

from rest_framework.exceptions import NotAuthenticated, PermissionDenied
from rest_framework.permissions import BasePermission

from edge.operator_api.token import OPERATOR, operator_token_file
from edge.runtime import get_runtime

# What a browser sends on a request a page of this origin made itself, or a typed-in URL.
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})


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
        if not is_loopback_address(request.META.get("REMOTE_ADDR")):
            raise PermissionDenied(self.message)
        return True


def operator_origin() -> str:
    """The operator listener's own origin, as configured (not the request's Host, which a
    DNS-rebinding page controls)."""
    return f"http://{get_runtime().config.edge.admin_listen}".lower()


class SameSiteOnly(BasePermission):
    """No browser request made by a page of another site (cross-site request forgery).

    Browsers name the page's origin in `Origin` and the relation in `Sec-Fetch-Site`; a page
    cannot drop or forge either. Scripts such as curl send neither.
    """

    def has_permission(self, request: Any, view: Any) -> bool:
        origin = request.META.get("HTTP_ORIGIN")
        if origin is not None and origin.lower() != operator_origin():
            raise PermissionDenied(
                f"Cross-site request refused: the Origin header is not {operator_origin()}."
            )
        fetch_site = request.META.get("HTTP_SEC_FETCH_SITE")
        if fetch_site is not None and fetch_site.lower() not in SAME_SITE_FETCHES:
            raise PermissionDenied("Cross-site request refused: Sec-Fetch-Site is not same-origin.")
        return True


class HasOperatorToken(BasePermission):
    """The request presented the operator token (`OperatorTokenAuthentication`)."""

    def has_permission(self, request: Any, view: Any) -> bool:
        if request.auth != OPERATOR:
            # 401 with `WWW-Authenticate: Bearer` from the view's authenticator. Only loopback
            # clients get here, so naming the file helps and tells nobody else anything.
            raise NotAuthenticated(
                "Missing or wrong operator token: send Authorization: Bearer <token> with the "
                f"token in {operator_token_file()} (IOP_OPERATOR_TOKEN_FILE)."
            )
        return True


OPERATOR_PERMISSIONS = [LoopbackOnly, SameSiteOnly, HasOperatorToken]
