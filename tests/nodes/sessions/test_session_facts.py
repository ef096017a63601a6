"""What a Node session keeps for the dashboard: when it began, and its agent's version."""

from __future__ import annotations

import time

from nodes.sessions import NodeSessionStore
from tests.refresh.refresh_helpers import FakeNodeLink


def test_a_session_starts_now_with_no_agent_version_until_its_hello() -> None:
    store = NodeSessionStore(lambda node, ready: None)
    before = time.time()

    session, _ = store.attach("node-a", FakeNodeLink())

    assert before <= session.connected_at <= time.time()
    assert session.agent_version is None


def test_a_newer_session_does_not_inherit_the_old_ones_agent_version() -> None:
    store = NodeSessionStore(lambda node, ready: None)
    old, _ = store.attach("node-a", FakeNodeLink())
    old.agent_version = "0.1.0"

    new, superseded = store.attach("node-a", FakeNodeLink())

    assert superseded is old and new.agent_version is None  # until the new session's hello
