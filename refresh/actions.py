"""`run_refresh`: the one refresh action behind the endpoint and the admin (DESIGN §6).

Runs on the Edge's event loop, one refresh at a time: plan (in a thread, bounded in time) ->
(apply) mirror, config file and refresh record in one database transaction -> swap the runtime
snapshot -> push to the Nodes -> their answers onto that record. Any other refresh is recorded
once its outcome is known.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

from edge.config import EdgeConfig
from edge.config.canonical import node_canonical
from edge.config.schema import Node
from edge.ha.role import NotLeading
from edge.memory import collection_paused, freeze_without_collecting
from edge.metrics import METRICS
from edge.models import ConfigRevision
from edge.pacing import paced
from edge.runtime import EdgeRuntime, PreparedConfig
from nodes import wire
from nodes.sessions import NodeSession, PendingAck
from refresh import worker_writes
from refresh.models import RefreshRecord
from refresh.persist import ApplyOrder, RecordOrder, save_pushes, save_record, write_apply
from refresh.plan import Mode, NodePush, Plan, RefreshResult, new_refresh_id, plan_refresh
from refresh.plan_worker import PLAN_WORKER, HeldPlan, PlanNotHeld, WorkerDied
from refresh.write_ahead import WriteAhead

log = logging.getLogger(__name__)

# Config pushes sent and not yet answered, at most: the Edge reads every socket that is ready in
# one turn of its loop, so a whole fleet's acks arriving together would hold requests up.
PUSHES_IN_FLIGHT = 64
# Pushes built and sent per turn of the loop, at most, while the window has room: 50-70 µs each
# (the node's config as JSON, framed, written), so about a millisecond a turn.
PUSHES_PER_TURN = 16
# How long an unanswered push keeps its place in that window: a Node that never answers slows the
# pushes after it by this much, not by the ack timeout.
PUSH_SLOT_S = 0.1


@dataclass(frozen=True, slots=True)
class _Requester:
    """Who asked for a refresh and why, as its record keeps it."""

    requested_by: str
    user_id: int | None
    request_id: str
    applied_from: int | None
    token_name: str
    os_user: str
    reason: str


async def run_refresh(
    runtime: EdgeRuntime,
    *,
    mode: Mode,
    config_yaml: str | None = None,
    base_revision: str | None = None,
    candidate_revision: str | None = None,
    requested_by: str,
    user_id: int | None = None,
    request_id: str = "",
    applied_from: int | None = None,
    token_name: str = "",
    os_user: str = "",
    reason: str = "",
) -> RefreshResult:
    """Dry-run or apply a candidate config (the config file when ``config_yaml`` is None).

    An apply pinned to both revisions without ``applied_from`` (the line a CLI dry run prints)
    carries out the latest ``ok`` dry run of that pair: its record links to it.
    """
    if mode == "apply" and applied_from is None and base_revision and candidate_revision:
        applied_from = await _reviewed_dry_run(base_revision, candidate_revision)
    requester = _Requester(
        requested_by, user_id, request_id, applied_from, token_name, os_user, reason
    )
    ahead = WriteAhead(
        worker_writes.write_apply_held,
        functools.partial(_apply_order, runtime, requester=requester),
    )
    async with _RefreshTurn(runtime.refresh_lock) as turn:
        (plan, prepared), config_yaml = await _plan(
            runtime,
            turn,
            mode,
            config_yaml,
            base_revision,
            candidate_revision,
            ahead,
        )
        if prepared is not None:
            await _apply(runtime, plan, prepared, config_yaml, requester, ahead)
        else:
            await _record(plan.result, config_yaml, requester)
        result = plan.result
        METRICS.count_refresh(mode, result.status)
        log.info(
            "refresh %s (%s) by %s: %s, %d changes",
            result.refresh_id,
            mode,
            requested_by,
            result.status,
            len(result.classification.changes),
        )
        return result


class _RefreshTurn:
    """One refresh's hold on the refresh lock.

    A planning thread cannot be killed: one that outlives its timeout (or a cancelled refresh)
    keeps the lock until it ends (``hold_until``), so refreshes stay one at a time and never pile
    planning threads up.
    """

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock = lock
        self._until: asyncio.Future[Any] | None = None

    async def __aenter__(self) -> _RefreshTurn:
        await self._lock.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._until is None or self._until.done():
            self._lock.release()
        else:
            self._until.add_done_callback(self._release_late)

    def hold_until(self, planning: asyncio.Future[Any]) -> None:
        self._until = planning

    def _release_late(self, planning: asyncio.Future[Any]) -> None:
        if not planning.cancelled() and planning.exception() is not None:
            log.error("a timed-out refresh plan failed", exc_info=planning.exception())
        log.warning("a timed-out refresh plan ended; refreshes are accepted again")
        self._lock.release()


_Planned = tuple[Plan, PreparedConfig | None]


def _in_daemon_thread(plan: Callable[[], _Planned]) -> asyncio.Future[_Planned]:
    """Run ``plan`` in its own daemon thread, so a runaway one never holds up the Edge's exit."""
    outcome: concurrent.futures.Future[_Planned] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(plan())
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome.set_exception(exc)

    threading.Thread(target=run, name="refresh-plan", daemon=True).start()
    return asyncio.wrap_future(outcome)


async def _plan(
    runtime: EdgeRuntime,
    turn: _RefreshTurn,
    mode: Mode,
    config_yaml: str | None,
    base_revision: str | None,
    candidate_revision: str | None,
    ahead: WriteAhead,
) -> tuple[_Planned, str]:
    """The plan, its prepared config when it is an apply that can go ahead, and the candidate
    text it was made from (``""`` when the file was unreadable). An apply's writes may be
    ordered before the candidate is built (``ahead``, ``refresh.write_ahead``)."""
    if config_yaml is None:
        try:
            config_yaml = await asyncio.to_thread(_read_config_file, runtime)
        except (OSError, UnicodeDecodeError) as exc:
            unreadable = RefreshResult(
                refresh_id=new_refresh_id(),
                mode=mode,
                status="invalid",
                base_revision=runtime.config.revision,
                errors=[{"path": "config_file", "message": f"cannot read the config file: {exc}"}],
            )
            return (Plan(unreadable, None), None), ""
    # Off the event loop: a fleet's candidate takes seconds of CPU to parse, validate and
    # classify, and requests and Node pings must not wait for it. The thread reads only immutable
    # objects (the running config and pool snapshot).
    running, timeout_s = runtime.config, settings.IOP_REFRESH_PLAN_TIMEOUT_S
    running_text = None
    if runtime.owns_process and not PLAN_WORKER.holds(running.revision):
        running_text = await database_sync_to_async(_revision_yaml)(running.revision)
    planning = _in_daemon_thread(
        functools.partial(
            _plan_and_prepare,
            runtime,
            running,
            running_text,
            config_yaml,
            mode=mode,
            base_revision=base_revision,
            candidate_revision=candidate_revision,
            on_result=ahead,
        )
    )
    turn.hold_until(planning)
    try:
        plan = await ahead.within(planning, timeout_s)
    except TimeoutError:
        timed_out = RefreshResult(
            refresh_id=new_refresh_id(),
            mode=mode,
            status="invalid",
            base_revision=running.revision,
            errors=[
                {
                    "path": "",
                    "message": f"planning took longer than {timeout_s:g} s "
                    "(IOP_REFRESH_PLAN_TIMEOUT_S); nothing was changed. The next refresh "
                    "starts once this plan has ended.",
                }
            ],
        )
        return (Plan(timed_out, None), None), config_yaml
    except Exception:
        await ahead.after_failed_build(running.revision)
        raise
    return plan, config_yaml


def _plan_and_prepare(
    runtime: EdgeRuntime,
    running: EdgeConfig,
    running_text: str | None,
    config_yaml: str,
    *,
    mode: Mode,
    base_revision: str | None,
    candidate_revision: str | None,
    on_result: Callable[[RefreshResult], None] | None,
) -> _Planned:
    """The plan and, for an apply that can go ahead, what it swaps in. An Edge that owns its
    process plans in the worker (``refresh.plan_worker``); ``running_text`` is the running
    config's YAML when the worker does not hold it yet. ``on_result``: ``PlanWorker.ask``'s."""
    read_plan: Callable[[], Plan]
    if runtime.owns_process:
        # The collector runs meanwhile: the worker may take seconds, and the garbage the event
        # loop makes in that time is collected as usual, not frozen with the candidate.
        read_plan = PLAN_WORKER.ask(
            running,
            running_text,
            config_yaml,
            mode=mode,
            base_revision=base_revision,
            candidate_revision=candidate_revision,
            on_result=on_result,
        )
        gc.collect()  # garbage now, before the candidate is built: none of it frozen with it
    else:
        read_plan = functools.partial(
            plan_refresh,
            running,
            config_yaml,
            mode=mode,
            base_revision=base_revision,
            candidate_revision=candidate_revision,
        )
    # Paced: what this thread builds for the Edge (the candidate from the worker's patch, its
    # pool snapshot) would hold the event loop up, computed at once (edge.pacing).
    with collection_paused(), paced():
        plan = read_plan()
        applying = mode == "apply" and plan.applicable and plan.candidate is not None
        prepared = runtime.prepare(plan.candidate) if applying and plan.candidate else None
        if runtime.owns_process:
            # Left to the collector, the objects planning made would be scanned by the next
            # collections, with the event loop stopped each time. Frozen, they cost none: a
            # candidate is swapped in, or freed by reference counting when the refresh ends (a
            # config holds no reference cycles).
            freeze_without_collecting()
    return plan, prepared


def _revision_yaml(revision: str) -> str | None:
    """The YAML the mirror recorded for ``revision`` (the running config's, once imported)."""
    return (
        ConfigRevision.objects.filter(revision=revision)
        .order_by("-pk")
        .values_list("yaml_text", flat=True)
        .first()
    )


def _read_config_file(runtime: EdgeRuntime) -> str:
    if runtime.config_path is None:
        raise FileNotFoundError("the Edge runs without a config file; send config_yaml")
    return runtime.config_path.read_text(encoding="utf-8")


async def _apply(
    runtime: EdgeRuntime,
    plan: Plan,
    prepared: PreparedConfig,
    config_yaml: str,
    requester: _Requester,
    ahead: WriteAhead,
) -> None:
    """Apply an applicable plan and record it; an applied record commits with the mirror."""
    candidate, result = prepared.config, plan.result
    if result.status == "no_change":
        runtime.swap_config(prepared)
        await _record(result, config_yaml, requester)
        return
    result.status = "applied"
    try:
        if not await _written_ahead(ahead):
            order = _apply_order(runtime, result, requester=requester)
            await _write_apply(runtime.config, candidate, result, config_yaml, order)
    except NotLeading as exc:
        # Nothing was applied: this Edge lost the lead while planning; the new leader decides.
        result.status = "invalid"
        result.errors = [{"path": "edge.ha", "message": str(exc)}]
        await _record(result, config_yaml, requester)
        return
    except OSError as exc:
        # Nothing was applied: mirror and record rolled back, the runtime was not touched.
        result.status = "invalid"
        result.errors = [
            {"path": "config_file", "message": f"cannot write {runtime.config_path}: {exc}"}
        ]
        await _record(result, config_yaml, requester)
        return
    pushes = await _stage_pushes(
        runtime, candidate, result.classification.reconfigured_nodes, result.refresh_id
    )
    # Copy-on-write: one synchronous step on the loop, so no request sees half a config; each
    # reconfigured Node's push is held in the same step (``_StagedPushes.hold``).
    runtime.swap_config(prepared)
    result.node_pushes = await _push(runtime, pushes)
    if result.node_pushes:
        await _record_pushes(result)


# Staged pushes built per turn of the event loop: about 5 µs each, so a fleet's 3,000 built in
# the swap's step held requests up for 15 ms.
STAGED_PER_TURN = 250


@dataclass(slots=True)
class _StagedPush:
    """One Node's push, built before the swap: its frame and the ack expected of its session."""

    node_id: str
    session: NodeSession | None  # the Node's session when staged, if it had one
    ack: PendingAck | None
    frame: Callable[[], wire.Frame]
    push: NodePush


@dataclass(slots=True)
class _StagedPushes:
    refresh_id: str
    pushes: dict[str, NodePush]  # every reconfigured Node's, "not_connected" until sent
    staged: list[_StagedPush]

    def hold(self, runtime: EdgeRuntime) -> list[_StagedPush]:
        """Hold each push on its Node's session; call it in the swap's step. A Node that
        connected or reconnected since it was staged (its hello got the old config) has its
        push held on the session it has now."""
        held = []
        for staged in self.staged:
            session = runtime.nodes.get(staged.node_id)
            if session is None or session.closed:
                continue
            if session is not staged.session or staged.ack is None:
                staged.session, staged.ack = session, session.expect_ack(self.refresh_id)
            session.hold_config(staged.frame)
            held.append(staged)
        return held


async def _stage_pushes(
    runtime: EdgeRuntime, candidate: EdgeConfig, node_ids: Sequence[str], refresh_id: str
) -> _StagedPushes:
    """The pushes of ``node_ids`` (the reconfigured Nodes), built STAGED_PER_TURN per turn of
    the loop before the swap. An ack expected early is harmless: none comes before the push."""
    pushes: dict[str, NodePush] = {}
    staged: list[_StagedPush] = []
    for count, node_id in enumerate(node_ids, 1):
        session, node = runtime.nodes.get(node_id), candidate.node(node_id)
        pushes[node_id] = {"node": node_id, "status": "not_connected", "error": None}
        if node is not None:
            frame = functools.partial(_config_push, refresh_id, candidate.revision, node)
            connected = session is not None and not session.closed
            ack = session.expect_ack(refresh_id) if connected and session else None
            staged.append(_StagedPush(node_id, session, ack, frame, pushes[node_id]))
        if count % STAGED_PER_TURN == 0:
            await asyncio.sleep(0)
    return _StagedPushes(refresh_id, pushes, staged)


async def _push(runtime: EdgeRuntime, pushes: _StagedPushes) -> list[NodePush]:
    """Hold the staged pushes (in the swap's step: nothing awaits before), then send each and
    collect the acks, PUSHES_IN_FLIGHT at a time.

    Each session holds its push before any other coroutine runs (``hold_config``): a session's
    frames arrive in order and a Node applies `config.refresh` before it reads its next frame,
    so every run routed by the old snapshot reaches a Node ahead of its new config and every run
    routed by the new one after it, however late its turn in the window comes.
    """
    held = pushes.hold(runtime)
    # The swap's step ends here, before the first push is sent: at 3,000 Nodes reconfigured the
    # swap alone is a 20-30 ms step. The window's first pushes sent in it too made it longer,
    # and their acks, read in the next turn with what arrived meanwhile, longer again.
    await asyncio.sleep(0)
    window = asyncio.Semaphore(PUSHES_IN_FLIGHT)
    waiting: list[asyncio.Task[None]] = []
    for count, staged in enumerate(held, 1):
        if count % PUSHES_PER_TURN == 0:
            await asyncio.sleep(0)
        assert staged.session is not None and staged.ack is not None  # held on a session
        await window.acquire()
        slot = _Slot(window)
        try:
            await staged.session.send_held_config()
        except ConnectionError:
            slot.free()
            continue
        waiting.append(asyncio.create_task(_await_ack(staged.ack, staged.push, slot)))
    await asyncio.gather(*waiting)
    return list(pushes.pushes.values())


class _Slot:
    """One push's place in the window: freed by its answer or after PUSH_SLOT_S, once."""

    __slots__ = ("_timer", "_window")

    def __init__(self, window: asyncio.Semaphore) -> None:
        self._window: asyncio.Semaphore | None = window
        self._timer = asyncio.get_running_loop().call_later(PUSH_SLOT_S, self.free)

    def free(self) -> None:
        self._timer.cancel()
        if self._window is not None:
            self._window.release()
            self._window = None


def _config_push(refresh_id: str, revision: str, node: Node) -> wire.Frame:
    return wire.config_refresh(refresh_id, revision, node_canonical(node))


async def _await_ack(ack: PendingAck, push: NodePush, slot: _Slot) -> None:
    try:
        frame = await ack.wait(settings.IOP_REFRESH_ACK_TIMEOUT_S)
    except TimeoutError:
        push["status"] = "timeout"
        return
    except ConnectionError:
        return  # the session went away: not_connected
    finally:
        slot.free()
    if frame["status"] == "applied":
        push["status"] = "acked"
    else:
        push["status"] = "rejected"
        push["error"] = frame.get("error")


@database_sync_to_async
def _reviewed_dry_run(base_revision: str, candidate_revision: str) -> int | None:
    return (
        RefreshRecord.objects.filter(
            mode="dry_run",
            status="ok",
            base_revision=base_revision,
            candidate_revision=candidate_revision,
        )
        .values_list("pk", flat=True)
        .first()
    )


def _apply_order(
    runtime: EdgeRuntime, result: RefreshResult, *, requester: _Requester
) -> ApplyOrder:
    guard = runtime.commit_guard() if runtime.commit_guard is not None else None
    return ApplyOrder(_record_order(result, requester), runtime.config_path, guard)


def _record_order(result: RefreshResult, requester: _Requester) -> RecordOrder:
    return RecordOrder(
        result.status,
        result.errors,
        {
            "request_id": requester.request_id,
            "requested_by": requester.requested_by,
            "user_id": requester.user_id,
            "token_name": requester.token_name,
            "os_user": requester.os_user,
            "reason": requester.reason,
            "applied_from_id": requester.applied_from,
        },
    )


async def _record(result: RefreshResult, config_yaml: str, requester: _Requester) -> None:
    """Save the record of a refresh that changed nothing."""
    order = _record_order(result, requester)
    if not await _in_worker(worker_writes.save_record_held, result.refresh_id, order, once=True):
        await database_sync_to_async(save_record)(result, config_yaml, order)


async def _write_apply(
    running: EdgeConfig,
    candidate: EdgeConfig,
    result: RefreshResult,
    config_yaml: str,
    order: ApplyOrder,
) -> None:
    """Mirror, record and config file together (``refresh.persist.write_apply``)."""
    if await _in_worker(worker_writes.write_apply_held, result.refresh_id, order, once=True):
        return
    record = RefreshRecord.of(result, config_yaml, **order.record.asker)
    await database_sync_to_async(write_apply)(
        order.config_path, running, candidate, config_yaml, record, order.guard
    )


async def _written_ahead(ahead: WriteAhead) -> bool:
    """Whether the writes ordered ahead (``refresh.write_ahead``) were made in the worker."""
    if ahead.written is None:
        return False
    wait = functools.partial(PLAN_WORKER.outcome, ahead.written, ahead.refresh_id)
    return await _done_in_worker(wait, ahead.refresh_id, once=True)


async def _record_pushes(result: RefreshResult) -> None:
    pushes = result.node_pushes
    if not await _in_worker(worker_writes.save_pushes_held, result.refresh_id, pushes, once=False):
        await database_sync_to_async(save_pushes)(result)


_Order = TypeVar("_Order")


async def _in_worker(
    act: Callable[[HeldPlan, _Order], None], refresh_id: str, order: _Order, *, once: bool
) -> bool:
    """Whether ``act`` was done in the plan worker, on the plan of ``refresh_id`` it holds
    (``refresh.worker_writes``). A worker that died midway may have committed the record it
    was saving (``once``): then that is done."""
    if not PLAN_WORKER.holds_plan(refresh_id):
        return False
    wait = functools.partial(PLAN_WORKER.with_plan, act, refresh_id, order)
    return await _done_in_worker(wait, refresh_id, once=once)


async def _done_in_worker(wait: Callable[[], object], refresh_id: str, *, once: bool) -> bool:
    """Whether what ``wait`` waits for in the worker was done (``_in_worker``)."""
    try:
        await asyncio.to_thread(wait)
    except WorkerDied:
        return once and await database_sync_to_async(_recorded)(refresh_id)
    except PlanNotHeld:
        return False
    return True


def _recorded(refresh_id: str) -> bool:
    return RefreshRecord.objects.filter(refresh_id=refresh_id).exists()
