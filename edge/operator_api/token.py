"""The operator token: the bearer secret of the operator API, kept in a 0600 file, never in git.

The Edge creates it on its first start (`IOP_OPERATOR_TOKEN_FILE`, by default
`var/bootstrap/operator-token`) and keeps only its sha256 digest in memory; `manage.py refresh`
and `curl` read the file. Replacing the file takes effect at the next Edge start.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from pathlib import Path
from typing import Any

from django.conf import settings
from rest_framework.authentication import BaseAuthentication

from edge.bootstrap import token_in_file
from edge.tokens import bearer_token

# `request.auth` of a request that presented the operator token.
OPERATOR = "operator-token"


class OperatorTokenError(Exception):
    """The token file cannot be read or holds no token."""


def operator_token_file() -> Path:
    return Path(settings.IOP_OPERATOR_TOKEN_FILE)


def read_operator_token(path: Path) -> str:
    """The token in ``path`` (what the CLI sends); OperatorTokenError when there is none."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise OperatorTokenError(f"cannot read the operator token from {path}: {exc}") from None
    if not token:
        raise OperatorTokenError(f"the operator token file {path} is empty")
    return token


@functools.cache
def operator_token_digest(path: Path) -> bytes:
    """The digest of the token in ``path``, creating the file on the Edge's first start."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        token_in_file(path)
    except OSError as exc:
        raise OperatorTokenError(f"cannot create the operator token file {path}: {exc}") from None
    return hashlib.sha256(read_operator_token(path).encode()).digest()


def is_operator_token(presented: str) -> bool:
    """Compared as digests in constant time: the comparison says nothing about the token."""
    presented_digest = hashlib.sha256(presented.encode()).digest()
    return hmac.compare_digest(presented_digest, operator_token_digest(operator_token_file()))


class OperatorTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <operator token>`; a missing or wrong one is refused by
    `HasOperatorToken` (401), after the loopback and cross-site checks."""

    def authenticate(self, request: Any) -> tuple[None, str] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        token = bearer_token(header.encode("latin-1", "replace"))
        if token is not None and is_operator_token(token):
            return None, OPERATOR
        return None

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="operator"'
