"""The admin login: throttled per username, and usable behind a TLS front."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

PASSWORD = "the-right-password-1"
LOGIN = "/admin/login/?next=/admin/"


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_superuser("admin", "", PASSWORD)


def log_in(client: Client, password: str, **headers: str):
    return client.post(LOGIN, {"username": "admin", "password": password}, **headers)


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_the_right_password_logs_in(admin_user) -> None:
    client = Client()

    assert log_in(client, PASSWORD).status_code == 302
    assert logged_in(client)


def test_after_the_failure_limit_even_the_right_password_is_refused(admin_user) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        log_in(client, "wrong")

    answer = log_in(client, PASSWORD)

    assert answer.status_code == 429
    assert not logged_in(client)
    # Per username: the same account from a fresh client (another address, no cookies) too.
    other = Client(REMOTE_ADDR="203.0.113.9")
    assert log_in(other, PASSWORD).status_code == 429
    assert not logged_in(other)


def test_a_success_before_the_limit_resets_the_count(admin_user) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(client, "wrong")

    assert log_in(client, PASSWORD).status_code == 302


# What a TLS front passes on: the Host and Origin the browser used, and that it came over https.
TLS_FRONT = {
    "HTTP_HOST": "testserver",
    "HTTP_X_FORWARDED_PROTO": "https",
    "HTTP_ORIGIN": "https://testserver",
}


def csrf_login(client: Client) -> int:
    """A browser's login through the front: the form's CSRF token, the https Origin."""
    form = client.get(LOGIN, **TLS_FRONT).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    data = {"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": token}
    return client.post(LOGIN, data, **TLS_FRONT).status_code


def test_behind_a_tls_front_without_its_settings_the_login_fails_csrf(admin_user) -> None:
    assert csrf_login(Client(enforce_csrf_checks=True)) == 403


@override_settings(
    SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    SESSION_COOKIE_SECURE=True,
    CSRF_COOKIE_SECURE=True,
)
def test_behind_a_tls_front_with_its_settings_the_login_works(admin_user) -> None:
    client = Client(enforce_csrf_checks=True)

    assert csrf_login(client) == 302
    assert logged_in(client)
    assert client.cookies["sessionid"]["secure"] and client.cookies["csrftoken"]["secure"]
