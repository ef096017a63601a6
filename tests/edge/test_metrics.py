"""The request and refresh metrics and their labels, rendered and parsed back (no database)."""

from __future__ import annotations

import pytest

from edge.metrics import EdgeMetrics, exposition
from edge.metrics.instruments import DURATION_BUCKETS
from edge.metrics.labels import NONE, OTHER, UNKNOWN_MODEL, status_label
from edge.openai_api.app import ANONYMOUS, INTERNAL_ERROR
from edge.openai_api.errors import RATE_LIMIT_EXCEEDED, UPSTREAM_REJECTED
from edge.usage import Usage
from tests.edge.metrics_scrape import Scrape

CONFIGURED = {"chat", "embed"}


def served(**fields: object) -> Usage:
    """A request that went through on provider p1, as its usage row meters it."""
    values: dict[str, object] = {
        "request_id": "r",
        "model": "chat",
        "status": "ok",
        "principal_ref": "team-a",
        "token_ref": "app-1",
        "provider": "p1",
        "prompt_tokens": 12,
        "completion_tokens": 30,
        "queue_ms": 4.0,
        "total_ms": 250.0,
        "attempts": 1,
    }
    return Usage(**{**values, **fields})  # type: ignore[arg-type]


def scrape(metrics: EdgeMetrics) -> Scrape:
    return Scrape(exposition(metrics.snapshot()).decode())


def test_it_counts_requests_by_model_provider_and_status() -> None:
    metrics = EdgeMetrics()
    metrics.record_request(served(), None, CONFIGURED)
    metrics.record_request(served(), None, CONFIGURED)
    metrics.record_request(served(status="queue_full", provider="", attempts=0), None, CONFIGURED)

    result = scrape(metrics)

    assert result.value("iop_requests_total", model="chat", provider="p1", status="ok") == 2
    assert result.value("iop_requests_total", model="chat", provider=NONE, status="queue_full") == 1
    assert len(result.labelled("iop_requests_total")) == 2


def test_a_model_no_config_names_and_an_unknown_status_get_fixed_labels() -> None:
    metrics = EdgeMetrics()
    typo = served(model="gpt-4o-typo-123", status="model_not_found", provider="", attempts=0)
    upstream_code = served(status="some_upstream_specific_code")
    metrics.record_request(typo, None, CONFIGURED)
    metrics.record_request(upstream_code, None, CONFIGURED)

    result = scrape(metrics)

    labels = {
        "model_not_found": {"model": UNKNOWN_MODEL, "provider": NONE},
        OTHER: {"model": "chat", "provider": "p1"},
    }
    for status, where in labels.items():
        assert result.value("iop_requests_total", status=status, **where) == 1
    assert "gpt-4o-typo-123" not in result.text
    assert "some_upstream_specific_code" not in result.text


@pytest.mark.parametrize(
    "status", ["ok", "cancelled", INTERNAL_ERROR, UPSTREAM_REJECTED, RATE_LIMIT_EXCEEDED]
)
def test_the_statuses_the_edge_names_keep_their_name(status: str) -> None:
    assert status_label(status) == status


def test_time_to_first_token_is_observed_for_streams_and_queue_wait_for_leased_requests() -> None:
    metrics = EdgeMetrics()
    metrics.record_request(served(), 0.02, CONFIGURED)  # streamed
    metrics.record_request(served(), None, CONFIGURED)  # whole answer
    metrics.record_request(served(status="no_provider_available", attempts=0), None, CONFIGURED)

    result = scrape(metrics)
    timing = {"model": "chat", "provider": "p1"}

    assert result.value("iop_time_to_first_token_seconds_count", **timing) == 1
    assert result.value("iop_time_to_first_token_seconds_sum", **timing) == pytest.approx(0.02)
    assert result.value("iop_queue_wait_seconds_count", **timing) == 2
    assert result.value("iop_queue_wait_seconds_sum", **timing) == pytest.approx(0.008)
    assert result.value("iop_request_duration_seconds_count", **timing) == 3
    assert result.value("iop_request_duration_seconds_sum", **timing) == pytest.approx(0.75)


def test_histogram_buckets_count_what_is_at_most_their_bound_cumulatively() -> None:
    metrics = EdgeMetrics()
    for total_s in (0.01, 0.011, 1.0, 5000.0):  # on a bound, just past it, on one, past all
        metrics.record_request(served(total_ms=total_s * 1000), None, CONFIGURED)

    result = scrape(metrics)

    def bucket(le: str) -> float | None:
        return result.value(
            "iop_request_duration_seconds_bucket", le=le, model="chat", provider="p1"
        )

    assert bucket("0.01") == 1
    assert bucket("0.025") == 2
    assert bucket("1.0") == 3
    assert bucket(str(float(DURATION_BUCKETS[-1]))) == 3
    assert bucket("+Inf") == 4


def test_tokens_are_counted_by_principal_token_and_model() -> None:
    metrics = EdgeMetrics()
    metrics.record_request(served(), None, CONFIGURED)
    metrics.record_request(served(prompt_tokens=1, completion_tokens=2), None, CONFIGURED)
    anonymous = served(principal_ref=ANONYMOUS.principal_ref, token_ref=ANONYMOUS.token_ref)
    metrics.record_request(anonymous, None, CONFIGURED)
    metrics.record_request(served(prompt_tokens=0, completion_tokens=0), None, CONFIGURED)

    result = scrape(metrics)
    app = {"principal_ref": "team-a", "token_ref": "app-1", "model": "chat"}
    nobody = {"principal_ref": "(anonymous)", "token_ref": NONE, "model": "chat"}

    assert result.value("iop_tokens_total", kind="prompt", **app) == 13
    assert result.value("iop_tokens_total", kind="completion", **app) == 32
    assert result.value("iop_tokens_total", kind="prompt", **nobody) == 12
    assert len(result.labelled("iop_tokens_total")) == 4


def test_refreshes_are_counted_by_mode_and_status() -> None:
    metrics = EdgeMetrics()
    metrics.count_refresh("dry_run", "ok")
    metrics.count_refresh("dry_run", "ok")
    metrics.count_refresh("apply", "stale")

    result = scrape(metrics)

    assert result.value("iop_refreshes_total", mode="dry_run", status="ok") == 2
    assert result.value("iop_refreshes_total", mode="apply", status="stale") == 1


def test_a_snapshot_is_a_copy_that_later_requests_do_not_change() -> None:
    metrics = EdgeMetrics()
    metrics.record_request(served(), 0.1, CONFIGURED)
    snapshot = metrics.snapshot()
    metrics.record_request(served(), 0.1, CONFIGURED)
    metrics.record_request(served(model="embed"), 0.1, CONFIGURED)

    result = Scrape(exposition(snapshot).decode())

    assert result.value("iop_requests_total", model="chat", provider="p1", status="ok") == 1
    timing = {"model": "chat", "provider": "p1"}
    assert result.value("iop_time_to_first_token_seconds_count", **timing) == 1
    assert result.labelled("iop_requests_total") == [
        {"model": "chat", "provider": "p1", "status": "ok"}
    ]


def test_each_metrics_object_counts_for_itself() -> None:
    first, second = EdgeMetrics(), EdgeMetrics()
    first.record_request(served(), None, CONFIGURED)

    assert scrape(second).labelled("iop_requests_total") == []
    assert "# TYPE iop_requests_total counter" in scrape(second).text
