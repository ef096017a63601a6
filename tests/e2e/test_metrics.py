"""`GET /metrics` on a real Edge after real traffic: counts move by exactly the requests sent,
histograms count them, the pool's gauges say what `GET /status` says, a dry run is counted, and
every metric the Grafana dashboard queries is in a scrape.

One Edge, one Node with a fast echo provider and a slow one (a stream on it holds its slot).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import ROOT, Tokens, echo_config, wait_until
from tests.edge.metrics_scrape import Scrape

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
# A second a token, 100 tokens: the stream holds its slot until the test closes it.
SLOW_TEXT = " ".join(["w"] * 100)
ECHO = {"model": "echo", "provider": "echo-1"}
SLOW = {"model": "slow", "provider": "slow-1"}


def build_config(tokens: Tokens, public: int, admin: int) -> dict[str, Any]:
    served = {"served_models": ["echo-small"]}
    return echo_config(
        tokens,
        public,
        admin,
        adapters=[
            {"id": "echo", "type": "echo"},
            {"id": "slow", "type": "echo", "token_delay_ms": 1000},
        ],
        providers=[
            {"id": "echo-1", "adapter": "echo", "capacity": 4, **served},
            {"id": "slow-1", "adapter": "slow", "capacity": 2, **served},
        ],
        models=[
            {"id": "echo", "providers": {"echo-1": "echo-small"}},
            {"id": "slow", "providers": {"slow-1": "echo-small"}},
        ],
    )


@pytest.fixture(scope="module")
def stack(openai_stack_factory):
    stack = openai_stack_factory(build_config)
    stack.start_node("node-a")
    return stack


def metrics_response(stack, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"{stack.edge.operator_url}/metrics", headers=headers, timeout=30)


def scrape(stack) -> Scrape:
    response = metrics_response(stack, stack.edge.operator_headers())
    assert response.status_code == 200, response.text
    return Scrape(response.text)


def scrape_when(stack, condition: Callable[[Scrape], Any], what: str) -> Scrape:
    """The first scrape for which ``condition`` holds (counts move once a request has ended,
    a moment after its caller has the answer)."""

    def holds() -> Scrape | None:
        now = scrape(stack)
        return now if condition(now) else None

    return wait_until(holds, timeout=30, what=what)


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.count(name, **labels) - before.count(name, **labels)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def stream_usage(client: openai.OpenAI, model: str, text: str) -> Any:
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=user(text),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    return chunks[-1].usage


@contextmanager
def held_stream(client: openai.OpenAI) -> Iterator[None]:
    """A stream on slow-1 holding its slot (the SDK returns with the first token) until the
    block ends; closing it is a client disconnect."""
    stream = client.chat.completions.create(model="slow", messages=user(SLOW_TEXT), stream=True)
    try:
        yield
    finally:
        stream.close()


def test_metrics_are_the_operator_listeners_behind_its_guards_in_the_text_format(stack):
    assert metrics_response(stack).status_code == 401
    wrong = metrics_response(stack, {"Authorization": "Bearer not-the-operator-token"})
    assert wrong.status_code == 401
    assert wrong.headers["content-type"] == "application/json"
    assert "detail" in wrong.json()

    response = metrics_response(stack, stack.edge.operator_headers())

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE iop_requests_total counter" in response.text
    # A scraper that names only the OpenMetrics and Prometheus text types, no */*.
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    scraper = metrics_response(stack, {**stack.edge.operator_headers(), "Accept": accept})
    assert scraper.status_code == 200
    assert scraper.headers["content-type"] == response.headers["content-type"]
    refused = metrics_response(stack, {"Accept": accept})
    assert refused.status_code == 401 and "detail" in refused.json()
    cross_site = {**stack.edge.operator_headers(), "Origin": "http://evil.example"}
    assert metrics_response(stack, cross_site).status_code == 403
    assert httpx.get(f"{stack.edge.base_url}/metrics", timeout=30).status_code == 404


def test_counts_move_by_exactly_the_requests_sent(stack):
    app1, app2 = stack.client("app-1"), stack.client("app-2")
    typo = f"no-such-model-{uuid.uuid4().hex[:8]}"
    before = scrape(stack)

    tokens = {"app-1": [0, 0], "app-2": [0, 0]}
    for text in ("alpha", "beta gamma", "delta"):
        usage = app1.chat.completions.create(model="echo", messages=user(text)).usage
        tokens["app-1"][0] += usage.prompt_tokens
        tokens["app-1"][1] += usage.completion_tokens
    for text in ("streamed one", "streamed two three"):
        usage = stream_usage(app1, "echo", text)
        tokens["app-1"][0] += usage.prompt_tokens
        tokens["app-1"][1] += usage.completion_tokens
    usage = app2.chat.completions.create(model="echo", messages=user("zeta")).usage
    tokens["app-2"] = [usage.prompt_tokens, usage.completion_tokens]
    with pytest.raises(openai.NotFoundError):
        app2.chat.completions.create(model=typo, messages=user("x"))
    unknown = {"model": "(unknown model)", "provider": "(none)", "status": "model_not_found"}

    after = scrape_when(
        stack,
        lambda now: moved(before, now, "iop_requests_total", **ECHO, status="ok") >= 6
        and moved(before, now, "iop_requests_total", **unknown) >= 1,
        "the requests to be counted",
    )

    assert moved(before, after, "iop_requests_total", **ECHO, status="ok") == 6
    assert moved(before, after, "iop_requests_total", **unknown) == 1
    assert moved(before, after, "iop_request_duration_seconds_count", **ECHO) == 6
    assert moved(before, after, "iop_request_duration_seconds_bucket", **ECHO, le="+Inf") == 6
    assert moved(before, after, "iop_time_to_first_token_seconds_count", **ECHO) == 2
    assert moved(before, after, "iop_queue_wait_seconds_count", **ECHO) == 6
    nowhere = {"model": "(unknown model)", "provider": "(none)"}
    assert moved(before, after, "iop_request_duration_seconds_count", **nowhere) == 1
    assert moved(before, after, "iop_queue_wait_seconds_count", **nowhere) == 0
    for token_ref, (prompt, completion) in tokens.items():
        who = {"principal_ref": "team-a", "token_ref": token_ref, "model": "echo"}
        assert moved(before, after, "iop_tokens_total", **who, kind="prompt") == prompt
        assert moved(before, after, "iop_tokens_total", **who, kind="completion") == completion
    assert typo not in after.text


def test_pool_gauges_match_status_while_a_stream_holds_a_slot(stack):
    client = stack.client("app-1")
    before = scrape(stack)
    cancelled = {**SLOW, "status": "cancelled"}

    with held_stream(client):
        wait_until(lambda: stack.in_flight("slow-1") == 1, timeout=30, what="a run on slow-1")
        status = stack.status()
        during = scrape(stack)

        for provider_id, p in status["providers"].items():
            labels = {"provider": provider_id, "node": p["node_id"]}
            assert during.value("iop_provider_in_flight", **labels) == p["in_flight"]
            assert during.value("iop_provider_capacity", **labels) == p["capacity"]
            assert during.value("iop_provider_healthy", **labels) == p["healthy"]
        assert during.value("iop_provider_in_flight", provider="slow-1", node="node-a") == 1
        ready = sum(node["ready"] for node in status["nodes"].values())
        assert during.value("iop_node_sessions", ready="true") == ready == 1
        assert during.value("iop_node_sessions", ready="false") == 0
        info = {"edge": status["edge"], "revision": status["revision"]}
        assert during.value("iop_edge_info", **info) == 1
        for model_id, m in status["models"].items():
            assert during.value("iop_queue_depth", model=model_id) == m["queue_depth"]

    stack.wait_idle("slow-1")
    after = scrape_when(
        stack,
        lambda now: now.value("iop_provider_in_flight", provider="slow-1", node="node-a") == 0
        and moved(before, now, "iop_requests_total", **cancelled) >= 1,
        "slow-1 idle and the closed stream counted",
    )

    assert moved(before, after, "iop_requests_total", **cancelled) == 1
    assert moved(before, after, "iop_time_to_first_token_seconds_count", **SLOW) == 1


def dry_run(stack) -> str:
    response = httpx.post(
        f"{stack.edge.operator_url}/refresh",
        json={"mode": "dry_run"},
        headers=stack.edge.operator_headers(),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()["status"]


def test_a_dry_run_moves_the_refresh_counter_by_one(stack):
    before = scrape(stack)

    status = dry_run(stack)

    # Counted before the endpoint answers: no waiting.
    counted = moved(before, scrape(stack), "iop_refreshes_total", mode="dry_run", status=status)
    assert counted == 1


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    queries += [
        variable["definition"]
        for variable in dashboard["templating"]["list"]
        if "definition" in variable
    ]
    return queries


def test_every_metric_the_grafana_dashboard_queries_is_in_a_scrape(stack):
    stream_usage(stack.client("app-1"), "echo", "for the dashboard")
    dry_run(stack)
    present = scrape_when(
        stack,
        lambda now: now.count("iop_time_to_first_token_seconds_count", **ECHO),
        "a stream to be counted",
    ).sample_names()
    queried = {
        name for query in dashboard_queries() for name in re.findall(r"\biop_[a-z_]+", query)
    }

    assert len(queried) > 10
    assert queried - present == set()
