"""Reviewing and applying a plan in the admin, as an operator does it in a browser."""

from __future__ import annotations

import re

import yaml
from playwright.sync_api import Page, expect

from tests.browser.conftest import Cockpit

CAPACITY = "nodes[node-a].providers[echo-1].capacity"


def dry_run(cockpit: Cockpit, capacity: int) -> dict:
    """A dry run through the operator API, as `manage.py refresh` sends it."""
    config = yaml.safe_load(cockpit.config_path.read_text())
    for provider in config["nodes"][0]["providers"]:
        if provider["id"] == "echo-1":
            provider["capacity"] = capacity
    with cockpit.operator() as operator:
        answer = operator.post(
            "/refresh",
            json={
                "mode": "dry_run",
                "config_yaml": yaml.safe_dump(config, sort_keys=False),
                "reason": "room for the nightly batch",
            },
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ok"
    return answer.json()


def test_a_plan_is_reviewed_confirmed_applied_and_marked_applied(
    staff_page: Page, cockpit: Cockpit
) -> None:
    page = staff_page
    plan = dry_run(cockpit, 6)

    page.goto("/admin/refresh/refreshrecord/")
    row = page.locator("#result_list tbody tr", has_text=plan["refresh_id"])
    expect(row.locator("td.field-outcome_column")).to_have_text("pending")
    expect(row.locator("td.field-reason_short")).to_have_text("room for the nightly batch")
    row.get_by_role("link", name=plan["refresh_id"]).click()

    expect(page.locator("#refresh-plan-outcome")).to_contain_text("Pending")
    expect(page.locator("#refresh-changes")).to_contain_text(CAPACITY)
    page.get_by_role("link", name="Apply this plan…").click()

    # The confirmation page: what will change, nothing applied yet.
    expect(page).to_have_url(re.compile(r"/apply/$"))
    expect(page.locator("#refresh-confirm-summary")).to_contain_text("Plan: 1 change (1 live")
    expect(page.locator("#refresh-changes")).to_contain_text(CAPACITY)
    assert page.locator("#refresh-stale-warning").count() == 0
    assert cockpit.status()["providers"]["echo-1"]["capacity"] == 4
    page.fill("#id_reason", "approved in OPS-31")
    page.get_by_role("button", name="Yes, apply this plan").click()

    # The apply's own record, linked to the plan it carried out.
    expect(page.locator(".messagelist")).to_contain_text("Applied sha256:")
    expect(page.locator(".field-reason")).to_contain_text("approved in OPS-31")
    expect(page.locator(".field-requested_by")).to_contain_text(f"admin {cockpit.username}")
    expect(page.locator(".field-applied_from")).to_contain_text(plan["refresh_id"])
    applied_id = page.locator(".field-refresh_id .readonly").inner_text().strip()
    assert cockpit.status()["providers"]["echo-1"]["capacity"] == 6

    page.locator(".field-applied_from a").click()
    expect(page.locator("#refresh-plan-outcome")).to_contain_text(
        f"Applied by {applied_id} (admin {cockpit.username})"
    )
    assert page.get_by_role("link", name="Apply this plan…").count() == 0

    page.goto("/admin/refresh/refreshrecord/")
    row = page.locator("#result_list tbody tr", has_text=plan["refresh_id"])
    outcome = row.locator("td.field-outcome_column a")
    expect(outcome).to_have_text("applied")
    expect(outcome).to_have_attribute("title", f"applied by {applied_id}")
