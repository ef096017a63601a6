"""An apply's writes ordered in the plan worker as soon as its result is read
(refresh.write_ahead): before the candidate is built here, recorded as applied, never after a
plan was given up on its timeout, and a build that fails after them is reported."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fleet_config import fleet_yaml, one_change
from edge.config import load_config_text
from refresh import plan_worker as plan_worker_module
from refresh import write_ahead
from refresh.persist import ApplyOrder, RecordOrder
from refresh.plan import RefreshResult, new_refresh_id
from refresh.plan_worker import PlanWorker
from refresh.write_ahead import WriteAhead
from tests.refresh.worker_acts import what_is_written

RUNNING_TEXT = fleet_yaml(12)
RUNNING = load_config_text(RUNNING_TEXT)
CANDIDATE_TEXT = one_change(RUNNING_TEXT)


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[PlanWorker]:
    """A worker of its own, as the one the writes are ordered in."""
    plan_worker = PlanWorker()
    monkeypatch.setattr(write_ahead, "PLAN_WORKER", plan_worker)
    yield plan_worker
    plan_worker.close()


def an_order(result: RefreshResult) -> ApplyOrder:
    return ApplyOrder(RecordOrder(result.status, result.errors, {"reason": "ahead"}), None, None)


def a_result(status: Any = "ok") -> RefreshResult:
    return RefreshResult(new_refresh_id(), "apply", status, RUNNING.revision)


def test_an_apply_s_writes_are_ordered_before_its_candidate_is_built(
    worker: PlanWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    ahead = WriteAhead(what_is_written, an_order)

    def ordered(result: RefreshResult) -> None:
        ahead(result)
        events.append("ordered")

    def built(*args: Any) -> Any:
        events.append("built")
        return apply_patch(*args)

    apply_patch = plan_worker_module.apply_patch
    monkeypatch.setattr(plan_worker_module, "apply_patch", built)
    read = worker.ask(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="apply", on_result=ordered)
    plan = read()

    assert events == ["ordered", "built"]
    assert ahead.written is not None and ahead.refresh_id == plan.result.refresh_id
    # Recorded as applied; the plan's result stays as planned until the apply says so.
    assert worker.outcome(ahead.written, ahead.refresh_id) == (
        plan.result.refresh_id,
        "ok",
        "applied",
        CANDIDATE_TEXT,
    )
    assert plan.result.status == "ok" and plan.applicable


@pytest.mark.parametrize(
    ("mode", "candidate_text"),
    [("dry_run", CANDIDATE_TEXT), ("apply", "version: [not a config"), ("apply", RUNNING_TEXT)],
    ids=["dry run", "invalid", "no change"],
)
def test_nothing_is_ordered_without_a_change_to_apply(
    worker: PlanWorker, mode: Any, candidate_text: str
) -> None:
    ahead = WriteAhead(what_is_written, an_order)

    worker.ask(RUNNING, RUNNING_TEXT, candidate_text, mode=mode, on_result=ahead)()

    assert ahead.written is None


def test_a_plan_given_up_on_its_timeout_orders_no_write_after(worker: PlanWorker) -> None:
    ahead = WriteAhead(what_is_written, an_order)

    async def give_up() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await ahead.within(never, 0.01)

    asyncio.run(give_up())
    ahead(a_result())  # the planning thread reads its result only now

    assert ahead.written is None


def test_once_ordered_the_plan_is_waited_for_past_its_timeout() -> None:
    ahead = WriteAhead(what_is_written, an_order)
    ahead.written = concurrent.futures.Future()  # as if ordered

    async def wait() -> str:
        loop = asyncio.get_running_loop()
        planning: asyncio.Future[str] = loop.create_future()
        loop.call_later(0.05, planning.set_result, "the plan")
        return await ahead.within(planning, 0.01)

    assert asyncio.run(wait()) == "the plan"


def test_a_build_that_fails_after_its_writes_is_reported(
    worker: PlanWorker, caplog: pytest.LogCaptureFixture
) -> None:
    ahead = WriteAhead(what_is_written, an_order)
    worker.ask(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="apply", on_result=ahead)()

    with caplog.at_level(logging.ERROR, logger="refresh.write_ahead"):
        asyncio.run(ahead.after_failed_build(RUNNING.revision))

    [logged] = caplog.records
    assert ahead.refresh_id in logged.getMessage() and RUNNING.revision in logged.getMessage()
    assert "restart the Edge or apply again" in logged.getMessage()


def test_a_build_that_fails_with_nothing_ordered_reports_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="refresh.write_ahead"):
        asyncio.run(WriteAhead(what_is_written, an_order).after_failed_build(RUNNING.revision))

    assert not caplog.records
