"""Usage metering, its admin sums, and where raw tokens must never show up (DESIGN §7, §8).

One Edge (logging at DEBUG, a 1.5 s run deadline) and one Node. The module's first test sends a
known set of requests as `app-1` and `app-2`; the later tests read what the Edge made of them:
the rows in its own SQLite, the sums in Django admin, and the absence of every raw client and
Node token from the database dump, the logs and the admin pages.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import ROOT, Tokens, echo_config, sha256_hex, wait_until
from tests.edge.test_usage_admin import cells as table_cells

RUN_TIMEOUT_S = 1.5
SLOW_TEXT = " ".join(f"w{i}" for i in range(20))  # 21 reply tokens at 200 ms: past the deadline
ADMIN_USER = "operator"
ADMIN_PASSWORD = f"pw-{uuid.uuid4().hex}"
BOGUS_CLIENT_TOKEN = f"client-bogus-{uuid.uuid4().hex}"
BOGUS_NODE_TOKEN = f"node-bogus-{uuid.uuid4().hex}"


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    served = {"served_models": ["echo-small"]}
    return echo_config(
        tokens,
        public,
        admin,
        adapters=[
            {"id": "echo", "type": "echo"},
            {"id": "slow", "type": "echo", "token_delay_ms": 200},
        ],
        providers=[
            {"id": "echo-1", "adapter": "echo", "capacity": 4, **served},
            {"id": "slow-1", "adapter": "slow", "capacity": 2, **served},
        ],
        extra_nodes=[
            {
                "id": "node-d",
                "token_hash_sha256": sha256_hex(tokens.node("node-d")),
                "adapters": [{"id": "echo", "type": "echo"}],
                "providers": [{"id": "echo-d", "adapter": "echo", "capacity": 1, **served}],
            }
        ],
        models=[
            {"id": "echo", "providers": {"echo-1": "echo-small"}},
            {"id": "slow", "providers": {"slow-1": "echo-small"}},
        ],
    )


@pytest.fixture(scope="module")
def stack(openai_stack_factory):
    stack = openai_stack_factory(
        build_config, env={"IOP_RUN_TIMEOUT_S": str(RUN_TIMEOUT_S), "LOG_LEVEL": "DEBUG"}
    )
    stack.start_node("node-a")
    return stack


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def echo_usage(text: str) -> tuple[int, int]:
    """(prompt, completion) tokens the echo Node reports for one user message ``text``."""
    return math.ceil(len(text) / 4), 1 + len(text.split())


def _rid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def traffic(stack) -> dict[str, dict[str, Any]]:
    """The module's requests, each with the usage row it should leave behind."""
    app1, app2 = stack.client("app-1"), stack.client("app-2")
    expected: dict[str, dict[str, Any]] = {}
    ok = {"provider": "echo-1", "node": "node-a", "context_class": "normal", "status": "ok"}
    team_a = {"principal_ref": "team-a", "model": "echo"}

    rid = _rid("app1-plain")
    text = "alpha beta"
    app1.chat.completions.create(
        model="echo", messages=user(text), extra_headers={"x-request-id": rid}
    )
    prompt, completion = echo_usage(text)
    expected[rid] = {
        **team_a,
        **ok,
        "token_ref": "app-1",
        "alias": "first app",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
    }

    rid = _rid("app1-stream")
    text = "gamma delta epsilon"
    chunks = list(
        app1.chat.completions.create(
            model="echo",
            messages=user(text),
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-request-id": rid},
        )
    )
    prompt, completion = echo_usage(text)
    assert chunks[-1].usage.prompt_tokens == prompt
    assert chunks[-1].usage.completion_tokens == completion
    expected[rid] = {
        **team_a,
        **ok,
        "token_ref": "app-1",
        "alias": "first app",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
    }

    rid = _rid("app2-plain")
    text = "zeta"
    app2.chat.completions.create(
        model="echo", messages=user(text), extra_headers={"x-request-id": rid}
    )
    prompt, completion = echo_usage(text)
    expected[rid] = {
        **team_a,
        **ok,
        "token_ref": "app-2",
        "alias": "",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
    }

    rid = _rid("app2-404")
    with pytest.raises(openai.NotFoundError):
        app2.chat.completions.create(
            model="no-such-model", messages=user("x"), extra_headers={"x-request-id": rid}
        )
    expected[rid] = {
        "principal_ref": "team-a",
        "token_ref": "app-2",
        "model": "no-such-model",
        "provider": "",
        "node": "",
        "context_class": "",
        "status": "model_not_found",
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }

    rid = _rid("app1-504")
    with pytest.raises(openai.APIStatusError) as caught:
        app1.chat.completions.create(
            model="slow", messages=user(SLOW_TEXT), extra_headers={"x-request-id": rid}
        )
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "deadline_exceeded"
    expected[rid] = {
        **team_a,
        "model": "slow",
        "token_ref": "app-1",
        "provider": "slow-1",
        "node": "node-a",
        "context_class": "normal",
        "status": "deadline_exceeded",
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }

    # Refused before the model lookup: metered nowhere.
    stranger = stack.client(api_key=BOGUS_CLIENT_TOKEN)
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(
            model="echo", messages=user("x"), extra_headers={"x-request-id": "unmetered-401"}
        )
    stack.wait_idle("echo-1", "slow-1")
    return expected


def test_every_request_past_the_model_lookup_leaves_a_usage_row(stack, traffic):
    for request_id, want in traffic.items():
        [row] = stack.wait_usage(request_id=request_id)
        assert {key: row[key] for key in want} == want, request_id
        assert row["total_ms"] > 0
        assert row["queue_ms"] >= 0
        assert row["created_at"]
    assert stack.usage_rows(request_id="unmetered-401") == []
    assert len(stack.usage_rows()) == len(traffic)
    # The deadline bounded the run: 1.5 s, not the ~4 s the slow echo would have taken.
    [late] = [r for r in stack.usage_rows() if r["status"] == "deadline_exceeded"]
    assert RUN_TIMEOUT_S * 1000 <= late["total_ms"] < 3500


def test_hash_token_prints_the_sha256_of_stdin(stack):
    token = stack.tokens.client("app-1")
    done = subprocess.run(
        [sys.executable, "manage.py", "hash_token"],
        input=f"{token}\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=stack.edge.env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sha256_hex(token)
    assert token not in done.stdout + done.stderr

    empty = subprocess.run(
        [sys.executable, "manage.py", "hash_token"],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=stack.edge.env,
        timeout=60,
    )
    assert empty.returncode != 0
    assert "stdin" in empty.stderr or "standard input" in empty.stderr


# -- Django admin ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(stack, traffic) -> Iterator[httpx.Client]:
    """An httpx client logged into the Edge's admin as a superuser made in the Edge's database."""
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "createsuperuser",
            "--noinput",
            "--username",
            ADMIN_USER,
            "--email",
            "operator@example.com",
        ],
        cwd=ROOT,
        env={**stack.edge.env, "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD},
        check=True,
        capture_output=True,
        timeout=60,
    )
    with httpx.Client(base_url=stack.edge.base_url, timeout=30, follow_redirects=True) as client:
        form = client.get("/admin/login/")
        assert form.status_code == 200
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        response = client.post(
            "/admin/login/?next=/admin/",
            data={
                "csrfmiddlewaretoken": csrf,
                "username": ADMIN_USER,
                "password": ADMIN_PASSWORD,
                "next": "/admin/",
            },
        )
        assert response.status_code == 200
        assert response.url.path == "/admin/", response.text[:2000]
        assert "Site administration" in response.text
        yield client


def test_admin_pages_need_a_staff_login(stack):
    response = httpx.get(f"{stack.edge.base_url}/admin/edge/usagerecord/", timeout=30)
    assert response.status_code == 302
    assert "/admin/login/" in response.headers["location"]


def test_admin_usage_page_sums_per_principal_and_per_token(stack, traffic, admin):
    # The rows are in (previous test or not): wait for all of them before reading the page.
    wait_until(lambda: len(stack.usage_rows()) >= len(traffic), what="usage rows")
    rows_page = admin.get("/admin/edge/usagerecord/")
    assert rows_page.status_code == 200
    page = admin.get("/admin/edge/usagerecord/sums/")
    assert page.status_code == 200

    def totals(rows: list[dict[str, Any]]) -> list[str]:
        prompt = sum(r["prompt_tokens"] for r in rows)
        completion = sum(r["completion_tokens"] for r in rows)
        return [str(len(rows)), str(prompt), str(completion), str(prompt + completion)]

    def sums_table(html: str, table_id: str) -> list[list[str]]:
        """Key cells, requests and the three token sums (errors, rate and p50 left out)."""
        return [[*row[:-7], row[-7], *row[-4:-1]] for row in table_cells(html, table_id)]

    expected = list(traffic.values())
    app1 = [r for r in expected if r["token_ref"] == "app-1"]
    app2 = [r for r in expected if r["token_ref"] == "app-2"]
    assert totals(expected) == ["5", "9", "9", "18"]  # the traffic fixture's sums, spelled out
    assert sums_table(page.text, "usage-sums-principal") == [["team-a", *totals(expected)]]
    assert sums_table(page.text, "usage-sums-token") == [
        ["team-a", "app-1", *totals(app1)],
        ["team-a", "app-2", *totals(app2)],
    ]
    for status in ("ok", "model_not_found", "deadline_exceeded"):
        assert status in rows_page.text

    # The sums follow the filters the list hands them.
    filtered = admin.get("/admin/edge/usagerecord/sums/", params={"token_ref": "app-2"})
    assert sums_table(filtered.text, "usage-sums-principal") == [["team-a", *totals(app2)]]
    assert sums_table(filtered.text, "usage-sums-token") == [["team-a", "app-2", *totals(app2)]]


# -- secrets -----------------------------------------------------------------------------------


def admin_pages(admin: httpx.Client) -> dict[str, str]:
    """The admin index, every changelist it links to and the first rows' detail pages."""
    pages = {"/admin/": admin.get("/admin/").text}
    changelists = sorted(set(re.findall(r'href="(/admin/[a-z_]+/[a-z_]+/)"', pages["/admin/"])))
    assert "/admin/edge/principaltoken/" in changelists
    assert "/admin/nodes/node/" in changelists
    assert "/admin/edge/usagerecord/" in changelists
    for url in changelists:
        response = admin.get(url)
        assert response.status_code == 200, url
        pages[url] = response.text
        details = sorted(set(re.findall(rf'href="({re.escape(url)}\d+/change/)', response.text)))
        for detail in details[:6]:
            response = admin.get(detail)
            assert response.status_code == 200, detail
            pages[detail] = response.text
    return pages


def test_raw_tokens_appear_in_no_database_log_or_admin_page(stack, traffic, admin):
    # A Node with a wrong token is refused; its token must not be logged either.
    intruder = stack.start_node(
        "node-a", token=BOGUS_NODE_TOKEN, wait_ready=False, log_name="intruder.log"
    )
    wait_until(
        lambda: "refused" in intruder.log() and "bad token" in stack.edge.log(),
        what="the Edge to refuse the bad Node token",
    )
    intruder.stop()

    pages = admin_pages(admin)
    detail_pages = [url for url in pages if url.endswith("/change/")]
    assert any(url.startswith("/admin/edge/principaltoken/") for url in detail_pages)
    assert any(url.startswith("/admin/nodes/node/") for url in detail_pages)
    assert any(url.startswith("/admin/edge/usagerecord/") for url in detail_pages)

    connection = stack.edge.db()
    try:
        dump = "\n".join(connection.iterdump())
    finally:
        connection.close()
    # The dump is the real thing: the mirror holds the hashes and the usage rows are there.
    assert sha256_hex(stack.tokens.client("app-1")) in dump
    assert sha256_hex(stack.tokens.node("node-a")) in dump
    assert all(request_id in dump for request_id in traffic)

    places = {
        "database dump": dump,
        "edge log": stack.edge.log(),
        **{f"node {node_id} log": node.log() for node_id, node in stack.nodes.items()},
        "intruder node log": intruder.log(),
        **{f"admin page {url}": text for url, text in pages.items()},
    }
    secrets = {
        **{f"client token {ref}": token for ref, token in stack.tokens.clients.items()},
        **{f"node token {node_id}": token for node_id, token in stack.tokens.nodes.items()},
        "unknown client token": BOGUS_CLIENT_TOKEN,
        "refused node token": BOGUS_NODE_TOKEN,
    }
    assert "DEBUG" in stack.edge.log()  # the Edge logged at its most talkative
    leaks = [
        f"{secret} in {place}"
        for secret, token in secrets.items()
        for place, text in places.items()
        if token in text
    ]
    assert leaks == []


def test_a_node_logging_at_debug_keeps_its_token_out_of_its_log(stack):
    node = stack.start_node("node-d", args=("--log-level", "DEBUG"), log_name="node-d-debug.log")
    assert "DEBUG" in node.log()
    assert stack.tokens.node("node-d") not in node.log()
