"""An apply's config pushes to many Nodes: a bounded window of unanswered pushes, and a Node that
never answers holds up the rest only briefly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge.config import load_config_text
from edge.mirror import import_config
from edge.tokens import sha256_hex
from refresh import actions
from refresh.actions import run_refresh
from tests.refresh.refresh_helpers import (
    TOKENS,
    FakeNodeLink,
    connect_node,
    edited,
    make_config,
    make_runtime,
    yaml_of,
)

pytestmark = pytest.mark.django_db(transaction=True)

NODES = [f"node-{index}" for index in range(6)]


def fleet_config(capacity: int = 4) -> dict[str, Any]:
    """node-a (serving model `echo`) and NODES, each with one echo provider of ``capacity``."""

    def edit(config: dict[str, Any]) -> None:
        config["nodes"][0]["providers"][0]["capacity"] = capacity
        for node_id in NODES:
            config["nodes"].append(
                {
                    "id": node_id,
                    "token_hash_sha256": sha256_hex(TOKENS.node(node_id)),
                    "adapters": [{"id": "echo", "type": "echo"}],
                    "providers": [
                        {
                            "id": f"{node_id}-echo",
                            "adapter": "echo",
                            "served_models": ["echo-small"],
                            "capacity": capacity,
                        }
                    ],
                }
            )

    return edited(make_config(), edit)


@pytest.fixture
def fleet(tmp_path):
    runtime = make_runtime(tmp_path, fleet_config())
    text = runtime.config_path.read_text()
    import_config(load_config_text(text), text, source="test")
    return runtime


class SlowNodeLink(FakeNodeLink):
    """A Node that acks after a few turns of the loop, counting the pushes it holds unanswered
    across the whole fleet (``outstanding``)."""

    def __init__(self, outstanding: dict[str, int]) -> None:
        super().__init__()
        self.outstanding = outstanding

    async def send_frame(self, frame: dict[str, Any]) -> None:
        self.frames.append(dict(frame))
        if frame["type"] != "config.refresh":
            return
        self.outstanding["now"] += 1
        self.outstanding["most"] = max(self.outstanding["most"], self.outstanding["now"])
        asyncio.get_running_loop().create_task(self._ack_later(frame))

    async def _ack_later(self, frame: dict[str, Any]) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        self.outstanding["now"] -= 1
        assert self.session is not None
        self.session.resolve_ack(
            {
                "type": "config.ack",
                "revision": frame["revision"],
                "refresh_id": frame["refresh_id"],
                "status": "applied",
                "error": None,
            }
        )


async def test_no_more_pushes_than_the_window_are_unanswered_at_once(fleet, monkeypatch):
    monkeypatch.setattr(actions, "PUSHES_IN_FLIGHT", 2)
    monkeypatch.setattr(actions, "PUSH_SLOT_S", 60.0)  # only answers free a place
    outstanding = {"now": 0, "most": 0}
    links = {node_id: SlowNodeLink(outstanding) for node_id in NODES}
    for node_id, link in links.items():
        connect_node(fleet, link, node_id)

    result = await run_refresh(
        fleet, mode="apply", config_yaml=yaml_of(fleet_config(capacity=8)), requested_by="test"
    )

    assert result.status == "applied"
    assert outstanding["most"] == 2
    assert sorted(push["node"] for push in result.node_pushes if push["status"] == "acked") == [
        *NODES
    ]
    assert all(len(link.refreshes()) == 1 for link in links.values())


async def test_a_node_that_never_answers_does_not_hold_the_others_back(
    fleet, monkeypatch, settings
):
    # One place in the window, and an ack timeout far longer than the test may take: the
    # others' pushes go out only because the silent Node's place is freed after PUSH_SLOT_S.
    monkeypatch.setattr(actions, "PUSHES_IN_FLIGHT", 1)
    monkeypatch.setattr(actions, "PUSH_SLOT_S", 0.01)
    settings.IOP_REFRESH_ACK_TIMEOUT_S = 600
    silent_id, *answering = NODES
    silent = connect_node(fleet, FakeNodeLink(answer=None), silent_id)
    links = {node_id: FakeNodeLink() for node_id in answering}
    for node_id, link in links.items():
        connect_node(fleet, link, node_id)

    async def end_the_silent_session_once_the_others_acked() -> None:
        while not all(link.refreshes() for link in links.values()):
            await asyncio.sleep(0.005)
        await asyncio.sleep(0)  # their acks are resolved a turn after the push
        fleet.nodes.detach(silent)

    ending = asyncio.create_task(end_the_silent_session_once_the_others_acked())
    result = await asyncio.wait_for(
        run_refresh(
            fleet, mode="apply", config_yaml=yaml_of(fleet_config(capacity=8)), requested_by="test"
        ),
        timeout=60,
    )
    await ending

    statuses = {push["node"]: push["status"] for push in result.node_pushes}
    assert statuses == {
        "node-a": "not_connected",  # never connected here
        silent_id: "not_connected",
        **dict.fromkeys(answering, "acked"),
    }


class TurnCountingLink(FakeNodeLink):
    """A Node that notes the loop turn (``turns["now"]``) each config push was sent in."""

    def __init__(self, turns: dict[str, Any]) -> None:
        super().__init__()
        self.turns = turns

    async def send_frame(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "config.refresh":
            self.turns["pushes"].append(self.turns["now"])
        await super().send_frame(frame)


async def test_pushes_are_sent_after_the_swap_s_step_a_few_per_turn(fleet, monkeypatch):
    monkeypatch.setattr(actions, "PUSHES_PER_TURN", 2)
    turns: dict[str, Any] = {"now": 0, "pushes": [], "swap": None}
    for node_id in NODES:
        connect_node(fleet, TurnCountingLink(turns), node_id)
    swap = fleet.swap_config

    def noting_the_swap(prepared: Any) -> None:
        turns["swap"] = turns["now"]
        swap(prepared)

    monkeypatch.setattr(fleet, "swap_config", noting_the_swap)

    async def count_turns() -> None:
        while True:
            await asyncio.sleep(0)
            turns["now"] += 1

    counter = asyncio.create_task(count_turns())
    result = await run_refresh(
        fleet, mode="apply", config_yaml=yaml_of(fleet_config(capacity=8)), requested_by="test"
    )
    counter.cancel()

    assert sorted(push["node"] for push in result.node_pushes if push["status"] == "acked") == [
        *NODES
    ]
    assert len(turns["pushes"]) == len(NODES) and turns["swap"] not in turns["pushes"]
    assert max(turns["pushes"].count(turn) for turn in turns["pushes"]) <= 2
