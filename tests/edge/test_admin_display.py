"""What every admin page shares: the site's name, its stylesheet, hashes, statuses, times."""

from __future__ import annotations

import hashlib

import pytest
from django.urls import reverse
from django.utils import timezone

from edge.admin_mixins import hash_display, status_badge
from edge.models import PrincipalToken
from nodes.models import Node

DIGEST = hashlib.sha256(b"a token").hexdigest()


def test_a_hash_shows_its_first_digits_and_the_whole_as_its_title() -> None:
    assert hash_display(DIGEST) == (
        f'<code class="iop-hash" title="{DIGEST}">{DIGEST[:12]}…</code>'
    )


def test_a_revision_keeps_its_algorithm() -> None:
    shown = hash_display(f"sha256:{DIGEST}")
    assert f">sha256:{DIGEST[:12]}…</code>" in shown
    assert f'title="sha256:{DIGEST}"' in shown


def test_a_short_or_missing_value_is_shown_as_it_is() -> None:
    assert hash_display("abc123") == '<code class="iop-hash" title="abc123">abc123</code>'
    assert hash_display("") == "-"
    assert hash_display(None) == "-"


def test_a_hash_is_escaped() -> None:
    assert "<b>" not in hash_display("<b>:x")


@pytest.mark.parametrize(
    ("status", "tone"),
    [
        ("ok", "good"),
        ("no_change", "good"),
        ("applied", "good"),
        ("stale", "warn"),
        ("superseded", "warn"),
        ("refused", "bad"),
        ("error", "bad"),
        ("invalid", "bad"),
    ],
)
def test_statuses_take_the_colour_of_their_tone(status: str, tone: str) -> None:
    assert status_badge(status) == (f'<span class="iop-status iop-status--{tone}">{status}</span>')


def test_an_unknown_status_is_not_coloured_unless_told() -> None:
    assert status_badge("queue_full") == '<span class="iop-status">queue_full</span>'
    assert 'iop-status--bad">queue_full<' in status_badge("queue_full", tone="bad")
    assert "<i>" not in status_badge("<i>")


# -- rendered pages ---------------------------------------------------------------------------


@pytest.fixture
def node(db) -> Node:
    return Node.objects.create(
        node_id="node-a",
        token_hash_sha256=DIGEST,
        last_acked_revision=f"sha256:{DIGEST}",
        last_acked_at=timezone.now(),
    )


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_every_page_is_named_styled_and_has_no_view_site_link(admin_client) -> None:
    html = page(admin_client, reverse("admin:index"))
    assert "<title>Site administration | IOP Edge</title>" in html
    assert '<div id="site-name"><a href="/admin/">IOP Edge</a></div>' in html
    assert "/static/edge/admin." in html  # the hashed name of edge/admin.css
    assert "View site" not in html


def test_token_hashes_look_the_same_on_every_page(admin_client, node) -> None:
    token = PrincipalToken.objects.create(
        token_ref="app-1", token_hash_sha256=DIGEST, principal_ref="team-a"
    )
    shown = hash_display(DIGEST)
    pages = [
        reverse("admin:edge_principaltoken_changelist"),
        reverse("admin:edge_principaltoken_change", args=[token.pk]),
        reverse("admin:nodes_node_change", args=[node.pk]),
    ]
    for url in pages:
        assert shown in page(admin_client, url), url


def test_times_show_their_zone(admin_client, node) -> None:
    html = page(admin_client, reverse("admin:nodes_node_changelist"))
    assert timezone.localtime(node.last_acked_at).strftime("%Y-%m-%d %H:%M:%S UTC") in html
