"""Links from the mirror admin pages to a row of the live dashboard."""

from __future__ import annotations

from urllib.parse import quote

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString


def row_anchor(kind: str, key: str) -> str:
    """The id of a Node's, provider's or model's row on the dashboard (its script uses the same
    ``<kind>-<config id>``)."""
    return f"{kind}-{key}"


def dashboard_link(kind: str, key: str) -> SafeString:
    url = f"{reverse('edge-dashboard')}#{quote(row_anchor(kind, key), safe='')}"
    return format_html(
        '<a href="{}" title="This {} on the live pool dashboard">live</a>', url, kind
    )
