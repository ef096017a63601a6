"""Planning refreshes in a worker process, for an Edge that is serving.

Planning a fleet's candidate (parse, validate, classify: seconds of CPU at thousands of nodes) in
a thread of the Edge competed with the event loop for the interpreter: the loop gives it up at
every socket call and waits for it behind a busy thread, so with thousands of Node sessions
requests were held up for hundreds of milliseconds per refresh. In a process of its own the plan
holds only that process.

The worker holds the configs it loaded last (the running one and the last candidate), so it
plans against the running config without reading it again, and an apply of the candidate that was
just dry-run is not loaded again either. An Edge whose config is a fleet's starts the worker as
it starts and has it load the running config then (``warm``), not at the first refresh. The Edge
gets back the result and, for an apply it can go ahead with, a ``ConfigPatch``
(``edge.config.patch``) that it builds the candidate from, sharing its own objects: reading a
whole fleet's config back would cost it most of what was saved.

The worker also keeps its last plan (``HeldPlan``), so what the Edge saves of it (the mirror, the
refresh record, the config file: megabytes for a fleet) is written there too (``with_plan``,
``refresh.persist``), from what the worker holds, instead of by a thread beside the event loop.
"""

from __future__ import annotations

import codecs
import concurrent.futures
import contextlib
import functools
import gc
import hashlib
import json
import logging
import multiprocessing
import pickle
import threading
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from edge.config import ConfigError, EdgeConfig, load_config_text
from edge.config.patch import apply_patch, dumps, dumps_in_pieces, loads_in_pieces, patch_against
from edge.memory import collection_paused, freeze_without_collecting
from refresh.plan import Mode, Plan, RefreshResult, plan_refresh
from refresh.worker_start import start_worker

log = logging.getLogger(__name__)

# A config at least this long is loaded by the worker as the Edge starts (``PlanWorker.warm``);
# a smaller one plans in tens of milliseconds, and the worker starts at the first refresh.
WARM_FROM_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What the worker plans: ``running_text`` only when it does not hold the running config."""

    running_revision: str
    running_text: str | None
    candidate_text: str | bytes
    mode: Mode
    base_revision: str | None
    candidate_revision: str | None


class WorkerBusy(RuntimeError):
    """The worker cannot take a call now without making it wait (``decode_json``)."""


class RunningUnknown(LookupError):
    """The worker does not hold the running config, and was not sent it."""


class PlanNotHeld(LookupError):
    """The worker does not hold that plan: a later one replaced it, or the worker was replaced
    (``WorkerDied``); what was to be done with it is done in the Edge."""


class WorkerDied(PlanNotHeld):
    """The worker died while it held the plan, perhaps midway through what it was doing."""


@dataclass(slots=True)
class HeldPlan:
    """The worker's last plan, with the configs and the text it was made from."""

    result: RefreshResult
    candidate_text: str
    running: EdgeConfig
    candidate: EdgeConfig | None


Order = TypeVar("Order")
Outcome = TypeVar("Outcome")


# -- in the worker process ----------------------------------------------------------------------

# The configs the worker loaded last, by revision, and the digest of the text each came from.
_held: dict[str, tuple[EdgeConfig, bytes]] = {}
# The plan it made last.
_plan_held: HeldPlan | None = None


def _digest(text: str | bytes) -> bytes:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).digest()


def plan_in_worker(request: PlanRequest) -> tuple[bytes, list[bytes] | None]:
    """The plan's result pickled (``dumps``) and, for an apply that can go ahead, its patch in
    pieces (``dumps_in_pieces``): the Edge unpickles them in a thread beside its event loop."""
    global _held, _plan_held
    _plan_held = None
    with _building_what_lives_on():
        running = _hold_running(request.running_revision, request.running_text)
        digest = _digest(request.candidate_text)
        loaded = [config for config, held in _held.values() if held == digest]
        plan = _plan_here(
            running, request, (lambda _text: loaded[0]) if loaded else load_config_text
        )
        patch = None
        if request.mode == "apply" and plan.applicable and plan.candidate is not None:
            patch = patch_against(plan.candidate, running)
        held = {running.revision: _held[running.revision]}
        if plan.candidate is not None:
            held[plan.candidate.revision] = (plan.candidate, digest)
        _held = held
        text = request.candidate_text
        if isinstance(text, bytes):
            text = text.decode(errors="replace")  # a text that is not UTF-8 is recorded as ""
        _plan_held = HeldPlan(plan.result, text, running, plan.candidate)
        return dumps(plan.result), None if patch is None else dumps_in_pieces(patch)


def _decode_json(body: bytes, encoding: str, parse_constant: Callable[[str], Any] | None) -> Any:
    # As DRF's JSONParser reads it: the body decoded by its charset, then parsed.
    return json.loads(codecs.decode(body, encoding), parse_constant=parse_constant)


def _with_held_plan(
    act: Callable[[HeldPlan, Order], Outcome], refresh_id: str, order: Order
) -> Outcome:
    if _plan_held is None or _plan_held.result.refresh_id != refresh_id:
        raise PlanNotHeld(refresh_id)
    return act(_plan_held, order)


def _plan_here(
    running: EdgeConfig,
    request: PlanRequest,
    load: Callable[[str | bytes], EdgeConfig] = load_config_text,
) -> Plan:
    return plan_refresh(
        running,
        request.candidate_text,
        mode=request.mode,
        base_revision=request.base_revision,
        candidate_revision=request.candidate_revision,
        load=load,
    )


def _hold_running(revision: str, text: str | None) -> EdgeConfig:
    if revision in _held:
        return _held[revision][0]
    if text is None:
        raise RunningUnknown(revision)
    try:
        running = load_config_text(text)
    except ConfigError as exc:
        raise RunningUnknown(f"the running config's text does not load: {exc}") from None
    if running.revision != revision:
        raise RunningUnknown(f"the text sent is {running.revision}")
    _held[running.revision] = (running, _digest(text))
    return running


def _warm(revision: str, text: str) -> None:
    with _building_what_lives_on():
        _hold_running(revision, text)


@contextlib.contextmanager
def _building_what_lives_on() -> Iterator[None]:
    """Loading a config makes hundreds of thousands of objects that live on in the worker until
    a later plan drops them: built with the collector paused, then frozen. Unfrozen, they were
    rescanned by the collections the refresh's writes trigger next (350 ms of a fleet-wide
    apply's writes at 3,000 nodes). Planning makes no reference cycles, so what a later plan
    drops is still freed, by reference counting; what garbage there is beforehand is collected
    first (only what is not frozen is scanned), none of it frozen."""
    gc.collect()
    with collection_paused():
        yield
        freeze_without_collecting()


# -- in the Edge ---------------------------------------------------------------------------------


class PlanWorker:
    """One worker process, started on first use and started again if it dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._holds: frozenset[str] = frozenset()  # the revisions the worker holds
        self._plan_held = ""  # the refresh id of the plan it holds
        self._warming: tuple[str, concurrent.futures.Future[None]] | None = None  # ``warm``
        self._in_flight = 0  # calls submitted and not yet answered

    def holds(self, revision: str) -> bool:
        """Whether a plan against ``revision`` can go without its text."""
        if revision in self._holds:
            return True
        if self._warming is None:
            return False
        warmed, warming = self._warming
        return warmed == revision and _succeeded(warming)

    def warm(self, running: EdgeConfig, running_text: str) -> concurrent.futures.Future[None]:
        """Start the worker and have it load the running config now, while the Edge has time:
        at thousands of nodes the first refresh otherwise waits seconds for both (the
        interpreter's start, the parse). Returns at once; once it is done the worker ``holds``
        ``running``. A text that does not load as ``running`` is logged, and the first plan
        sends the text again."""
        warming = self._submit(_warm, running.revision, running_text)
        warming.add_done_callback(_log_failed_warm_up)
        self._warming = (running.revision, warming)
        return warming

    def holds_plan(self, refresh_id: str) -> bool:
        """Whether the worker made the plan of ``refresh_id`` and holds it still."""
        return bool(refresh_id) and refresh_id == self._plan_held

    def with_plan(
        self, act: Callable[[HeldPlan, Order], Outcome], refresh_id: str, order: Order
    ) -> Outcome:
        """``act(plan, order)`` in the worker, on the plan of ``refresh_id`` it holds; blocks, so
        call it from a thread. ``act`` and ``order`` cross to the worker by pickle: a function
        of a module, and plain values. Raises ``PlanNotHeld`` when the worker does not hold that
        plan and ``WorkerDied`` when it died meanwhile."""
        return self.outcome(self.submit_with_plan(act, refresh_id, order), refresh_id)

    def submit_with_plan(
        self, act: Callable[[HeldPlan, Order], Outcome], refresh_id: str, order: Order
    ) -> concurrent.futures.Future[Outcome]:
        """``with_plan`` without waiting for it: its outcome is ``outcome(future, refresh_id)``."""
        try:
            return self._submit(_with_held_plan, act, refresh_id, order)
        except BrokenProcessPool:
            self._died(refresh_id)
            raise WorkerDied(refresh_id) from None

    def outcome(self, future: concurrent.futures.Future[Outcome], refresh_id: str) -> Outcome:
        """What ``submit_with_plan`` came to; blocks, so call it from a thread."""
        try:
            return future.result()
        except BrokenProcessPool:
            self._died(refresh_id)
            raise WorkerDied(refresh_id) from None

    def _died(self, refresh_id: str) -> None:
        log.warning("the refresh plan worker died while it held %s", refresh_id)
        self.close()

    def plan(
        self,
        running: EdgeConfig,
        running_text: str | None,
        candidate_text: str | bytes,
        *,
        mode: Mode,
        base_revision: str | None = None,
        candidate_revision: str | None = None,
    ) -> Plan:
        """``plan_refresh`` of the candidate against ``running``, made in the worker: ``ask``,
        then read the answer."""
        read = self.ask(
            running,
            running_text,
            candidate_text,
            mode=mode,
            base_revision=base_revision,
            candidate_revision=candidate_revision,
        )
        return read()

    def ask(
        self,
        running: EdgeConfig,
        running_text: str | None,
        candidate_text: str | bytes,
        *,
        mode: Mode,
        base_revision: str | None = None,
        candidate_revision: str | None = None,
        on_result: Callable[[RefreshResult], None] | None = None,
    ) -> Callable[[], Plan]:
        """Have the worker plan the candidate against ``running``; blocks until it answers, so
        call it from a thread. Returns how to read the plan: reading builds the candidate (a
        fleet's nodes), so the caller pauses the collector for it, and only for it.

        ``on_result`` is called with the result of an apply the worker found applicable, as soon
        as it is read and before the candidate is built: what it asks of the worker meanwhile
        (``submit_with_plan``) runs there while this process builds the candidate.

        The plan carries its candidate only for an apply that can go ahead. ``running_text``
        (the YAML ``running`` was loaded from) is needed when the worker does not hold the
        running config (``holds``); without it, or when the worker died, reading the answer
        makes the plan in this process."""
        request = PlanRequest(
            running.revision, running_text, candidate_text, mode, base_revision, candidate_revision
        )
        self._plan_held = ""
        try:
            answer = self._submit(plan_in_worker, request).result()
        except RunningUnknown:
            log.info("the plan worker lacks the running config; planning in this process")
            return functools.partial(_plan_here, running, request)
        except BrokenProcessPool:
            # Killed from outside (or out of memory): this plan is made here, the next one gets
            # a new worker.
            log.warning("the refresh plan worker died; planning in this process this time")
            self.close()
            return functools.partial(_plan_here, running, request)
        return functools.partial(self._read, running, *answer, on_result)

    def _read(
        self,
        running: EdgeConfig,
        result_pickled: bytes,
        patch_pieces: list[bytes] | None,
        on_result: Callable[[RefreshResult], None] | None,
    ) -> Plan:
        result = pickle.loads(result_pickled)
        self._warming = None
        self._holds = frozenset(
            revision for revision in (running.revision, result.candidate_revision) if revision
        )
        self._plan_held = result.refresh_id
        if patch_pieces is None:
            return Plan(result, None)
        if on_result is not None:
            on_result(result)
        return Plan(result, apply_patch(loads_in_pieces(patch_pieces), running))

    def decode_json(
        self, body: bytes, encoding: str, parse_constant: Callable[[str], Any] | None
    ) -> Any:
        """``body`` decoded by ``encoding`` and parsed as JSON (``parse_constant``: ``json``'s,
        a function of a module, pickled across), in the worker: a fleet's candidate is megabytes
        of JSON string, and decoding it here holds the interpreter, and with it the event loop,
        for tens of milliseconds in one call. Raises what the parse raises there
        (``ValueError``, ``RecursionError``); ``WorkerBusy`` when the worker is doing something
        else (a plan, a refresh's writes) or is gone, so the caller parses here rather than
        wait behind it."""
        if self._in_flight:
            raise WorkerBusy("the plan worker is busy")
        try:
            return self._submit(_decode_json, body, encoding, parse_constant).result()
        except BrokenProcessPool:
            self.close()
            raise WorkerBusy("the plan worker died") from None

    def _submit(
        self, call: Callable[..., Outcome], *args: Any
    ) -> concurrent.futures.Future[Outcome]:
        future = self._executor().submit(call, *args)
        with self._lock:
            self._in_flight += 1
        future.add_done_callback(self._answered)
        return future

    def _answered(self, _future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._in_flight -= 1

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # Spawned, not forked: the Edge has threads and sockets a fork would copy.
                context = multiprocessing.get_context("spawn")
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=context, initializer=start_worker
                )
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._holds = frozenset()
            self._plan_held = ""
            self._warming = None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _succeeded(future: concurrent.futures.Future[None]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _log_failed_warm_up(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and (problem := future.exception()) is not None:
        log.warning("the refresh plan worker did not warm up: %s", problem)


# The Edge's one plan worker (``run_edge``: an Edge that owns its process plans there).
PLAN_WORKER = PlanWorker()
