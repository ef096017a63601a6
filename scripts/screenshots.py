"""The README's admin screenshots, taken from a real Edge in Debian's chromium.

    .venv/bin/python scripts/screenshots.py [--out docs] [--chromium /usr/bin/chromium]

It starts an Edge and a Node as the browser tests do (tests/browser/cockpit.py) in a scratch
directory, with freshly collected static files; sends a few requests; records a dry run, its
apply and a second dry run; then writes one PNG per entry of ``PAGES``, 1400 px wide, and one
of the live dashboard with two slow streams in flight and a third queued.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser.cockpit import PAGE_TIMEOUT_MS, Cockpit, running_cockpit  # noqa: E402
from tests.e2e.harness import wait_until  # noqa: E402

# File name under --out -> admin page, shot whole, logged in as staff.
PAGES = {
    "admin-refresh-records.png": "/admin/refresh/refreshrecord/",
}
DASHBOARD = "dashboard.png"
WIDTH, HEIGHT = 1400, 800
# echo-slow sends a token every 200 ms: 4 s, long enough to be seen in flight, and short enough
# for the queued third to start within its queue timeout (5 s).
SLOW_PROMPT = " ".join(f"w{i}" for i in range(20))


def with_capacity(cockpit: Cockpit, capacity: int) -> str:
    """The served config with provider echo-1's capacity changed."""
    config = yaml.safe_load(cockpit.config_path.read_text())
    for provider in config["nodes"][0]["providers"]:
        if provider["id"] == "echo-1":
            provider["capacity"] = capacity
    return yaml.safe_dump(config, sort_keys=False)


def fill(cockpit: Cockpit) -> None:
    """Usage rows and refresh records worth looking at."""
    client = cockpit.client()
    for model in ("echo", "echo", "echo-slow"):
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello edge"}], max_tokens=4
        )
    cockpit.wait_usage(3)
    with cockpit.operator() as operator:
        for mode, capacity, reason in [
            ("dry_run", 6, "room for the nightly batch"),
            ("apply", 6, "room for the nightly batch"),
            ("dry_run", 8, "try a larger pool"),
        ]:
            body = {"mode": mode, "config_yaml": with_capacity(cockpit, capacity), "reason": reason}
            operator.post("/refresh", json=body).raise_for_status()


def shoot(page: Page, path: str, target: Path) -> None:
    page.goto(path)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=target, full_page=True)
    print(f"wrote {target}")


def stream_slowly(cockpit: Cockpit) -> None:
    stream = cockpit.client().chat.completions.create(
        model="echo-slow", messages=[{"role": "user", "content": SLOW_PROMPT}], stream=True
    )
    for _ in stream:
        pass


def shoot_dashboard_under_traffic(page: Page, cockpit: Cockpit, target: Path) -> None:
    """echo-slow (capacity 2) with both slots taken and one request queued behind them."""
    streams = [threading.Thread(target=stream_slowly, args=(cockpit,)) for _ in range(3)]
    for stream in streams:
        stream.start()
    wait_until(lambda: cockpit.in_flight("echo-slow") == 2, what="two slow streams in flight")
    page.goto("/admin/dashboard/")
    page.get_by_text("2 / 2").wait_for()
    page.screenshot(path=target, full_page=True)
    print(f"wrote {target}")
    for stream in streams:
        stream.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--chromium", default=os.environ.get("IOP_CHROMIUM", "/usr/bin/chromium"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iop-screenshots-") as scratch:
        workdir = Path(scratch)
        os.environ["IOP_STATIC_ROOT"] = str(workdir / "static")
        # Local Edges on loopback, as under `make`: a generated key, no TLS settings.
        os.environ.setdefault("IOP_GENERATE_SECRET_KEY", "true")
        os.environ.setdefault("IOP_SILENCED_SYSTEM_CHECKS", "edge.W001")
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
            cwd=ROOT,
            env={**os.environ, "IOP_VAR_DIR": str(workdir / "collect-var")},
            check=True,
        )
        edge_dir = workdir / "edge"
        edge_dir.mkdir()
        with running_cockpit(edge_dir) as cockpit, sync_playwright() as driver:
            fill(cockpit)
            browser = driver.chromium.launch(executable_path=args.chromium, headless=True)
            context = browser.new_context(
                base_url=cockpit.base_url, viewport={"width": WIDTH, "height": HEIGHT}
            )
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            page = context.new_page()
            cockpit.log_in(page)
            for name, path in PAGES.items():
                shoot(page, path, args.out / name)
            shoot_dashboard_under_traffic(page, cockpit, args.out / DASHBOARD)
            browser.close()


if __name__ == "__main__":
    main()
