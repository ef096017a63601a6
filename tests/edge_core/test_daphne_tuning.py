from __future__ import annotations

import pytest
from twisted.web.http import _parseContentType as twisted_parse

from iop_site.daphne_tuning import media_type

# Keep the original at import time: run_edge replaces it in its own process only.
ORIGINAL = twisted_parse


@pytest.mark.parametrize(
    "value",
    [
        b"application/json",
        b"Application/JSON; charset=utf-8",
        b"multipart/form-data; boundary=x",
        b"application/x-www-form-urlencoded",
        b" text/html ;q=1",
        b"garbage",
        b"",
        b"a/b/c",
        b"/x",
        b"x/",
        b";",
    ],
)
def test_it_parses_a_content_type_as_twisted_does(value: bytes) -> None:
    assert media_type(value) == ORIGINAL(value)
