"""`POST /refresh` and `GET /status` on the operator listener, through the real middleware."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.test.client import encode_multipart

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

    def __init__(self, port: int, **defaults) -> None:
        super().__init__(**defaults)
        self.port = str(port)

    def generic(self, *args, **extra):
        extra.setdefault("SERVER_PORT", self.port)
        return super().generic(*args, **extra)


@pytest.fixture
def operator(installed_runtime, operator_token):
    """A client on the operator listener, from loopback (the test client's REMOTE_ADDR), that
    sends the operator token."""
    return ListenerClient(OPERATOR_PORT, HTTP_AUTHORIZATION=f"Bearer {operator_token}")


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
    assert (record.request_id, record.requested_by) == ("req-42", "operator-token from 127.0.0.1")
    assert (record.token_name, record.os_user, record.reason) == ("operator-token", "", "")


def test_it_records_the_reason_and_the_reported_os_user(operator):
    response = post(
        operator,
        {
            "mode": "dry_run",
            "config_yaml": yaml_of(with_capacity(make_config(), 8)),
            "reason": "  ticket OPS-12: more room  ",
        },
        HTTP_X_OPERATOR_USER="alice",
    )

    assert response.status_code == 200
    record = RefreshRecord.objects.get(refresh_id=response.json()["refresh_id"])
    assert record.reason == "ticket OPS-12: more room"
    assert (record.token_name, record.os_user) == ("operator-token", "alice")
    assert record.requested_by == "alice with operator-token"
    assert "reason" not in response.json()  # the result keeps its shape


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("x" * 501, "Ensure this field has no more than 500 characters."),
        (5, "Must be a string."),
        (True, "Must be a string."),
        (["why"], "Must be a string."),
        (None, "This field may not be null."),
    ],
)
def test_it_refuses_a_reason_that_is_too_long_or_not_a_string(operator, reason, message):
    response = post(operator, {"mode": "dry_run", "reason": reason})

    assert response.status_code == 400
    assert response.json() == {"reason": [message]}
    assert not RefreshRecord.objects.exists()


@pytest.mark.parametrize("os_user", ["x" * 65, " alice", "al\x01ice", "élise"])
def test_it_refuses_a_malformed_os_user_header(operator, os_user):
    response = post(operator, {"mode": "dry_run"}, HTTP_X_OPERATOR_USER=os_user)

    assert response.status_code == 400
    assert list(response.json()) == ["X-Operator-User"]
    assert "printable ASCII" in response.json()["X-Operator-User"][0]
    assert not RefreshRecord.objects.exists()


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


def test_it_is_not_served_on_the_public_listener(installed_runtime, operator_token):
    public = ListenerClient(PUBLIC_PORT, HTTP_AUTHORIZATION=f"Bearer {operator_token}")

    assert post(public, {"mode": "dry_run"}).status_code == 404


def test_it_describes_refresh_in_the_openapi_schema(operator):
    response = operator.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    schema = response.json()
    assert "post" in schema["paths"]["/refresh"]
    assert {"200", "409", "412", "422"} <= set(schema["paths"]["/refresh"]["post"]["responses"])
    assert schema["paths"]["/status"]["get"]["summary"] == "Pool and Node status"
    metrics = schema["paths"]["/metrics"]["get"]
    assert metrics["summary"] == "Prometheus metrics"
    assert "text/plain" in metrics["responses"]["200"]["content"]
    assert schema["components"]["securitySchemes"]["operatorToken"] == {
        "type": "http",
        "scheme": "bearer",
    }
    assert metrics["security"] == [{"operatorToken": []}]


def test_it_shows_the_running_revision_on_status(operator, installed_runtime):
    response = operator.get("/status")

    assert response.status_code == 200
    body = response.json()
    assert body["revision"] == installed_runtime.config.revision
    assert body["providers"]["echo-1"]["capacity"] == 4
    assert operator.get("/status", REMOTE_ADDR="192.0.2.1").status_code == 403


# -- who may call the operator API --------------------------------------------------------------

APPLY = {"mode": "apply", "config_yaml": yaml_of(with_capacity(make_config(), 8))}


def assert_nothing_applied(runtime, revision):
    assert runtime.config.revision == revision
    assert runtime.config_path.read_text() == yaml_of(make_config())
    assert not RefreshRecord.objects.exists()


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", f"mode=apply&config_yaml={APPLY['config_yaml']}"),
        ("text/plain", json.dumps(APPLY)),
        ("multipart/form-data; boundary=B", None),
    ],
)
def test_it_refuses_a_body_that_is_not_json(operator, installed_runtime, content_type, body):
    """A page of any site can send a form or text/plain without asking; JSON it cannot."""
    revision = installed_runtime.config.revision
    if body is None:
        body = encode_multipart("B", APPLY)

    response = operator.post("/refresh", body, content_type=content_type)

    assert response.status_code == 415
    assert "Unsupported media type" in response.json()["detail"]
    assert_nothing_applied(installed_runtime, revision)


def test_the_body_is_parsed_from_the_stream_without_a_copy_kept(operator):
    response = post(operator, {"mode": "dry_run", "config_yaml": yaml_of(make_config())})

    assert response.status_code == 200
    # A copy of the body kept on the request outlives it once a refresh froze the request's
    # objects (edge.operator_api.base.OperatorJSONParser).
    assert "_body" not in vars(response.wsgi_request)


def test_it_refuses_malformed_json(operator):
    response = operator.post("/refresh", "mode=apply", content_type="application/json")

    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_it_refuses_json_nested_too_deeply_as_a_parse_error(operator):
    response = post(operator, "[" * 100_000 + "]" * 100_000)

    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]


def test_it_refuses_a_body_over_the_limit(operator, installed_runtime, settings):
    revision = installed_runtime.config.revision
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"mode": "apply", "config_yaml": " " * limit})

    response = post(operator, body)

    assert response.status_code == 413
    assert "too large" in response.json()["detail"]
    assert_nothing_applied(installed_runtime, revision)


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_ORIGIN": "https://evil.example"},
        {"HTTP_ORIGIN": "null"},
        # Another origin on the operator listener's port (ALLOWED_HOSTS refuses its own Host).
        {"HTTP_ORIGIN": f"http://evil.example:{OPERATOR_PORT}"},
        {"HTTP_SEC_FETCH_SITE": "cross-site"},
        {"HTTP_SEC_FETCH_SITE": "same-site"},
    ],
)
def test_it_refuses_a_cross_site_browser_request(operator, installed_runtime, headers):
    revision = installed_runtime.config.revision

    response = post(operator, APPLY, **headers)

    assert response.status_code == 403
    assert "Cross-site request refused" in response.json()["detail"]
    assert operator.get("/status", **headers).status_code == 403
    assert_nothing_applied(installed_runtime, revision)


def test_it_serves_a_request_of_its_own_origin(operator):
    own = {"HTTP_ORIGIN": f"http://127.0.0.1:{OPERATOR_PORT}", "HTTP_SEC_FETCH_SITE": "same-origin"}

    assert post(operator, {"mode": "dry_run"}, **own).status_code == 200
    assert operator.get("/status", HTTP_SEC_FETCH_SITE="none").status_code == 200


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic b3A6b3A=", "Bearer"])
@pytest.mark.parametrize(
    ("method", "path"), [("post", "/refresh"), ("get", "/status"), ("get", "/api/schema/")]
)
def test_it_needs_the_operator_token(
    installed_runtime, operator_token, settings, authorization, method, path
):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    client = ListenerClient(OPERATOR_PORT, **headers)
    revision = installed_runtime.config.revision

    if method == "post":
        response = client.post(path, APPLY, content_type="application/json")
    else:
        response = client.get(path, HTTP_ACCEPT="application/json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="operator"'
    detail = response.json()["detail"]
    assert "operator token" in detail and str(settings.IOP_OPERATOR_TOKEN_FILE) in detail
    assert operator_token not in response.content.decode()
    assert_nothing_applied(installed_runtime, revision)


def test_it_answers_a_stranger_403_before_asking_for_the_token(installed_runtime, operator_token):
    stranger = ListenerClient(OPERATOR_PORT, HTTP_AUTHORIZATION="Bearer wrong-token")

    response = stranger.get("/status", REMOTE_ADDR="192.0.2.1")

    assert response.status_code == 403
    assert response.json() == {"detail": "The operator API answers loopback clients only."}


def test_it_describes_the_operator_token_in_the_schema(operator):
    schema = operator.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    scheme = schema["components"]["securitySchemes"]["operatorToken"]
    assert scheme == {"type": "http", "scheme": "bearer"}
    assert schema["paths"]["/refresh"]["post"]["security"] == [{"operatorToken": []}]
