"""The usage admin: rows that never cost a full count, sums from the rollups, CSV of both."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from edge import usage_report
from edge.usage import Usage
from edge.usage_admin import CappedPaginator
from edge.usage_store import write_batch

LIST = "/admin/edge/usagerecord/"
SUMS = "/admin/edge/usagerecord/sums/"
SUMS_CSV = "/admin/edge/usagerecord/sums/csv/"
ROWS_CSV = "/admin/edge/usagerecord/csv/"
NOW = datetime.now(UTC)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_choices():
    cache.clear()  # filter choices are cached for a minute; each test has rows of its own
    yield
    cache.clear()


@pytest.fixture
def operator() -> Client:
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.create_superuser("operator", "", "pw-12345678"))
    return client


def make_usage(index: int, age: timedelta = timedelta(minutes=5), **fields) -> Usage:
    values = {
        "request_id": f"r{index}",
        "model": "m-small",
        "status": "ok",
        "principal_ref": "team-a",
        "token_ref": "app-1",
        "provider": "p1",
        "prompt_tokens": 1_500,
        "completion_tokens": 20,
        "total_ms": 40.0,
        "created_at": NOW - age - timedelta(seconds=index),
    }
    return Usage(**{**values, **fields})


def cells(html: str, table_id: str, part: str = "tbody") -> list[list[str]]:
    """The rows of one table's body (or foot), as lists of cell texts without markup (the e2e
    metering test reads the sums page with it too)."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert table, f"no table {table_id} in the page"
    body = re.search(rf"<{part}>(.*?)</{part}>", table.group(1), re.S).group(1)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def listed_request_ids(html: str) -> list[str]:
    return re.findall(r'href="/admin/edge/usagerecord/\d+/change/[^"]*">([^<]+)</a>', html)


def test_it_lists_rows_newest_first_with_readable_numbers(operator):
    write_batch([make_usage(i) for i in range(3)])

    page = operator.get(LIST)

    assert page.status_code == 200
    text = page.content.decode()
    times = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)
    assert times == sorted(times, reverse=True) and len(times) == 3
    assert "time (UTC)" in text
    assert '<td class="field-prompt_tokens">1,500</td>' in text
    assert '<span class="iop-status iop-status--good">ok</span>' in text
    assert "3 usage records" in text


def test_a_row_shows_errors_cancellations_long_context_and_failover(operator):
    write_batch(
        [
            make_usage(0, status="upstream_error"),
            make_usage(1, status="cancelled"),
            make_usage(2, context_class="long", attempts=2, provider="p2"),
        ]
    )

    text = operator.get(LIST).content.decode()

    assert '<span class="iop-status iop-status--bad">upstream_error</span>' in text
    assert '<span class="iop-status iop-status--warn">cancelled</span>' in text
    assert re.search(r'field-model">m-small <span class="usage-tag"[^>]*>long</span>', text)
    assert re.search(r'field-provider">p2 <span class="usage-tag"[^>]*>2 attempts</span>', text)


def test_the_list_filters_by_period_and_token(operator):
    write_batch(
        [
            make_usage(0),
            make_usage(1, token_ref="app-2"),
            make_usage(2, age=timedelta(days=3)),
        ]
    )

    def count(**params: str) -> str:
        text = operator.get(LIST, params).content.decode()
        return re.search(r'id="usage-paginator">(.*?)usage record', text, re.S).group(1).strip()

    assert count() == "3"
    assert count(period="24h") == "2"
    assert count(token_ref="app-2") == "1"
    assert count(period="24h", token_ref="app-1") == "1"
    sidebar = operator.get(LIST).content.decode()
    assert "?token_ref=app-2" in sidebar  # the choices come from the rollup


def test_the_count_stops_at_the_cap(operator, monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 4)
    write_batch([make_usage(i) for i in range(6)])

    text = operator.get(LIST).content.decode()

    assert "4+ usage records" in text
    assert "narrow the period or the filters" in text


def test_the_list_costs_the_same_queries_at_any_size(operator):
    def queries_for_the_list() -> int:
        cache.clear()  # the filter choices are read each time, as on a first visit
        with CaptureQueriesContext(connection) as queries:
            assert operator.get(LIST, {"period": "7d", "token_ref": "app-1"}).status_code == 200
        return len(queries)

    write_batch([make_usage(i) for i in range(3)])
    few = queries_for_the_list()
    write_batch([make_usage(i, age=timedelta(hours=i % 48)) for i in range(3, 400)])
    many = queries_for_the_list()

    assert few == many


def test_the_search_finds_a_request_id_exactly(operator):
    write_batch([make_usage(i) for i in (3, 30, 31)])

    text = operator.get(LIST, {"q": "r3"}).content.decode()

    assert "1 found" in text
    assert "1 usage record" in text


def test_the_sums_page_sums_per_principal_token_model_and_day(operator):
    write_batch(
        [
            make_usage(0),
            make_usage(1, status="upstream_error", prompt_tokens=0, completion_tokens=0),
            make_usage(2, token_ref="app-2", model="m-large", total_ms=900.0),
            make_usage(3, principal_ref="team-b", token_ref="app-3", age=timedelta(days=2)),
            make_usage(4, status="cancelled"),
        ]
    )

    page = operator.get(SUMS)

    assert page.status_code == 200
    html = page.content.decode()
    assert cells(html, "usage-sums-principal") == [
        # 40 ms three times and 900 ms once: rank 2 of 4, two thirds into 25-50 ms.
        ["team-a", "4", "1", "25.0 %", "4,500", "60", "4,560", "≈ 42 ms"],
        ["team-b", "1", "0", "0.0 %", "1,500", "20", "1,520", "≈ 38 ms"],
    ]
    assert cells(html, "usage-sums-token") == [
        ["team-a", "app-1", "3", "1", "33.3 %", "3,000", "40", "3,040", "≈ 38 ms"],
        [
            "team-a",
            "app-2",
            "1",
            "0",
            "0.0 %",
            "1,500",
            "20",
            "1,520",
            "≈ 750 ms",
        ],  # a tie: by name
        ["team-b", "app-3", "1", "0", "0.0 %", "1,500", "20", "1,520", "≈ 38 ms"],
    ]
    assert [row[0] for row in cells(html, "usage-sums-model")] == ["m-small", "m-large"]
    days = cells(html, "usage-sums-day")
    assert [row[0] for row in days] == sorted({row[0] for row in days}, reverse=True)
    assert sum(int(row[1]) for row in days) == 5
    total = ["Total", "", "5", "1", "20.0 %", "6,000", "80", "6,080", "≈ 41 ms"]
    assert cells(html, "usage-sums-token", "tfoot") == [total]
    assert re.search(r'id="usage-scope-label">All time<', html)


def test_the_sums_cover_the_period_and_filters_they_name(operator):
    write_batch(
        [
            make_usage(0),
            make_usage(1, token_ref="app-2"),
            make_usage(2, token_ref="app-2", age=timedelta(days=3)),
        ]
    )

    before = datetime.now(UTC)
    html = operator.get(SUMS, {"period": "24h", "token_ref": "app-2"}).content.decode()
    after = datetime.now(UTC)

    # The period starts on the hour the request was served in, a day back: an hour may turn
    # while the request runs.
    labels = {
        f"Last 24 hours (since {moment - timedelta(days=1):%Y-%m-%d %H}:00 UTC) · token_ref = app-2"
        for moment in (before, after)
    }
    label = re.search(r'id="usage-scope-label">(.*?)<', html).group(1)
    assert label in labels
    assert cells(html, "usage-sums-token") == [
        ["team-a", "app-2", "1", "0", "0.0 %", "1,500", "20", "1,520", "≈ 38 ms"]
    ]
    week = operator.get(SUMS, {"period": "7d", "token_ref": "app-2"}).content.decode()
    assert cells(week, "usage-sums-token")[0][2] == "2"
    assert "since " in re.search(r'id="usage-scope-label">(.*?)<', week).group(1)
    assert " 00:00 UTC" in week  # periods of days start at midnight, from the daily rollup


def test_bad_sums_parameters_get_a_clear_error(operator):
    write_batch([make_usage(0)])

    wrong_period = operator.get(SUMS, {"period": "5y"})
    unknown = operator.get(SUMS, {"provider": "p1"})
    csv_refused = operator.get(SUMS_CSV, {"period": "5y"})

    assert wrong_period.status_code == 400
    assert "period: must be one of 1h, 24h, 7d, 30d" in wrong_period.content.decode()
    assert unknown.status_code == 400
    assert "provider: is not a parameter of the sums" in unknown.content.decode()
    assert csv_refused.status_code == 400
    assert csv_refused.content.decode().startswith("period: must be one of")
    rows_refused = operator.get(ROWS_CSV, {"period": "5y"})
    assert rows_refused.status_code == 400
    assert rows_refused.content.decode().startswith("period: must be one of")


def test_the_sums_csv_has_a_row_per_day_principal_token_and_model(operator):
    write_batch([make_usage(0), make_usage(1), make_usage(2, token_ref="=HYPERLINK(1)")])

    answer = operator.get(SUMS_CSV, {"period": "24h"})

    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/csv"
    assert re.fullmatch(
        r'attachment; filename="usage-sums-24h-\d{8}T\d{4}Z\.csv"', answer["Content-Disposition"]
    )
    lines = answer.content.decode().splitlines()
    assert lines[0] == (
        "day,principal_ref,token_ref,model,requests,errors,error_rate,"
        "prompt_tokens,completion_tokens,total_tokens,p50_ms"
    )
    day = NOW.date().isoformat() if (NOW - timedelta(minutes=5)).date() == NOW.date() else None
    rows = sorted(line.split(",") for line in lines[1:])
    assert [row[1:] for row in rows] == [
        ["team-a", "'=HYPERLINK(1)", "m-small", "1", "0", "0.0000", "1500", "20", "1520", "37.5"],
        ["team-a", "app-1", "m-small", "2", "0", "0.0000", "3000", "40", "3040", "37.5"],
    ]
    assert day is None or {row[0] for row in rows} == {day}


def test_the_list_links_to_the_sums_with_the_filters_they_know(operator):
    write_batch([make_usage(0)])

    html = operator.get(LIST, {"period": "24h", "token_ref": "app-1", "provider": "p1"})
    text = html.content.decode()

    link = re.search(r'href="([^"]+)" id="usage-sums-link"', text).group(1)
    assert link == f"{SUMS}?period=24h&amp;token_ref=app-1"
    assert "they leave out the provider filter" in text
    csv_link = re.search(r'href="([^"]+)" id="usage-rows-csv"', text).group(1)
    assert "provider=p1" in csv_link


def test_usage_pages_need_a_login_with_the_view_permission():
    anonymous = Client(HTTP_HOST="127.0.0.1")
    staff = Client(HTTP_HOST="127.0.0.1")
    staff.force_login(
        get_user_model().objects.create_user("staff", "", "pw-12345678", is_staff=True)
    )

    for url in (LIST, SUMS, SUMS_CSV, ROWS_CSV):
        assert anonymous.get(url).status_code == 302, url
        assert "/admin/login/" in anonymous.get(url)["Location"]
        assert staff.get(url).status_code == 403, url


def read_stream(answer) -> str:
    """A streamed answer's body. The view streams from an async iterator (so daphne sends it
    as it comes); a sync test client collects it, saying so."""
    assert answer.streaming
    with pytest.warns(Warning, match="must consume asynchronous iterators"):
        return b"".join(answer).decode()


def test_the_rows_csv_streams_every_row_of_the_filter_in_batches(operator, monkeypatch):
    monkeypatch.setattr(usage_report, "ROWS_PER_BATCH", 3)
    same_time = NOW - timedelta(minutes=1)
    batch = [make_usage(i, created_at=same_time) for i in range(4)]  # ties across a batch edge
    batch += [make_usage(i) for i in range(4, 9)]
    batch += [make_usage(9, token_ref="app-2", model="=cmd|' /C calc'!A0")]
    write_batch(batch)

    answer = operator.get(ROWS_CSV, {"token_ref": "app-1"})
    lines = read_stream(answer).splitlines()
    everything = read_stream(operator.get(ROWS_CSV))

    assert lines[0].startswith("created_at,request_id,principal_ref,token_ref")
    ids = [line.split(",")[1] for line in lines[1:]]
    assert sorted(ids) == sorted(f"r{i}" for i in range(9))  # each row once, none missing
    times = [line.split(",")[0] for line in lines[1:]]
    assert times == sorted(times, reverse=True)
    assert "'=cmd|' /C calc'!A0" in everything  # a formula is quoted, never run by a spreadsheet
    assert answer["Content-Disposition"].startswith('attachment; filename="usage-rows-all-')
