"""`models[].endpoints` and `openai.cors.allowed_origins`: defaults, validation, canonical form,
revision and how a refresh classifies them."""

from __future__ import annotations

from typing import Any

import pytest

from edge.config.schema import ALL_ENDPOINTS
from refresh.classify import classify
from tests.edge.config.test_config_validation import assert_issue, load_dict, make_config_with


def test_by_default_a_model_serves_every_endpoint_and_cors_is_off() -> None:
    config = load_dict(make_config_with({}))

    assert config.models[0].endpoints == ALL_ENDPOINTS
    assert {"chat.completions", "completions", "embeddings", "responses"} == ALL_ENDPOINTS
    assert config.openai.cors_allowed_origins == ()
    assert "endpoints" not in config.canonical["models"][0]
    assert "cors" not in config.canonical["openai"]


def test_the_keys_are_read_and_keep_older_revisions_at_their_defaults() -> None:
    plain = load_dict(make_config_with({}))
    spelled = load_dict(
        make_config_with(
            {
                "models.0.endpoints": sorted(ALL_ENDPOINTS),
                "openai.cors": {"allowed_origins": []},
            }
        )
    )
    tuned = load_dict(
        make_config_with(
            {
                "models.0.endpoints": ["embeddings"],
                "openai.cors": {"allowed_origins": ["https://App.example.com", "*"]},
            }
        )
    )

    assert spelled.revision == plain.revision
    assert tuned.models[0].endpoints == {"embeddings"}
    assert tuned.openai.cors_allowed_origins == ("*", "https://app.example.com")
    assert tuned.canonical["models"][0]["endpoints"] == ["embeddings"]
    assert tuned.revision != plain.revision


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"models.0.endpoints": []}, "models[echo].endpoints", "non-empty list"),
        ({"models.0.endpoints": "embeddings"}, "models[echo].endpoints", "non-empty list"),
        (
            {"models.0.endpoints": ["embedding"]},
            "models[echo].endpoints[0]",
            "must be one of chat.completions, completions, embeddings, responses",
        ),
        ({"models.0.endpoints": [3]}, "models[echo].endpoints[0]", "(got an integer)"),
        (
            {"models.0.endpoints": ["embeddings", "embeddings"]},
            "models[echo].endpoints[embeddings]",
            "duplicate endpoint",
        ),
        ({"openai.cors": []}, "openai.cors", "must be a mapping"),
        ({"openai.cors": {"origins": []}}, "openai.cors.origins", "did you mean"),
        (
            {"openai.cors": {"allowed_origins": ["https://app.example.com/path"]}},
            "openai.cors.allowed_origins[0]",
            "no path",
        ),
        (
            {"openai.cors": {"allowed_origins": ["app.example.com"]}},
            "openai.cors.allowed_origins[0]",
            "must be an origin",
        ),
        (
            {"openai.cors": {"allowed_origins": [7]}},
            "openai.cors.allowed_origins[0]",
            "must be a string",
        ),
        (
            {"openai.cors": {"allowed_origins": "https://a.example"}},
            "openai.cors.allowed_origins",
            "must be a list",
        ),
    ],
)
def test_bad_values_name_their_field(changes: dict[str, Any], path: str, fragment: str) -> None:
    assert_issue(make_config_with(changes), path, fragment)


def test_both_change_live() -> None:
    old = load_dict(make_config_with({})).canonical
    new = load_dict(
        make_config_with(
            {
                "models.0.endpoints": ["embeddings", "chat.completions"],
                "openai.cors": {"allowed_origins": ["https://app.example.com"]},
            }
        )
    ).canonical
    changes = {change.path: change for change in classify(old, new).changes}

    assert set(changes) == {"models[echo].endpoints", "openai.cors"}
    assert all(change.apply == "live" for change in changes.values())
    assert changes["models[echo].endpoints"].new == ["chat.completions", "embeddings"]

    narrower = load_dict(
        make_config_with(
            {
                "models.0.endpoints": ["embeddings"],
                "openai.cors": {"allowed_origins": ["https://b.example.com"]},
            }
        )
    ).canonical
    again = {change.path: change for change in classify(new, narrower).changes}
    assert set(again) == {"models[echo].endpoints", "openai.cors.allowed_origins"}
    assert all(change.apply == "live" for change in again.values())
