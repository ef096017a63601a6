"""Bearer tokens: how they are read from a header and hashed (only hashes are ever kept)."""

from __future__ import annotations

import hashlib


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer_token(authorization: bytes) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None for anything else."""
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
