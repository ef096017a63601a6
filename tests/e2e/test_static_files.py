"""The admin's static files, served by a real Edge from what `collectstatic` gathered."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import echo_config
from tests.e2e.nodes_support import two_ports

BASE_CSS = "admin/css/base.css"
# Larger than one read chunk of the middleware: its streaming takes several.
JQUERY = "admin/js/vendor/jquery/jquery.js"
YEAR_S = 365 * 24 * 3600


@pytest.fixture(scope="module")
def edge(tokens, edge_factory):
    return edge_factory(echo_config(tokens, *two_ports()))


@pytest.fixture(scope="module")
def hashed(collected_static: Path) -> dict[str, str]:
    """Original name -> hashed name, from the manifest `collectstatic` wrote."""
    return json.loads((collected_static / "staticfiles.json").read_text())["paths"]


def get(edge, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{edge.base_url}/static/{path}", headers=headers, timeout=30)


def max_age(response: httpx.Response) -> int:
    directives = dict(
        part.strip().partition("=")[::2] for part in response.headers["cache-control"].split(",")
    )
    return int(directives["max-age"])


def test_a_hashed_name_is_cached_for_a_year(edge, hashed):
    response = get(edge, hashed[BASE_CSS], **{"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")
    assert max_age(response) >= YEAR_S
    assert "immutable" in response.headers["cache-control"]
    assert b"--header-bg" in response.content


def test_the_plain_name_is_served_with_a_short_cache(edge, collected_static):
    response = get(edge, BASE_CSS, **{"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert max_age(response) < YEAR_S
    assert response.content == (collected_static / BASE_CSS).read_bytes()


def test_gzip_goes_to_clients_that_take_it(edge, hashed, collected_static):
    name = hashed[JQUERY]
    with httpx.stream(
        "GET", f"{edge.base_url}/static/{name}", headers={"Accept-Encoding": "gzip"}, timeout=30
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-encoding"] == "gzip"
        assert "Accept-Encoding" in response.headers["vary"]
        body = b"".join(response.iter_raw())  # as sent, not decoded
    assert gzip.decompress(body) == (collected_static / name).read_bytes()


def test_a_file_larger_than_one_read_chunk_arrives_whole(edge, hashed, collected_static):
    name = hashed[JQUERY]
    response = get(edge, name, **{"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.content == (collected_static / name).read_bytes()


def test_a_cached_copy_is_confirmed_without_a_body(edge, hashed):
    first = get(edge, hashed[BASE_CSS])
    again = get(edge, hashed[BASE_CSS], **{"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert again.content == b""


def test_unknown_files_are_not_found(edge):
    assert get(edge, "admin/css/no-such-file.css").status_code == 404


def test_static_files_are_public_listener_only(edge, hashed):
    url = f"{edge.operator_url}/static/{hashed[BASE_CSS]}"
    assert httpx.get(url, timeout=30).status_code == 404
    assert httpx.get(url, headers=edge.operator_headers(), timeout=30).status_code == 404
