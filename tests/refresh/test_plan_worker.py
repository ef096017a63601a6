"""Planning in a worker process (refresh.plan_worker): the same plan as in this one, the
candidate rebuilt from the running config's objects, the plan held there for what is done with
it next, and a worker that dies is replaced."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fleet_config import fleet_yaml, one_change
from edge.config import load_config_text
from refresh.plan import Plan, plan_refresh
from refresh.plan_worker import HeldPlan, PlanNotHeld, PlanWorker, RunningUnknown, WorkerDied
from refresh.worker_start import WORKER_NICENESS
from tests.refresh.worker_probes import frozen_and_cyclic_garbage, niceness_and_planning_imported

RUNNING_TEXT = fleet_yaml(12)
RUNNING = load_config_text(RUNNING_TEXT)
CANDIDATE_TEXT = one_change(RUNNING_TEXT)


@pytest.fixture
def worker() -> Iterator[PlanWorker]:
    plan_worker = PlanWorker()
    yield plan_worker
    plan_worker.close()


def without_id(plan: Plan) -> dict[str, Any]:
    result = plan.result.to_dict()
    del result["refresh_id"]
    return result


@pytest.mark.parametrize("mode", ["dry_run", "apply"])
def test_it_plans_what_this_process_plans(worker: PlanWorker, mode: Any) -> None:
    there = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode=mode)
    here = plan_refresh(RUNNING, CANDIDATE_TEXT, mode=mode)

    assert without_id(there) == without_id(here)
    assert there.result.status == "ok" and there.result.classification.changes
    if mode == "apply":
        assert there.candidate is not None and there.candidate == here.candidate
        assert there.candidate.revision == here.result.candidate_revision
    else:
        assert there.candidate is None  # a dry run swaps nothing in: no candidate comes back


def test_an_apply_s_candidate_is_built_from_the_running_config_s_objects(
    worker: PlanWorker,
) -> None:
    plan = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="apply")

    assert plan.candidate is not None
    [changed] = plan.result.classification.changed_nodes
    kept = [node for node in plan.candidate.nodes if node.id != changed]
    assert len(kept) == 11 and all(node is RUNNING.node(node.id) for node in kept)


def test_it_holds_the_running_config_and_the_candidate_it_loaded(worker: PlanWorker) -> None:
    assert not worker.holds(RUNNING.revision)
    dry_run = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run")
    candidate_revision = dry_run.result.candidate_revision

    assert worker.holds(RUNNING.revision) and candidate_revision is not None
    assert worker.holds(candidate_revision)
    # Applied, the candidate runs: the next plan against it needs no text.
    applied = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="apply")
    assert applied.candidate is not None
    back = worker.plan(applied.candidate, None, RUNNING_TEXT, mode="dry_run")
    assert back.result.status == "ok"
    assert back.result.candidate_revision == RUNNING.revision


def test_without_the_running_config_it_plans_in_this_process(worker: PlanWorker) -> None:
    plan = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="apply")

    assert without_id(plan) == without_id(plan_refresh(RUNNING, CANDIDATE_TEXT, mode="apply"))
    assert plan.candidate is not None and plan.candidate.node("node-00000") is not None
    assert not worker.holds(RUNNING.revision)


def test_a_running_text_of_another_revision_is_not_trusted(worker: PlanWorker) -> None:
    plan = worker.plan(RUNNING, CANDIDATE_TEXT, CANDIDATE_TEXT, mode="dry_run")

    assert plan.result.status == "ok"  # planned here, against the running config itself
    assert not worker.holds(RUNNING.revision)


def test_warmed_it_holds_the_running_config_before_the_first_plan(worker: PlanWorker) -> None:
    worker.warm(RUNNING, RUNNING_TEXT).result()

    assert worker.holds(RUNNING.revision)
    # Planned there without the running text: that worker now holds the candidate too.
    dry_run = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="dry_run")
    assert dry_run.result.candidate_revision is not None
    assert worker.holds(dry_run.result.candidate_revision) and worker.holds(RUNNING.revision)


def test_a_warm_up_with_another_revision_s_text_holds_nothing(
    worker: PlanWorker, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(RunningUnknown):
        worker.warm(RUNNING, CANDIDATE_TEXT).result()

    assert not worker.holds(RUNNING.revision)
    plan = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run")
    assert plan.result.status == "ok" and worker.holds(RUNNING.revision)
    assert "did not warm up: the text sent is" in caplog.text


def test_the_worker_lowers_its_priority_before_it_imports_the_planning_code(
    worker: PlanWorker,
) -> None:
    first_task = worker._executor().submit(niceness_and_planning_imported)

    lowered = min(os.nice(0) + WORKER_NICENESS, 19)  # from this process's own
    assert first_task.result() == (lowered, False)


def test_what_the_worker_holds_is_frozen_and_none_of_it_garbage(worker: PlanWorker) -> None:
    worker.warm(RUNNING, RUNNING_TEXT).result()
    warmed, garbage = worker._executor().submit(frozen_and_cyclic_garbage).result()
    assert warmed > 0 and garbage == 0
    applied = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="apply")
    assert applied.candidate is not None
    planned, garbage = worker._executor().submit(frozen_and_cyclic_garbage).result()
    # Frozen too: the candidate loaded, the result and the plan held for the refresh's writes.
    assert planned > warmed and garbage == 0
    worker.plan(applied.candidate, None, RUNNING_TEXT, mode="apply")
    _, garbage = worker._executor().submit(frozen_and_cyclic_garbage).result()
    assert garbage == 0  # the plan it replaced, dropped, left none behind either


def test_an_invalid_candidate_gets_the_same_errors(worker: PlanWorker) -> None:
    text = RUNNING_TEXT.replace("capacity: 4", "capacity: -1", 1)

    there = worker.plan(RUNNING, RUNNING_TEXT, text, mode="apply")

    assert there.result.status == "invalid" and there.candidate is None
    assert there.result.errors == plan_refresh(RUNNING, text, mode="apply").result.errors


def test_a_stale_pin_is_stale_there_too(worker: PlanWorker) -> None:
    there = worker.plan(
        RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="apply", base_revision="sha256:" + "0" * 64
    )

    assert there.result.status == "stale" and there.candidate is None


def test_a_worker_that_dies_is_replaced(worker: PlanWorker) -> None:
    worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run")
    executor = worker._executor()
    [process] = executor._processes.values()  # the one worker, to kill from outside
    os.kill(process.pid, signal.SIGKILL)
    process.join()

    # This plan is made in this process, as the pool broke; the next one in a new worker.
    assert worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="dry_run").result.status == "ok"
    assert not worker.holds(RUNNING.revision)
    assert worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run").result.status == "ok"
    assert worker._executor() is not executor and worker.holds(RUNNING.revision)


def what_the_worker_holds(held: HeldPlan, order: str) -> tuple[str, str, str | None, int, str]:
    """Run in the worker by ``with_plan``."""
    candidate_nodes = 0 if held.candidate is None else len(held.candidate.nodes)
    return order, held.result.status, held.running.revision, candidate_nodes, held.candidate_text


def dies(held: HeldPlan, order: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_worker_holds_its_last_plan_for_what_follows(worker: PlanWorker) -> None:
    dry_run = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run")
    refresh_id = dry_run.result.refresh_id

    assert worker.holds_plan(refresh_id) and not worker.holds_plan("rf-other")
    assert worker.with_plan(what_the_worker_holds, refresh_id, "an order") == (
        "an order",
        "ok",
        RUNNING.revision,
        12,
        CANDIDATE_TEXT,
    )
    apply = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="apply")
    # The next plan replaces it, there and here.
    assert not worker.holds_plan(refresh_id) and worker.holds_plan(apply.result.refresh_id)
    with pytest.raises(PlanNotHeld):
        worker.with_plan(what_the_worker_holds, refresh_id, "too late")


def test_a_plan_made_in_this_process_is_not_held_there(worker: PlanWorker) -> None:
    plan = worker.plan(RUNNING, None, CANDIDATE_TEXT, mode="apply")  # planned here

    assert not worker.holds_plan(plan.result.refresh_id)


def test_a_worker_that_dies_holding_a_plan_says_so(worker: PlanWorker) -> None:
    plan = worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="apply")

    with pytest.raises(WorkerDied):
        worker.with_plan(dies, plan.result.refresh_id, "")
    assert not worker.holds_plan(plan.result.refresh_id) and not worker.holds(RUNNING.revision)
    assert worker.plan(RUNNING, RUNNING_TEXT, CANDIDATE_TEXT, mode="dry_run").result.status == "ok"
