"""What the review and confirmation pages show of a record: plain strings, escaped by templates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.urls import reverse

from refresh.classify import Change, format_summary, list_delta, render_value
from refresh.history import is_plan, outcomes
from refresh.links import mirror_urls
from refresh.models import RefreshRecord
from refresh.outcome import describe
from refresh.report import changes_of, outcome


def change_rows(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """One row per change; a list value as the items added and removed, and the path linked
    to its object's mirror page when it has one."""
    urls = mirror_urls(change.path for change in changes)
    rows = []
    for change in changes:
        delta = list_delta(change.old, change.new) if change.op == "changed" else None
        rows.append(
            {
                "path": change.path,
                "url": urls.get(change.path, ""),
                "op": change.op,
                "apply": change.apply,
                "old": "" if change.op == "added" else render_value(change.old),
                "new": "" if change.op == "removed" else render_value(change.new),
                "list": delta is not None,
                "added": [render_value(item) for item in delta.added] if delta else [],
                "removed": [render_value(item) for item in delta.removed] if delta else [],
            }
        )
    return rows


def review_of(record: RefreshRecord) -> dict[str, Any]:
    """The review page's context: the plan, its errors and pushes, and its outcome."""
    result: Mapping[str, Any] = record.result or {}
    changes = changes_of(result)
    fate = outcomes([record]).get(record.pk)
    return {
        "changes": change_rows(changes),
        "errors": result.get("errors", []),
        "restart_required_paths": result.get("restart_required_paths", []),
        "node_pushes": result.get("node_pushes", []),
        "changed_nodes": result.get("changed_nodes", []),
        "changed_providers": result.get("changed_providers", []),
        "changed_models": result.get("changed_models", []),
        "summary": format_summary(changes),
        "outcome": outcome(result) if "status" in result else "",
        # An invalid candidate may hold what validation exists to keep out, such as a raw
        # credential (DESIGN §8), so its text is not shown; its errors say what was wrong.
        "candidate_yaml": "" if record.status == "invalid" else record.candidate_yaml,
        "plan_state": fate.state if fate else "",
        "plan_outcome": describe(fate, record.base_revision) if fate else "",
        # An applied plan is done; any other ok dry run goes to the confirmation page, which
        # says at its top when the apply will be refused.
        "can_apply": is_plan(record) and fate is not None and fate.state != "applied",
        "apply_url": reverse("admin:refresh_refreshrecord_apply", args=[record.pk]),
    }
