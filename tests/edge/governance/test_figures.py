"""Per-principal figures: every policy entry shows, with its own budgets left."""

from __future__ import annotations

from edge.config.policies import PolicyEntry, Settings, resolve
from edge.governance.figures import PrincipalFigures, principal_figures
from edge.governance.limits import Admission, Cell, Limiter
from tests.edge.config.test_config_validation import load_dict, make_config_dict


def test_figures_count_admitted_limited_queued_and_budget_left() -> None:
    data = make_config_dict()
    data["openai"]["policies"] = [
        {"principal_ref": "team-a", "max_concurrent": 1, "tokens_per_day": 100},
        {"principal_ref": "idle"},
    ]
    config = load_dict(data)
    limiter = Limiter()
    cell = Cell("team-a", "cli", "echo")
    held = limiter.admit(config.resolve_policy("team-a", "cli", "echo"), cell, 30)
    assert isinstance(held, Admission)
    assert not isinstance(
        limiter.admit(config.resolve_policy("team-a", "cli", "echo"), cell, 1), Admission
    )

    rows = {row.principal: row for row in principal_figures(limiter, config, {"team-a": 2})}

    assert rows["team-a"] == PrincipalFigures("team-a", 1, 2, 1, 1, 70, None)
    assert rows["idle"] == PrincipalFigures("idle", 0, 0, 0, 0, None, None)
    held.settle(10)
    after = principal_figures(limiter, config, {})
    assert after[1] == PrincipalFigures("team-a", 0, 0, 1, 1, 90, None)


def test_resolution_without_entries_is_unlimited() -> None:
    entry = PolicyEntry("p", Settings(weight=1.0, priority_class="interactive"), {}, {})
    assert resolve({"p": entry}, "q", "t", "m").scopes == {}
