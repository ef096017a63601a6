"""Run first in a fresh plan worker: what it had done before its first task arrived. This module
imports nothing of the project, so unpickling it in the worker imports nothing either."""

from __future__ import annotations

import os
import sys


def niceness_and_planning_imported() -> tuple[int, bool]:
    return os.nice(0), "refresh.plan_worker" in sys.modules
