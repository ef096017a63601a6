"""The slow-client settings: a value that makes no sense stops the Edge, naming the setting."""

from __future__ import annotations

import pytest

from tests.iop_site.test_size_settings import django_check


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IOP_REQUEST_READ_TIMEOUT_S", "0"),
        ("IOP_REQUEST_READ_TIMEOUT_S", "-1"),
        ("IOP_MAX_CONNECTIONS_PER_PEER", "-1"),
    ],
)
def test_a_bad_value_stops_the_edge_with_its_name(tmp_path, name: str, value: str) -> None:
    result = django_check(tmp_path, IOP_GENERATE_SECRET_KEY="true", **{name: value})

    assert result.returncode != 0
    assert f"{name} must be" in result.stderr


def test_no_cap_is_fine(tmp_path) -> None:
    result = django_check(
        tmp_path, IOP_GENERATE_SECRET_KEY="true", IOP_MAX_CONNECTIONS_PER_PEER="0"
    )

    assert result.returncode == 0, result.stderr
