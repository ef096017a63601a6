"""The admin as a browser shows it: styled (its static files served), titled, no dead links."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, Response

from tests.browser.cockpit import PAGE_TIMEOUT_MS, Cockpit

# What a browser computes for an element no stylesheet touches.
UNSTYLED_BACKGROUND = "rgba(0, 0, 0, 0)"
# The boxes of a page that scroll sideways, each as "selector: content width > box width".
SIDEWAYS_SCROLLING = """() => [document.documentElement, ...document.querySelectorAll('.results')]
    .filter((box) => box.scrollWidth > box.clientWidth)
    .map((box) => `${box.className || box.tagName}: ${box.scrollWidth} > ${box.clientWidth}`)"""


def computed(page: Page, selector: str, prop: str) -> str:
    return page.locator(selector).evaluate(f"(e) => getComputedStyle(e).{prop}")


def test_login_page_loads_its_stylesheets(browser: Browser, cockpit: Cockpit) -> None:
    context = browser.new_context(base_url=cockpit.base_url)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    static: dict[str, int] = {}

    def record(response: Response) -> None:
        if "/static/" in response.url:
            static[response.url] = response.status

    page.on("response", record)
    page.goto("/admin/login/")
    page.wait_for_load_state("load")
    stylesheets = page.locator("link[rel=stylesheet]").evaluate_all("(ls) => ls.map(l => l.href)")
    assert any("/static/admin/css/base." in href for href in stylesheets), stylesheets
    assert {href: static.get(href) for href in stylesheets} == dict.fromkeys(stylesheets, 200)
    assert computed(page, "#header", "backgroundColor") != UNSTYLED_BACKGROUND
    assert page.locator("#site-name").inner_text() == "IOP Edge"
    assert page.title().endswith("IOP Edge")
    context.close()


def test_admin_index_is_styled_and_titled(staff_page: Page) -> None:
    header = staff_page.locator("#header")
    assert computed(staff_page, "#header", "display") == "flex"
    assert computed(staff_page, "#header", "backgroundColor") != UNSTYLED_BACKGROUND
    assert header.locator("#site-name").inner_text() == "IOP Edge"
    assert staff_page.title() == "Site administration | IOP Edge"
    # The Edge has no public site: no "View site" link leads nowhere.
    assert staff_page.get_by_role("link", name="View site").count() == 0
    assert header.get_by_role("button", name="Log out").count() == 1


def test_edge_stylesheet_is_loaded(staff_page: Page) -> None:
    links = staff_page.locator("link[rel=stylesheet]").evaluate_all("(ls) => ls.map(l => l.href)")
    assert any("/static/edge/admin." in href for href in links), links


def test_every_list_fits_a_1400_px_window(staff_page: Page, cockpit: Cockpit) -> None:
    # Rows with long values in them: a usage record, a refresh record with its revisions.
    cockpit.client().chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "fill the usage list"}]
    )
    cockpit.wait_usage(1)
    with cockpit.operator() as operator:
        candidate = cockpit.config_path.read_text()
        refresh = operator.post("/refresh", json={"mode": "dry_run", "config_yaml": candidate})
        assert refresh.status_code == 200, refresh.text
    lists = staff_page.locator("#content-main tr[class^=model-] th a").evaluate_all(
        "(links) => links.map(l => l.getAttribute('href'))"
    )
    assert len(lists) >= 8, lists
    scrolling = {}
    for url in lists:
        staff_page.goto(url)
        # The page, or a list's own box (the admin scrolls a too-wide table inside it).
        boxes = staff_page.evaluate(SIDEWAYS_SCROLLING)
        if boxes:
            scrolling[url] = boxes
    assert scrolling == {}
