"""The refresh plan worker's first step, in a module that imports nothing heavy.

A spawned worker imports this module before any other of the project's (it is the pool's
initializer, unpickled with the process), so it lowers its priority before the imports and the
config it loads next: an Edge warming its worker as it starts (``PlanWorker.warm``) meets a storm
of Node sign-ins, which goes first.
"""

from __future__ import annotations

import os

# Planning is background work: on a box whose cores are all busy, the event loop (requests,
# Node sessions) goes first and the plan takes longer.
WORKER_NICENESS = 10


def start_worker() -> None:
    os.nice(WORKER_NICENESS)
    # Imported here, at the lower priority.
    from edge.json_pieces import encode_whole_in_this_process

    # Nothing in the worker shares the interpreter with an event loop: JSON in pieces (the
    # record's result, the revision's hash) would only take it longer.
    encode_whole_in_this_process()
