"""The operator token file: created once, owner-only, and never an empty token."""

from __future__ import annotations

import os
import stat

import pytest

from edge.operator_api.token import OperatorTokenError, operator_token_digest, read_operator_token


@pytest.fixture
def permissive_umask():
    """The mode must come from creating the file, not from a strict umask."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_creates_the_token_owner_only_on_first_use(tmp_path, permissive_umask):
    path = tmp_path / "bootstrap" / "operator-token"

    operator_token_digest(path)

    token = read_operator_token(path)
    assert token.startswith("iop_") and len(token) > 40
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_it_keeps_an_existing_token(tmp_path):
    path = tmp_path / "operator-token"
    path.write_text("chosen-by-the-operator\n")

    operator_token_digest(path)

    assert read_operator_token(path) == "chosen-by-the-operator"


def test_it_refuses_an_empty_token_file(tmp_path):
    path = tmp_path / "operator-token"
    path.write_text("\n")

    with pytest.raises(OperatorTokenError, match="is empty"):
        operator_token_digest(path)


def test_it_names_the_file_it_cannot_read(tmp_path):
    path = tmp_path / "missing"

    with pytest.raises(OperatorTokenError, match=f"cannot read the operator token from {path}"):
        read_operator_token(path)
