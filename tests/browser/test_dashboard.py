"""The live pool dashboard in a real browser: it follows the pool under traffic by itself."""

from __future__ import annotations

from contextlib import ExitStack

from playwright.sync_api import Page, expect

from tests.browser.conftest import PAGE_TIMEOUT_MS, Cockpit

# Each word is a token the slow echo provider sends 200 ms apart: a stream that would run for
# minutes, closed (and its run cancelled) once the page has shown it in flight.
LONG_PROMPT = " ".join(["word"] * 1000)


def open_dashboard(page: Page) -> None:
    page.goto("/admin/dashboard/")
    expect(page.locator("#node-node-a")).to_contain_text("ready", timeout=PAGE_TIMEOUT_MS)


def test_the_in_flight_count_follows_traffic(staff_page: Page, cockpit: Cockpit) -> None:
    open_dashboard(staff_page)
    in_flight = staff_page.locator("#provider-echo-slow td.in-flight")
    expect(in_flight).to_have_text("0 / 2", timeout=PAGE_TIMEOUT_MS)

    client = cockpit.client()
    with ExitStack() as streams:
        for _ in range(2):
            stream = client.chat.completions.create(
                model="echo-slow",
                messages=[{"role": "user", "content": LONG_PROMPT}],
                stream=True,
            )
            streams.enter_context(stream)
            next(iter(stream))  # its run has started on the Node

        expect(in_flight).to_have_text("2 / 2", timeout=PAGE_TIMEOUT_MS)

    expect(in_flight).to_have_text("0 / 2", timeout=PAGE_TIMEOUT_MS)


def test_a_provider_links_to_its_mirror_page_and_back(staff_page: Page, cockpit: Cockpit) -> None:
    open_dashboard(staff_page)

    staff_page.locator("#provider-echo-1 td.provider a").click()

    staff_page.wait_for_url("**/admin/providers/provider/*/change/")
    staff_page.get_by_role("link", name="live").click()
    staff_page.wait_for_url("**/admin/dashboard/#provider-echo-1")
    expect(staff_page.locator("#provider-echo-1")).to_be_visible(timeout=PAGE_TIMEOUT_MS)
