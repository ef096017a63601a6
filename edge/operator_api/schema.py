"""The operator API's OpenAPI schema (`GET /api/schema/`), its generator loaded on first use.

drf-spectacular's generator and its extensions import DRF's and Django's test clients (and so
`unittest`) at module level, and so does its `extend_schema` when it decorates: about 2 MB of a
serving Edge that no answer but this one needs. A view's method says what the schema tells of it
with `described`, which only notes it; the first schema request hands the notes to
`extend_schema`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

Method = TypeVar("Method", bound=Callable[..., Any])

_descriptions: list[tuple[Callable[..., Any], dict[str, Any]]] = []


def described(**extend_schema_kwargs: Any) -> Callable[[Method], Method]:
    """`drf_spectacular.utils.extend_schema(**extend_schema_kwargs)`, applied when the schema is
    first asked for."""

    def note(method: Method) -> Method:
        _descriptions.append((method, extend_schema_kwargs))
        return method

    return note


@csrf_exempt  # as every DRF view is: the operator token, not a cookie, authenticates
def schema_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
    return _view()(request, *args, **kwargs)


@functools.cache
def _view() -> Callable[..., HttpResponseBase]:
    from drf_spectacular.utils import extend_schema
    from drf_spectacular.views import SpectacularAPIView

    from edge.operator_api import token_schema  # noqa: F401  # registers the token's scheme
    from edge.operator_api.base import OperatorAPIView

    for method, kwargs in _descriptions:
        extend_schema(**kwargs)(method)
    return SpectacularAPIView.as_view(
        urlconf="edge.operator_api.urls",
        authentication_classes=OperatorAPIView.authentication_classes,
        permission_classes=OperatorAPIView.permission_classes,
    )
