"""The dashboard's admin views: staff only, the JSON feed, the links to and from mirror pages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from edge.config import load_config_text
from edge.dashboard.data import rows_as_dicts
from edge.mirror import import_config
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from nodes.models import Node
from providers.models import CatalogModel, Provider
from refresh.actions import run_refresh
from tests.refresh.refresh_helpers import (
    FakeNodeLink,
    connect_node,
    make_config,
    make_runtime,
    with_capacity,
    yaml_of,
)

pytestmark = pytest.mark.django_db

PAGE, FEED = reverse("edge-dashboard"), reverse("edge-dashboard-data")


@pytest.fixture
def runtime(tmp_path: Any) -> Iterator[EdgeRuntime]:
    """The process's Edge: one echo node `node-a` (provider `echo-1`, model `echo`), mirrored."""
    runtime = make_runtime(tmp_path)
    text = runtime.config_path.read_text()
    import_config(load_config_text(text), text, source="test")
    previous = get_runtime() if runtime_installed() else None
    install_runtime(runtime)
    yield runtime
    install_runtime(previous)


@pytest.fixture(params=["anonymous", "member"])
def outsider(request: pytest.FixtureRequest, client: Client) -> Client:
    """A client that is not staff: not logged in, or logged in as a user who is not staff."""
    if request.param == "member":
        client.force_login(User.objects.create_user("member", password="member-password-1"))
    return client


def feed(client: Client) -> dict[str, Any]:
    response = client.get(FEED)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    return json.loads(response.content)


def test_staff_get_the_page_with_its_script_and_feed(admin_client: Client, runtime) -> None:
    response = admin_client.get(PAGE)

    content = response.content.decode()
    assert response.status_code == 200
    assert f'data-feed-url="{FEED}"' in content
    assert "/static/edge/dashboard." in content  # served by our static files, no CDN
    assert "Live pool" in content


@pytest.mark.parametrize("page", [PAGE, reverse("edge-dashboard-mirror", args=["node", "node-a"])])
def test_others_are_sent_to_the_login_page(outsider: Client, page: str, runtime) -> None:
    response = outsider.get(page)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_the_feed_refuses_others_with_403(outsider: Client, runtime) -> None:
    response = outsider.get(FEED)

    assert response.status_code == 403
    assert json.loads(response.content) == {"detail": "Staff login required."}


def test_the_feed_shows_the_pool_as_the_runtime_sees_it(admin_client: Client, runtime) -> None:
    session = connect_node(runtime, FakeNodeLink())
    session.agent_version = "0.1.0"
    lease = runtime.pool.try_acquire("echo", 1)
    assert lease is not None

    data = feed(admin_client)

    assert data["revision"] == runtime.config.revision
    (node,) = rows_as_dicts(data["nodes"])
    assert (node["id"], node["ready"], node["agent_version"]) == ("node-a", True, "0.1.0")
    (provider,) = rows_as_dicts(data["providers"])
    assert (provider["id"], provider["in_flight"], provider["capacity"]) == ("echo-1", 1, 4)
    assert [m["id"] for m in rows_as_dicts(data["models"])] == ["echo"]
    lease.release()


def test_the_feed_is_never_cached_and_answers_get_only(admin_client: Client, runtime) -> None:
    assert "no-cache" in admin_client.get(FEED)["Cache-Control"]
    assert admin_client.post(FEED).status_code == 405


@pytest.mark.django_db(transaction=True)  # the refresh action writes through its own threads
def test_the_feed_lists_the_newest_refreshes_with_links(admin_client: Client, runtime) -> None:
    async_to_sync(run_refresh)(
        runtime,
        mode="dry_run",
        config_yaml=yaml_of(with_capacity(make_config(), 8)),
        requested_by="loopback 127.0.0.1",
    )

    (refresh,) = feed(admin_client)["refreshes"]

    assert (refresh["mode"], refresh["status"]) == ("dry_run", "ok")
    assert refresh["requested_by"] == "loopback 127.0.0.1"
    assert admin_client.get(refresh["url"]).status_code == 200
    assert refresh["refresh_id"] in admin_client.get(refresh["url"]).content.decode()


@pytest.mark.parametrize(
    ("kind", "key", "page", "model", "field"),
    [
        ("node", "node-a", "admin:nodes_node_change", Node, "node_id"),
        ("provider", "echo-1", "admin:providers_provider_change", Provider, "provider_id"),
        ("model", "echo", "admin:providers_catalogmodel_change", CatalogModel, "model_id"),
    ],
)
def test_a_row_links_to_its_mirror_page_and_back(
    admin_client: Client, runtime, kind: str, key: str, page: str, model: Any, field: str
) -> None:
    row = model.objects.get(**{field: key})

    response = admin_client.get(reverse("edge-dashboard-mirror", args=[kind, key]))

    assert response.status_code == 302
    assert response["Location"] == reverse(page, args=[row.pk])
    mirror_page = admin_client.get(response["Location"]).content.decode()
    assert f'href="{PAGE}#{kind}-{key}"' in mirror_page


@pytest.mark.parametrize(
    "changelist",
    [
        "admin:nodes_node_changelist",
        "admin:providers_provider_changelist",
        "admin:providers_catalogmodel_changelist",
    ],
)
def test_the_mirror_lists_link_each_row_to_the_dashboard(
    admin_client: Client, runtime, changelist: str
) -> None:
    content = admin_client.get(reverse(changelist)).content.decode()

    assert f'href="{PAGE}#' in content


@pytest.mark.parametrize(("kind", "key"), [("node", "node-unknown"), ("adapter", "echo")])
def test_an_unknown_row_or_kind_answers_404(admin_client: Client, runtime, kind, key) -> None:
    response = admin_client.get(reverse("edge-dashboard-mirror", args=[kind, key]))

    assert response.status_code == 404
