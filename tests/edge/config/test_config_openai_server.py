"""`openai.server`: which HTTP server serves `openai.listen` (daphne, or uvicorn in-process)."""

from __future__ import annotations

from typing import Any

import pytest

from refresh.classify import classify
from tests.edge.config.test_config_validation import (
    assert_issue,
    load_dict,
    make_config_dict,
    make_config_with,
)

OWN_LISTENER = {"openai.listen": "127.0.0.1:9100"}


def test_daphne_is_the_default_and_leaves_the_revision_as_it_was() -> None:
    plain = load_dict(make_config_with(OWN_LISTENER))
    spelled = load_dict(make_config_with({**OWN_LISTENER, "openai.server": "daphne"}))

    assert plain.openai.server == spelled.openai.server == "daphne"
    assert "server" not in plain.canonical["openai"]
    assert spelled.revision == plain.revision


def test_uvicorn_serves_the_openai_listener_and_is_part_of_the_revision() -> None:
    plain = load_dict(make_config_with(OWN_LISTENER))
    uvicorn = load_dict(make_config_with({**OWN_LISTENER, "openai.server": "uvicorn"}))

    assert uvicorn.openai.server == "uvicorn"
    assert uvicorn.canonical["openai"]["server"] == "uvicorn"
    assert uvicorn.revision != plain.revision


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"openai.server": "uvicorn"}, "uvicorn serves openai.listen only: set openai.listen"),
        ({**OWN_LISTENER, "openai.server": "gunicorn"}, "must be one of daphne, uvicorn"),
        ({**OWN_LISTENER, "openai.server": 1}, "must be a string (got an integer)"),
    ],
)
def test_a_bad_server_is_named(changes: dict[str, Any], fragment: str) -> None:
    assert_issue(make_config_with(changes), "openai.server", fragment)


def test_changing_the_server_needs_a_restart() -> None:
    before = load_dict(make_config_with(OWN_LISTENER))
    after = load_dict(make_config_with({**OWN_LISTENER, "openai.server": "uvicorn"}))

    changes = classify(before.canonical, after.canonical).changes

    assert [(c.path, c.op, c.old, c.new, c.apply) for c in changes] == [
        ("openai.server", "changed", "daphne", "uvicorn", "restart")
    ]


def test_the_example_config_needs_no_server() -> None:
    assert load_dict(make_config_dict()).openai.server == "daphne"
