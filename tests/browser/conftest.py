"""Browser tests: Playwright drives Debian's chromium against a real Edge (the cockpit).

Fixtures:
- ``chromium_executable`` (session): the browser binary, ``$IOP_CHROMIUM`` or /usr/bin/chromium;
  without it every test here is skipped, saying so.
- ``browser`` (module): a headless Playwright Chromium on that binary.
- ``cockpit`` (module): a `run_edge` subprocess with echo providers, one Node agent ready, a staff
  superuser, its static files collected (tests/conftest.py): a :class:`Cockpit`
  (tests/browser/cockpit.py, its attributes and helpers there).
- ``staff_page`` (function): a fresh browser context's page, logged in to ``/admin/``.

Playwright's sync API runs its own event loop: tests here are plain sync tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.browser.cockpit import PAGE_TIMEOUT_MS, Cockpit, running_cockpit

__all__ = ["PAGE_TIMEOUT_MS", "Cockpit"]

SKIP_REASON = "browser tests skipped: no chromium (apt-get install -y chromium)"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
LOG_TAIL_LINES = 150

# Cockpits running now, for the log tail a failing test's report gets.
_live_cockpits: list[Cockpit] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for cockpit in _live_cockpits:
            for process in [cockpit.edge, *cockpit.nodes.values()]:
                lines = process.log().splitlines()[-LOG_TAIL_LINES:]
                report.sections.append(
                    (f"log {process.log_path.name} (last {len(lines)} lines)", "\n".join(lines))
                )
    return report


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    path = os.environ.get("IOP_CHROMIUM", DEFAULT_CHROMIUM)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.skip(SKIP_REASON)
    return path


@pytest.fixture(autouse=True)
def _chromium_required(chromium_executable: str) -> None:
    """Every browser test skips without chromium, before any Edge starts for it."""


# Module scope, not session: while Playwright's sync API runs, its event loop counts as the
# running one, and the asyncio tests that follow in the session could not start their own.
@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright, chromium_executable: str) -> Iterator[Browser]:
    chromium = playwright_driver.chromium.launch(executable_path=chromium_executable, headless=True)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def cockpit(
    chromium_executable: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cockpit]:
    with running_cockpit(tmp_path_factory.mktemp("cockpit")) as started:
        _live_cockpits.append(started)
        try:
            yield started
        finally:
            _live_cockpits.remove(started)


@pytest.fixture
def staff_page(browser: Browser, cockpit: Cockpit) -> Iterator[Page]:
    context = browser.new_context(
        base_url=cockpit.base_url, viewport={"width": 1400, "height": 900}
    )
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    cockpit.log_in(page)
    yield page
    context.close()
