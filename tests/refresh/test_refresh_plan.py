"""`plan_refresh` and the plan's words: pure, no database, no runtime."""

from __future__ import annotations

import pytest

from edge.config import load_config_text
from refresh.plan import plan_refresh
from refresh.report import outcome, plan_lines
from tests.refresh.refresh_helpers import (
    STALE_BASE,
    make_config,
    with_adapter_change,
    with_capacity,
    yaml_of,
)

RUNNING = load_config_text(yaml_of(make_config()))
CAPACITY = "nodes[node-a].providers[echo-1].capacity"


def test_it_finds_no_change_in_a_reordered_restyled_file():
    config = make_config()
    config["openai"]["principal_tokens"].reverse()
    text = "# a comment\n" + yaml_of(config)

    plan = plan_refresh(RUNNING, text, mode="dry_run")

    assert plan.result.status == "no_change"
    assert plan.result.classification.changes == []
    assert plan.result.candidate_revision == RUNNING.revision
    assert plan.applicable


def test_it_plans_a_live_change_as_ok():
    plan = plan_refresh(RUNNING, yaml_of(with_capacity(make_config(), 8)), mode="dry_run")

    result = plan.result.to_dict()
    assert result["status"] == "ok"
    assert [(c["path"], c["old"], c["new"], c["apply"]) for c in result["changes"]] == [
        (CAPACITY, 4, 8, "live")
    ]
    assert result["changed_nodes"] == ["node-a"]
    assert result["changed_providers"] == ["echo-1"]
    assert result["restart_required_paths"] == []
    assert result["errors"] == [] and result["node_pushes"] == []
    assert result["base_revision"] == RUNNING.revision
    assert result["candidate_revision"] != RUNNING.revision


def test_it_refuses_a_restart_path_whatever_else_is_live():
    candidate = with_adapter_change(with_capacity(make_config(), 8))

    plan = plan_refresh(RUNNING, yaml_of(candidate), mode="apply")

    assert plan.result.status == "restart_required"
    assert plan.result.classification.restart_required_paths == ["nodes[node-a].adapters[echo-2]"]
    assert not plan.applicable


def test_it_reports_every_error_of_an_invalid_candidate():
    candidate = with_capacity(make_config(), 0)
    candidate["queue"]["queue_timeout_s"] = 0

    plan = plan_refresh(RUNNING, yaml_of(candidate), mode="dry_run")

    assert plan.result.status == "invalid"
    assert {e["path"] for e in plan.result.errors} == {CAPACITY, "queue.queue_timeout_s"}
    assert plan.candidate is None
    assert plan.result.to_dict()["candidate_revision"] is None
    assert plan.result.to_dict()["changes"] == []


def test_it_says_where_unparsable_yaml_breaks():
    plan = plan_refresh(RUNNING, "version: 1\nedge: [", mode="dry_run")

    assert plan.result.status == "invalid"
    assert plan.result.errors[0]["path"].startswith("line ")


def test_it_marks_a_plan_on_an_old_base_stale():
    plan = plan_refresh(
        RUNNING, yaml_of(with_capacity(make_config(), 8)), mode="apply", base_revision=STALE_BASE
    )

    assert plan.result.status == "stale"
    assert plan.result.errors[0]["path"] == "base_revision"
    assert RUNNING.revision in plan.result.errors[0]["message"]
    assert not plan.applicable


def test_it_marks_a_plan_whose_candidate_changed_since_review_stale():
    reviewed = plan_refresh(RUNNING, yaml_of(with_capacity(make_config(), 8)), mode="dry_run")
    edited_since = yaml_of(with_capacity(make_config(), 9))

    plan = plan_refresh(
        RUNNING,
        edited_since,
        mode="apply",
        base_revision=RUNNING.revision,
        candidate_revision=reviewed.result.candidate_revision,
    )

    assert plan.result.status == "stale"
    assert plan.result.errors[0]["path"] == "candidate_revision"
    assert not plan.applicable
    same = plan_refresh(
        RUNNING,
        yaml_of(with_capacity(make_config(), 8)),
        mode="apply",
        candidate_revision=reviewed.result.candidate_revision,
    )
    assert same.result.status == "ok"


def test_it_accepts_the_running_revision_as_base():
    plan = plan_refresh(
        RUNNING,
        yaml_of(with_capacity(make_config(), 8)),
        mode="apply",
        base_revision=RUNNING.revision,
    )

    assert plan.result.status == "ok"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"status": "no_change", "mode": "apply"}, "No change: the Edge already runs sha256:"),
        ({"status": "ok", "mode": "dry_run"}, "Dry run OK: 1 live change would apply"),
        ({"status": "applied", "mode": "apply"}, "Applied sha256:"),
        ({"status": "restart_required", "mode": "dry_run"}, "Restart required: 1 change"),
        ({"status": "restart_required", "mode": "apply"}, "Refused: 1 change would need"),
        ({"status": "invalid", "mode": "apply"}, "Invalid: 1 error; nothing was changed."),
        ({"status": "stale", "mode": "apply"}, "Stale: the plan was made"),
    ],
)
def test_it_words_each_outcome(result, expected):
    base = plan_refresh(RUNNING, yaml_of(with_capacity(make_config(), 8)), mode="dry_run")
    words = {**base.result.to_dict(), **result}
    if result["status"] == "restart_required":
        words["changes"] = [{**words["changes"][0], "apply": "restart"}]
    if result["status"] in ("invalid", "stale"):
        words["errors"] = [{"path": "base_revision", "message": "the plan was made against x"}]

    assert outcome(words).startswith(expected)


def test_it_prints_plan_lines_like_terraform():
    result = plan_refresh(
        RUNNING, yaml_of(with_capacity(make_config(), 8)), mode="apply"
    ).result.to_dict()
    result["status"] = "applied"
    result["node_pushes"] = [
        {"node": "node-a", "status": "acked", "error": None},
        {"node": "node-b", "status": "rejected", "error": "providers[x]: unknown adapter"},
    ]

    lines = plan_lines(result)

    assert lines[0] == f"  ~ {CAPACITY}: 4 → 8 (live)"
    assert "  node-b: rejected (providers[x]: unknown adapter)" in lines
    assert lines[-2] == "Plan: 1 change (1 live, 0 restart required)."
    assert lines[-1].endswith(
        "(1 live change); pushed to node-a: acked, "
        "node-b: rejected (providers[x]: unknown adapter)."
    )


def test_it_sums_up_no_plan_for_an_invalid_candidate():
    candidate = yaml_of(with_capacity(make_config(), 0))
    result = plan_refresh(RUNNING, candidate, mode="apply").result.to_dict()

    lines = plan_lines(result)

    assert lines[0] == "Errors:" and lines[1].startswith(f"  {CAPACITY}: ")
    assert lines[2:] == ["Invalid: 1 error; nothing was changed."]


def test_it_gives_the_reason_of_a_stale_plan_once():
    candidate = yaml_of(with_capacity(make_config(), 8))
    result = plan_refresh(RUNNING, candidate, mode="apply", base_revision=STALE_BASE).result

    lines = plan_lines(result.to_dict())

    assert "Errors:" not in lines
    assert lines[-1] == f"Stale: {result.errors[0]['message']}. Nothing was changed."
