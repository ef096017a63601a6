"""Parsing candidate configs in a worker process, for an Edge that is serving.

libyaml composes a document in C with the interpreter held for stretches of tens of milliseconds.
In a thread of the Edge those stretches, over a fleet's config of megabytes, held up the event
loop, and with it every request and Node session, for hundreds of milliseconds per refresh. In
a process of its own the parse holds only that process; the plain data comes back pickled, which
the Edge reads back in one short call (about 15 ms for 1,000 nodes). Everything else about
loading (validation, the canonical form) stays in the Edge, in the planning thread.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from edge.config.yaml_source import parse_yaml

log = logging.getLogger(__name__)


class ParseWorker:
    """One worker process, started on first use and started again if it dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def parse(self, text: str | bytes) -> Any:
        """``parse_yaml(text)``, run in the worker; blocks, so call it from a thread. Raises
        ConfigError as ``parse_yaml`` does."""
        try:
            return self._executor().submit(parse_yaml, text).result()
        except BrokenProcessPool:
            # Killed from outside (or out of memory): this parse is lost, the next one gets a
            # new worker.
            log.warning("the config parse worker died; parsing in this process this time")
            self.close()
            return parse_yaml(text)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # Spawned, not forked: the Edge has threads and sockets a fork would copy.
                context = multiprocessing.get_context("spawn")
                self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
