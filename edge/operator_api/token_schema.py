"""The operator token in the OpenAPI schema, loaded with the schema's generator
(`edge.operator_api.schema`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from edge.operator_api.token import OperatorTokenAuthentication


class OperatorTokenScheme(OpenApiAuthenticationExtension):
    """An HTTP bearer scheme."""

    target_class = OperatorTokenAuthentication
    name = "operatorToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}
