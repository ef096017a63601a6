"""Planning runs off the event loop and within its time limit (`IOP_REFRESH_PLAN_TIMEOUT_S`)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from refresh import actions
from refresh.actions import run_refresh
from refresh.models import RefreshRecord
from tests.refresh.refresh_helpers import make_config, with_capacity, yaml_of

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 10.0


class HeldPlanning:
    """`plan_refresh` that tells the loop it started, then plans once let go (or after WAIT_S)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.plan = actions.plan_refresh
        monkeypatch.setattr(actions, "plan_refresh", self)

    def __call__(self, *args, **kwargs):
        self.loop.call_soon_threadsafe(self.started.set)
        # On the loop's own thread this wait would freeze the loop, and nothing could release it.
        assert self.release.wait(WAIT_S), "the event loop did not run while planning"
        return self.plan(*args, **kwargs)


def dry_run(runtime, capacity: int = 8):
    candidate = yaml_of(with_capacity(make_config(), capacity))
    return run_refresh(runtime, mode="dry_run", config_yaml=candidate, requested_by="test")


async def test_the_event_loop_keeps_running_while_a_refresh_plans(runtime, monkeypatch):
    planning = HeldPlanning(monkeypatch)
    refresh = asyncio.create_task(dry_run(runtime))
    try:
        # This coroutine runs while the plan is in progress: the loop is free.
        await asyncio.wait_for(planning.started.wait(), WAIT_S)
        assert not refresh.done()
    finally:
        planning.release.set()

    result = await asyncio.wait_for(refresh, WAIT_S)

    assert result.status == "ok"
    assert [c.path for c in result.classification.changes] == [
        "nodes[node-a].providers[echo-1].capacity"
    ]


async def test_a_plan_past_its_time_limit_is_invalid_and_holds_the_next_refresh(
    runtime, monkeypatch, settings
):
    settings.IOP_REFRESH_PLAN_TIMEOUT_S = 0.05
    planning = HeldPlanning(monkeypatch)
    revision = runtime.config.revision
    try:
        result = await asyncio.wait_for(dry_run(runtime), WAIT_S)

        assert result.status == "invalid"
        assert result.errors == [
            {
                "path": "",
                "message": "planning took longer than 0.05 s (IOP_REFRESH_PLAN_TIMEOUT_S); "
                "nothing was changed. The next refresh starts once this plan has ended.",
            }
        ]
        assert runtime.config.revision == revision
        record = await sync_to_async(RefreshRecord.objects.get)(refresh_id=result.refresh_id)
        assert record.status == "invalid"
        # The thread still plans: the next refresh waits for it instead of planning beside it.
        assert runtime.refresh_lock.locked()
    finally:
        planning.release.set()

    settings.IOP_REFRESH_PLAN_TIMEOUT_S = WAIT_S
    next_one = await asyncio.wait_for(dry_run(runtime, capacity=6), WAIT_S)
    assert next_one.status == "ok"
