"""Run in the plan worker by tests. This module imports nothing of the project, so unpickling
it in a fresh worker imports nothing either."""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path


def niceness_and_planning_imported() -> tuple[int, bool]:
    """Run first in a fresh worker: what it had done before its first task arrived."""
    return os.nice(0), "refresh.plan_worker" in sys.modules


def wait_for(path: str) -> None:
    """Keeps the worker busy until ``path`` exists."""
    while not Path(path).exists():
        time.sleep(0.01)


def frozen_and_cyclic_garbage() -> tuple[int, int]:
    """How many objects the worker has frozen, and how many of all its objects, frozen or not,
    a collection finds to be garbage."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    garbage = gc.collect()
    gc.freeze()
    return frozen, garbage
