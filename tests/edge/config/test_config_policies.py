"""`openai.policies`: validation with paths, resolution of overrides, canonical form, live diff."""

from __future__ import annotations

from typing import Any

import pytest

from edge.config.policies import Policy
from refresh.classify import classify, format_change
from tests.edge.config.test_config_validation import (
    assert_issue,
    load_dict,
    make_config_dict,
    make_config_with,
    make_token,
)

ENTRY = "openai.policies[team-a]"


def with_policies(*policies: dict[str, Any]) -> dict[str, Any]:
    data = make_config_dict()
    data["openai"]["principal_tokens"] = [make_token("cli"), make_token("web")]
    for token in data["openai"]["principal_tokens"]:
        token["principal_ref"] = "team-a"
    data["openai"]["policies"] = list(policies)
    return data


def test_a_principal_without_a_policy_is_unlimited() -> None:
    config = load_dict(with_policies({"principal_ref": "team-a", "requests_per_minute": 5}))
    assert config.policy_for("team-b", "x", "echo") is None
    assert config.policy_for("team-a", "cli", "echo") == Policy(requests_per_minute=5)


def test_model_override_beats_token_override_beats_entry() -> None:
    config = load_dict(
        with_policies(
            {
                "principal_ref": "team-a",
                "requests_per_minute": 10,
                "tokens_per_day": 1000,
                "weight": 3,
                "token_overrides": [
                    {"token_ref": "cli", "requests_per_minute": 2, "priority_class": "batch"}
                ],
                "model_overrides": [{"model": "echo", "requests_per_minute": 7}],
            }
        )
    )
    assert config.policy_for("team-a", "cli", "echo") == Policy(
        requests_per_minute=7, tokens_per_day=1000, weight=3.0, priority_class="batch"
    )
    assert config.policy_for("team-a", "cli", "other") == Policy(
        requests_per_minute=2, tokens_per_day=1000, weight=3.0, priority_class="batch"
    )
    assert config.policy_for("team-a", "web", "other") == Policy(
        requests_per_minute=10, tokens_per_day=1000, weight=3.0
    )
    scopes = config.resolve_policy("team-a", "cli", "echo").scopes
    assert scopes == {
        "requests_per_minute": ("model", "team-a\necho"),
        "tokens_per_day": ("principal", "team-a"),
    }


@pytest.mark.parametrize(
    ("policy", "path", "fragment"),
    [
        (
            {"principal_ref": "team-a", "requests_per_minute": 0},
            f"{ENTRY}.requests_per_minute",
            ">= 1",
        ),
        (
            {"principal_ref": "team-a", "tokens_per_day": "many"},
            f"{ENTRY}.tokens_per_day",
            "integer",
        ),
        ({"principal_ref": "team-a", "weight": 0}, f"{ENTRY}.weight", "> 0"),
        (
            {"principal_ref": "team-a", "priority_class": "bulk"},
            f"{ENTRY}.priority_class",
            "interactive, batch",
        ),
        ({"principal_ref": "team-a", "rpm": 3}, f"{ENTRY}.rpm", "unknown key"),
        ({"requests_per_minute": 3}, "openai.policies[0].principal_ref", "is required"),
        (
            {"principal_ref": "team-a", "token_overrides": [{"token_ref": "nope"}]},
            f"{ENTRY}.token_overrides[nope].token_ref",
            "no principal token",
        ),
        (
            {"principal_ref": "team-b", "token_overrides": [{"token_ref": "cli"}]},
            "openai.policies[team-b].token_overrides[cli].token_ref",
            "principal 'team-a'",
        ),
        (
            {"principal_ref": "team-a", "model_overrides": [{"model": "gpt-9"}]},
            f"{ENTRY}.model_overrides[gpt-9].model",
            "does not define",
        ),
        (
            {"principal_ref": "team-a", "model_overrides": [{"model": "echo"}, {"model": "echo"}]},
            f"{ENTRY}.model_overrides[echo]",
            "duplicate",
        ),
    ],
)
def test_bad_policies_are_reported_with_their_path(policy: dict, path: str, fragment: str) -> None:
    assert_issue(with_policies(policy), path, fragment)


def test_duplicate_principals_are_reported() -> None:
    entry = {"principal_ref": "team-a"}
    assert_issue(with_policies(entry, entry), ENTRY, "duplicate principal_ref")


def test_no_policies_keep_the_revision_and_equal_meanings_share_one() -> None:
    plain = load_dict(make_config_dict())
    empty = load_dict(make_config_with({"openai.policies": []}))
    assert empty.revision == plain.revision
    assert "policies" not in plain.canonical["openai"]
    implicit = load_dict(with_policies({"principal_ref": "team-a"}))
    explicit = load_dict(
        with_policies({"principal_ref": "team-a", "weight": 1, "priority_class": "interactive"})
    )
    assert implicit.revision == explicit.revision


def test_policy_changes_are_live_and_itemised_in_the_diff() -> None:
    before = load_dict(with_policies())
    after = load_dict(
        with_policies(
            {
                "principal_ref": "team-a",
                "requests_per_minute": 5,
                "model_overrides": [{"model": "echo", "tokens_per_minute": 100}],
            }
        )
    )
    added = classify(before.canonical, after.canonical)
    assert [format_change(c) for c in added.changes] == ["+ openai.policies[team-a] (live)"]
    lowered = load_dict(
        with_policies(
            {
                "principal_ref": "team-a",
                "requests_per_minute": 3,
                "model_overrides": [{"model": "echo", "tokens_per_minute": 50}],
            }
        )
    )
    changed = classify(after.canonical, lowered.canonical)
    assert [format_change(c) for c in changed.changes] == [
        "~ openai.policies[team-a].model_overrides[echo].tokens_per_minute: 100 → 50 (live)",
        "~ openai.policies[team-a].requests_per_minute: 5 → 3 (live)",
    ]
    assert changed.restart_required_paths == []
