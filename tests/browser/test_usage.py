"""Usage as an operator reads it in a browser: requests sent through the Edge, then the rows,
their sums per principal, token_ref, model and day, and the CSV of the sums."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import openai
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Cockpit


def grouped(text: str) -> str:
    return f"{int(text):,}"


@pytest.fixture(scope="module")
def traffic(cockpit: Cockpit) -> list[dict[str, Any]]:
    """Three answered requests of app-1, one of app-2 and one refused (an unknown model)."""
    for token_ref, content in [("app-1", "one"), ("app-1", "two three"), ("app-2", "four")]:
        cockpit.client(token_ref).chat.completions.create(
            model="echo", messages=[{"role": "user", "content": content}]
        )
    cockpit.client("app-1").chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "five six seven"}]
    )
    with pytest.raises(openai.NotFoundError):
        cockpit.client("app-1").chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "lost"}]
        )
    return cockpit.wait_usage(5)


def table_rows(page: Page, table_id: str, part: str = "tbody") -> list[list[str]]:
    rows = page.locator(f"#{table_id} {part} tr")
    return [
        [cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()]
        for i in range(rows.count())
    ]


def sums_of(rows: list[dict[str, Any]]) -> list[str]:
    """Requests, errors, error rate and the three token sums, as the page writes them."""
    prompt = sum(row["prompt_tokens"] for row in rows)
    completion = sum(row["completion_tokens"] for row in rows)
    errors = sum(row["status"] != "ok" for row in rows)
    return [
        f"{len(rows):,}",
        f"{errors:,}",
        f"{errors / len(rows) * 100:.1f} %",
        f"{prompt:,}",
        f"{completion:,}",
        f"{prompt + completion:,}",
    ]


def test_the_usage_sums_read_what_went_through_the_edge(
    staff_page: Page, cockpit: Cockpit, traffic: list[dict[str, Any]]
) -> None:
    page = staff_page
    app1 = [row for row in traffic if row["token_ref"] == "app-1"]
    app2 = [row for row in traffic if row["token_ref"] == "app-2"]
    assert [row["status"] for row in app1].count("model_not_found") == 1

    page.goto("/admin/edge/usagerecord/")
    expect(page.locator("#usage-paginator")).to_contain_text("5 usage records")
    expect(page.locator("#result_list .iop-status--bad")).to_have_text("model_not_found")
    page.get_by_role("link", name="Sums for this period").click()

    expect(page.locator("#usage-scope-label")).to_have_text("All time")
    tokens = table_rows(page, "usage-sums-token")
    assert [row[:-1] for row in tokens] == [
        ["team-a", "app-1", *sums_of(app1)],
        ["team-a", "app-2", *sums_of(app2)],
    ]
    assert all(row[-1].startswith("≈ ") and row[-1].endswith(" ms") for row in tokens)
    assert table_rows(page, "usage-sums-principal")[0][:-1] == ["team-a", *sums_of(traffic)]
    models = {row[0]: row[1] for row in table_rows(page, "usage-sums-model")}
    assert models == {"echo": "4", "no-such-model": "1"}
    assert [row[1] for row in table_rows(page, "usage-sums-day")] == ["5"]
    total = table_rows(page, "usage-sums-day", "tfoot")[0]
    assert total[:-1] == ["Total", *sums_of(traffic)]

    # Narrowed to a period and a token: the label says so, the tables follow.
    page.locator("#changelist-filter").get_by_role("link", name="Last 24 hours").click()
    expect(page.locator("#usage-scope-label")).to_contain_text("Last 24 hours (since ")
    page.locator("#usage-sums-token").get_by_role("link", name="app-2").click()
    expect(page.locator("#usage-scope-label")).to_contain_text("· token_ref = app-2")
    assert [row[:-1] for row in table_rows(page, "usage-sums-token")] == [
        ["team-a", "app-2", *sums_of(app2)]
    ]

    with page.expect_download() as download:
        page.get_by_role("link", name="CSV of these sums").click()
    assert download.value.suggested_filename.startswith("usage-sums-24h-")
    lines = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(line["token_ref"], line["requests"]) for line in lines] == [("app-2", "1")]
    assert grouped(lines[0]["total_tokens"]) == sums_of(app2)[-1]
