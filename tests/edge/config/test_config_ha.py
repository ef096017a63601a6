"""`edge.ha`: off by default, a boolean, in the canonical form only when on, restart-required;
and the listeners `run_edge --listen/--admin-listen` pin over a config."""

from __future__ import annotations

import pytest

from edge.config.overrides import ListenOverrideError, bound_listeners, pin_listeners
from refresh.classify import classify
from tests.edge.config.test_config_validation import (
    assert_issue,
    load_dict,
    make_config_dict,
    make_config_with,
)


def test_it_is_off_by_default_and_leaves_the_revision_alone() -> None:
    plain = load_dict(make_config_dict())
    spelled = load_dict(make_config_with({"edge.ha": False}))

    assert plain.edge.ha is False
    assert "ha" not in plain.canonical["edge"]
    assert spelled.revision == plain.revision


def test_it_turns_on_and_changes_the_revision() -> None:
    plain = load_dict(make_config_dict())
    ha = load_dict(make_config_with({"edge.ha": True}))

    assert ha.edge.ha is True
    assert ha.canonical["edge"]["ha"] is True
    assert ha.revision != plain.revision


@pytest.mark.parametrize("value", ["yes", 1, None, []])
def test_it_must_be_a_boolean(value: object) -> None:
    assert_issue(make_config_with({"edge.ha": value}), "edge.ha", "must be true or false")


def test_turning_it_on_or_off_needs_a_restart() -> None:
    plain = load_dict(make_config_dict()).canonical
    ha = load_dict(make_config_with({"edge.ha": True})).canonical

    on = classify(plain, ha)
    off = classify(ha, plain)

    assert [(c.path, c.old, c.new, c.apply) for c in on.changes] == [
        ("edge.ha", False, True, "restart")
    ]
    assert off.restart_required_paths == ["edge.ha"]


def test_the_listen_flags_override_the_listeners_and_keep_the_revision() -> None:
    config = load_dict(make_config_dict())
    bound = bound_listeners(config, "127.0.0.1:18000", "127.0.0.1:18001")
    pinned = pin_listeners(config, bound)

    assert (pinned.edge.listen, pinned.edge.admin_listen) == ("127.0.0.1:18000", "127.0.0.1:18001")
    assert pinned.revision == config.revision
    assert pinned.canonical == config.canonical
    assert pinned.node("node-a") == config.node("node-a")


def test_without_flags_the_config_keeps_its_listeners() -> None:
    config = load_dict(make_config_dict())
    bound = bound_listeners(config)

    assert (bound.listen, bound.admin_listen) == (config.edge.listen, config.edge.admin_listen)
    assert pin_listeners(config, bound) is config
    assert pin_listeners(config, None) is config


@pytest.mark.parametrize(
    ("listen", "admin_listen", "message"),
    [
        ("nonsense", None, "--listen: must be host:port"),
        ("127.0.0.1:70000", None, "--listen: port must be 1-65535"),
        (None, "10.1.2.3:8001", "--admin-listen: must be a loopback address"),
        (None, "127.0.0.1:8000", "--admin-listen (edge.admin_listen): port 8000 is already used"),
        ("127.0.0.1:8001", None, "port 8001 is already used by --listen (edge.listen)"),
    ],
)
def test_it_refuses_unusable_listen_flags_naming_the_flag(
    listen: str | None, admin_listen: str | None, message: str
) -> None:
    config = load_dict(make_config_dict())  # 127.0.0.1:8000 and 127.0.0.1:8001

    with pytest.raises(ListenOverrideError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bound_listeners(config, listen, admin_listen)


def test_the_flags_may_not_take_the_openai_listeners_port() -> None:
    config = load_dict(make_config_with({"openai.listen": "0.0.0.0:9000"}))

    with pytest.raises(ListenOverrideError, match=r"openai\.listen: port 9000 is already used"):
        bound_listeners(config, "0.0.0.0:9000")
