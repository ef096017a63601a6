"""The operator listener's own error answers: JSON like its views', never Django's HTML pages.

DRF answers what its views raise; these are what Django answers around them (an unknown path, a
request Django refuses before a view runs, an exception a view did not handle).
"""

from __future__ import annotations

import json

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse

_TOO_LARGE = {"detail": "The request body is too large."}
# The same answer when daphne refuses the body before Django sees it (iop_site.daphne_tuning).
BODY_TOO_LARGE = json.dumps(_TOO_LARGE).encode()


def bad_request(request: HttpRequest, exception: Exception) -> JsonResponse:
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(_TOO_LARGE, status=413)
    return JsonResponse({"detail": "Bad request."}, status=400)


def forbidden(request: HttpRequest, exception: Exception) -> JsonResponse:
    return JsonResponse({"detail": "Forbidden."}, status=403)


def not_found(request: HttpRequest, exception: Exception) -> JsonResponse:
    return JsonResponse({"detail": "Not found."}, status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    # The traceback is in the Edge's log (django.request), never in the answer.
    return JsonResponse({"detail": "Internal server error."}, status=500)
