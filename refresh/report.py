"""A refresh result in words (plain Python): the plan lines and the one-line outcome.

Shared by `manage.py refresh` and the admin's "Apply this plan" message, so an operator reads the
same sentence whichever way they refreshed. Works on the result dict (DESIGN §6), which is what
the CLI gets over HTTP and what a `RefreshRecord` stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from refresh.classify import Change, format_change, format_summary


def changes_of(result: Mapping[str, Any]) -> list[Change]:
    return [Change(**change) for change in result.get("changes", [])]


def short_revision(revision: str | None) -> str:
    if not revision:
        return "-"
    algorithm, _, digest = revision.partition(":")
    return f"{algorithm}:{digest[:12]}…" if digest else revision


def plan_lines(result: Mapping[str, Any]) -> list[str]:
    """The plan: one line per change, then errors and Node pushes, then the summary lines."""
    changes = changes_of(result)
    lines = [f"  {format_change(change)}" for change in changes]
    errors = result.get("errors", [])
    # A stale result's one error is its reason, which the outcome line already gives.
    if errors and result["status"] != "stale":
        lines.append("Errors:")
        lines += [f"  {error['path'] or '(file)'}: {error['message']}" for error in errors]
    pushes = result.get("node_pushes", [])
    if pushes:
        lines.append("Node pushes:")
        lines += [f"  {push_text(push)}" for push in pushes]
    if result["status"] != "invalid":  # an unreadable candidate has no plan to sum up
        lines.append(format_summary(changes))
    lines.append(outcome(result))
    return lines


def push_text(push: Mapping[str, Any]) -> str:
    error = push.get("error")
    return f"{push['node']}: {push['status']}" + (f" ({error})" if error else "")


def outcome(result: Mapping[str, Any]) -> str:
    """One sentence: what happened (or would happen) and that a refusal changed nothing."""
    status = result["status"]
    dry_run = result.get("mode") == "dry_run"
    changes = changes_of(result)
    live = sum(change.apply == "live" for change in changes)
    restart = len(changes) - live
    errors = result.get("errors", [])
    if result.get("mode") == "start":
        return (
            f"Started with {short_revision(result.get('candidate_revision'))}: "
            f"{_count(len(changes), 'change')} since {short_revision(result['base_revision'])}."
        )
    if status == "no_change":
        return f"No change: the Edge already runs {short_revision(result['base_revision'])}."
    if status == "ok":
        return (
            f"Dry run OK: {_count(live, 'live change')} would apply to "
            f"{short_revision(result['base_revision'])}, giving "
            f"{short_revision(result.get('candidate_revision'))}."
        )
    if status == "applied":
        pushes = result.get("node_pushes", [])
        pushed = (
            "pushed to " + ", ".join(push_text(push) for push in pushes)
            if pushes
            else "no Node config changed"
        )
        return (
            f"Applied {short_revision(result.get('candidate_revision'))} "
            f"({_count(live, 'live change')}); {pushed}."
        )
    if status == "restart_required":
        if dry_run:
            return (
                f"Restart required: {_count(restart, 'change')} cannot apply live; "
                "an apply would be refused whole."
            )
        return (
            f"Refused: {_count(restart, 'change')} would need an Edge restart; nothing was changed."
        )
    if status == "invalid":
        return f"Invalid: {_count(len(errors), 'error')}; nothing was changed."
    if status == "stale":
        reason = errors[0]["message"] if errors else "the running config changed"
        return f"Stale: {reason}. Nothing was changed."
    return f"Refresh ended {status}."


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
