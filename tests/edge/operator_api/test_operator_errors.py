"""Django's own answers on the operator listener are JSON: an exception no view handled is a
500 with a `detail`, its traceback only in the log (the 404 and 413 run in tests/e2e)."""

from __future__ import annotations

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from edge.operator_api import urls as operator_urls


def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug with a secret in it")


# This module stands in for the operator URLconf, with its error handlers and a broken view.
urlpatterns = [path("broken", broken)]
handler500 = operator_urls.handler500


@pytest.mark.urls(__name__)
def test_an_unhandled_exception_is_a_json_500_without_a_traceback() -> None:
    response = Client(raise_request_exception=False).get("/broken")

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Internal server error."}
    assert b"secret" not in response.content and b"Traceback" not in response.content
