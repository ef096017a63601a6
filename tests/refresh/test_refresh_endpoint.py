"""`POST /refresh` and `GET /status` on the operator listener, through the real middleware."""

from __future__ import annotations

import pytest
from django.test import Client

from refresh.models import RefreshRecord
from tests.refresh.refresh_helpers import (
    OPERATOR_PORT,
    PUBLIC_PORT,
    STALE_BASE,
    make_config,
    with_adapter_change,
    with_capacity,
    yaml_of,
)

pytestmark = pytest.mark.django_db


class ListenerClient(Client):
    """A test client whose requests arrive on one listener's port (the middleware routes by it)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = str(port)

    def generic(self, *args, **extra):
        extra.setdefault("SERVER_PORT", self.port)
        return super().generic(*args, **extra)


@pytest.fixture
def operator(installed_runtime):
    """A client on the operator listener, from loopback (the test client's REMOTE_ADDR)."""
    return ListenerClient(OPERATOR_PORT)


def post(client, body, **extra):
    return client.post("/refresh", body, content_type="application/json", **extra)


def test_it_answers_a_dry_run_with_the_whole_result(operator, installed_runtime):
    response = post(
        operator,
        {"mode": "dry_run", "config_yaml": yaml_of(with_capacity(make_config(), 8))},
        HTTP_X_REQUEST_ID="req-42",
    )

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["mode"] == "dry_run"
    assert body["base_revision"] == installed_runtime.config.revision
    for key in ("changed_nodes", "changed_providers", "changed_models"):
        assert isinstance(body[key], list)
    assert body["restart_required_paths"] == body["errors"] == body["node_pushes"] == []
    assert body["changes"][0]["path"] == "nodes[node-a].providers[echo-1].capacity"
    record = RefreshRecord.objects.get(refresh_id=body["refresh_id"])
    assert (record.request_id, record.requested_by) == ("req-42", "loopback 127.0.0.1")


def test_it_applies_the_edges_own_file_without_a_candidate(operator, installed_runtime):
    installed_runtime.config_path.write_text(yaml_of(with_capacity(make_config(), 8)))

    response = post(operator, {"mode": "apply"})

    assert response.status_code == 200
    assert response.json()["status"] == "applied"
    assert installed_runtime.config.revision == response.json()["candidate_revision"]


@pytest.mark.parametrize(
    ("candidate", "base_revision", "code", "status"),
    [
        (make_config(), None, 200, "no_change"),
        (with_adapter_change(make_config()), None, 409, "restart_required"),
        (with_capacity(make_config(), 8), STALE_BASE, 412, "stale"),
        (with_capacity(make_config(), 0), None, 422, "invalid"),
    ],
)
def test_it_maps_each_outcome_to_an_http_status(operator, candidate, base_revision, code, status):
    body = {"mode": "apply", "config_yaml": yaml_of(candidate)}
    if base_revision:
        body["base_revision"] = base_revision

    response = post(operator, body)

    assert response.status_code == code
    assert response.json()["status"] == status


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"mode": "yes"},
        {"mode": "apply", "base_revision": "sha256:nothex"},
        {"mode": "apply", "config_yaml": ["version: 1"]},
    ],
)
def test_it_refuses_a_bad_body_and_records_nothing(operator, body):
    response = post(operator, body)

    assert response.status_code == 400
    assert not RefreshRecord.objects.exists()


def test_it_refuses_a_body_that_is_not_json(operator):
    response = operator.post("/refresh", "mode=apply", content_type="application/json")

    assert response.status_code == 400


def test_it_answers_loopback_only_whatever_the_proxy_headers_say(operator):
    response = post(
        operator,
        {"mode": "apply"},
        REMOTE_ADDR="10.0.0.5",
        HTTP_X_FORWARDED_FOR="127.0.0.1",
        HTTP_X_REAL_IP="127.0.0.1",
    )

    assert response.status_code == 403
    assert not RefreshRecord.objects.exists()


def test_it_is_not_served_on_the_public_listener(installed_runtime):
    public = ListenerClient(PUBLIC_PORT)

    assert post(public, {"mode": "dry_run"}).status_code == 404


def test_it_describes_refresh_in_the_openapi_schema(operator):
    response = operator.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    schema = response.json()
    assert "post" in schema["paths"]["/refresh"]
    assert {"200", "409", "412", "422"} <= set(schema["paths"]["/refresh"]["post"]["responses"])


def test_it_shows_the_running_revision_on_status(operator, installed_runtime):
    response = operator.get("/status")

    assert response.status_code == 200
    body = response.json()
    assert body["revision"] == installed_runtime.config.revision
    assert body["providers"]["echo-1"]["capacity"] == 4
    assert operator.get("/status", REMOTE_ADDR="192.0.2.1").status_code == 403
