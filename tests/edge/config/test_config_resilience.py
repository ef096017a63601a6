"""The `failover` and `passive_health` sections: defaults, validation, canonical form, revision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge.config import load_config_text
from edge.config.schema import Failover, PassiveHealth
from edge.dispatch import PassiveHealthPolicy, snapshot_from_config
from tests.edge.config.test_config_validation import (
    assert_issue,
    load_dict,
    make_config_dict,
    make_config_with,
)


def test_without_the_sections_every_knob_has_its_default() -> None:
    config = load_dict(make_config_dict())

    assert config.failover == Failover(max_attempts=3)
    assert config.passive_health == PassiveHealth(failures=3, window_s=30.0, cooldown_s=30.0)
    assert snapshot_from_config(config).passive_health == PassiveHealthPolicy(3, 30.0, 30.0)


def test_the_sections_set_the_knobs_and_reach_the_pool() -> None:
    config = load_dict(
        make_config_with(
            {
                "failover": {"max_attempts": 1},
                "passive_health": {"failures": 0, "window_s": 5, "cooldown_s": 0.5},
            }
        )
    )

    assert config.failover.max_attempts == 1
    assert config.passive_health == PassiveHealth(failures=0, window_s=5.0, cooldown_s=0.5)
    assert snapshot_from_config(config).passive_health == PassiveHealthPolicy(0, 5.0, 0.5)


def test_null_sections_mean_the_defaults() -> None:
    config = load_dict(make_config_with({"failover": None, "passive_health": None}))

    assert (config.failover, config.passive_health) == (Failover(), PassiveHealth())


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"failover": {"max_attempts": 0}}, "failover.max_attempts", "must be >= 1"),
        ({"failover": {"max_attempts": 11}}, "failover.max_attempts", "must be <= 10"),
        ({"failover": {"max_attempts": "3"}}, "failover.max_attempts", "must be an integer"),
        ({"failover": {"max_attempts": True}}, "failover.max_attempts", "must be an integer"),
        ({"failover": {"max_attempt": 2}}, "failover.max_attempt", "did you mean 'max_attempts'"),
        ({"failover": 3}, "failover", "must be a mapping"),
        ({"passive_health": {"failures": -1}}, "passive_health.failures", "must be >= 0"),
        ({"passive_health": {"window_s": 0}}, "passive_health.window_s", "must be > 0"),
        ({"passive_health": {"cooldown_s": 3601}}, "passive_health.cooldown_s", "must be <= 3600"),
        (
            {"passive_health": {"cooldown": 5}},
            "passive_health.cooldown",
            "did you mean 'cooldown_s'",
        ),
        ({"passive_health": []}, "passive_health", "must be a mapping"),
        ({"failovr": {}}, "failovr", "did you mean 'failover'"),
    ],
)
def test_bad_values_name_their_field(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_issue(make_config_with(changes), path, fragment)


def test_a_config_without_the_sections_keeps_its_revision() -> None:
    plain = load_dict(make_config_dict())
    spelled = load_dict(
        make_config_with(
            {
                "failover": {"max_attempts": 3},
                "passive_health": {"failures": 3, "window_s": 30, "cooldown_s": 30.0},
            }
        )
    )

    assert "failover" not in plain.canonical and "passive_health" not in plain.canonical
    assert spelled.revision == plain.revision


def test_a_section_off_its_defaults_is_in_the_canonical_form_whole() -> None:
    tuned = load_dict(make_config_with({"passive_health": {"cooldown_s": 60}}))

    assert tuned.canonical["passive_health"] == {
        "failures": 3,
        "window_s": 30.0,
        "cooldown_s": 60.0,
    }
    assert "failover" not in tuned.canonical
    assert tuned.revision != load_dict(make_config_dict()).revision


def test_the_shipped_example_keeps_the_revision_its_docs_show() -> None:
    # docs/config.md prints it; the file sets neither section.
    example = Path(__file__).resolve().parents[3] / "configs" / "edge.provider-pool.yaml"
    config = load_config_text(example.read_bytes())

    assert config.revision.startswith("sha256:bdf50d10c480")
