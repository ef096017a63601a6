"""An apply's writes, started in the plan worker while the Edge builds the candidate.

Once the worker has answered an apply it found applicable, two things are left before the swap:
the Edge builds the candidate from the worker's patch and prepares what the swap puts in place
(about a second of a thread at 3,000 nodes reconfigured), and the worker writes the mirror, the
refresh record and the config file (about as long again). Neither needs the other, so the writes
are ordered as soon as the result is read (``PlanWorker.ask``'s ``on_result``) and the two run
side by side, in two processes.

What that changes: the writes may commit before the candidate is built. Building it from a plan
the worker validated is not expected to fail; should it, the record, the mirror and the file hold
the candidate while the Edge serves the config before it, which is logged as an error (the Edge's
next start reads the file; the next apply syncs the mirror in full). A plan that outlives its
timeout is given up only while no write has been ordered; after that the refresh waits for the
build, which is bounded once the worker has answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from refresh.persist import ApplyOrder
from refresh.plan import RefreshResult
from refresh.plan_worker import PLAN_WORKER, HeldPlan, WorkerDied

Planned = TypeVar("Planned")

log = logging.getLogger(__name__)


class WriteAhead:
    """One apply's writes (``act`` in the worker, ``refresh.worker_writes``), ordered from the
    planning thread: call it with the result."""

    def __init__(
        self,
        act: Callable[[HeldPlan, ApplyOrder], None],
        order: Callable[[RefreshResult], ApplyOrder],
    ) -> None:
        self._act = act
        self._order = order  # the apply's order, for its result marked applied
        self._lock = threading.Lock()
        self._given_up = False
        self.refresh_id = ""
        self.written: concurrent.futures.Future[None] | None = None

    def __call__(self, result: RefreshResult) -> None:
        if result.status != "ok":
            return  # no_change: nothing to write
        with self._lock:
            if self._given_up:
                return
            # Recorded as applied; the result itself stays as planned until the apply says so.
            order = self._order(dataclasses.replace(result, status="applied"))
            try:
                self.written = PLAN_WORKER.submit_with_plan(self._act, result.refresh_id, order)
            except WorkerDied:
                return  # written by the Edge after the build, as without a worker
            self.refresh_id = result.refresh_id

    async def within(self, planning: asyncio.Future[Planned], timeout_s: float) -> Planned:
        """The plan within ``timeout_s`` (else ``TimeoutError``, and no write is ordered after
        it), or all of it once its writes are ordered."""
        try:
            return await asyncio.wait_for(asyncio.shield(planning), timeout_s)
        except TimeoutError:
            with self._lock:
                self._given_up = self.written is None
            if self._given_up:
                raise
        return await planning

    async def after_failed_build(self, serving: str) -> None:
        """The candidate could not be built after its writes were ordered: wait for them, and
        say what they left behind if they committed."""
        if self.written is None:
            return
        try:
            await asyncio.to_thread(PLAN_WORKER.outcome, self.written, self.refresh_id)
        except Exception:  # not written (or not known to be): the record says no more
            return
        log.error(
            "refresh %s: its mirror, record and config file are written, but the Edge could not "
            "build the candidate and still serves %s; restart the Edge or apply again",
            self.refresh_id,
            serving,
        )
