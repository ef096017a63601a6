"""The static files middleware in both of Django's stacks (the Edge runs the async one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from iop_site.static_files import PublicStaticFilesMiddleware

BASE_CSS = "admin/css/base.css"
# Closing a response (which closes its file) sends `request_finished`: Django then closes the
# database connections, which pytest-django allows only to database tests.
closes_a_response = pytest.mark.django_db


def request(path: str) -> HttpRequest:
    return RequestFactory().get(path)


@closes_a_response
async def test_in_the_async_stack_a_file_streams_through_an_async_iterator(
    collected_static: Path,
) -> None:
    async def django_view(request: HttpRequest) -> HttpResponse:
        raise AssertionError("a static file never reaches the views")

    middleware = PublicStaticFilesMiddleware(django_view)
    assert iscoroutinefunction(middleware)  # Django keeps the stack async: no thread hop
    response = await middleware(request(f"/static/{BASE_CSS}"))
    assert response.status_code == 200
    assert response.is_async
    assert (
        b"".join([chunk async for chunk in response]) == (collected_static / BASE_CSS).read_bytes()
    )
    response.close()


async def test_in_the_async_stack_other_paths_go_on_to_django() -> None:
    async def django_view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("from django")

    response = await PublicStaticFilesMiddleware(django_view)(request("/admin/login/"))
    assert response.content == b"from django"


@closes_a_response
def test_in_the_sync_stack_a_file_is_served_as_whitenoise_serves_it(
    collected_static: Path,
) -> None:
    middleware = PublicStaticFilesMiddleware(lambda request: HttpResponse("from django"))
    assert not iscoroutinefunction(middleware)
    response = middleware(request(f"/static/{BASE_CSS}"))
    assert response.status_code == 200
    assert b"".join(response) == (collected_static / BASE_CSS).read_bytes()
    response.close()
    assert middleware(request("/admin/login/")).content == b"from django"
