"""The asyncio event loop the Edge serves on: uvloop, under Twisted's asyncio reactor.

Daphne creates the loop its reactor runs on when `daphne.server` is imported, which Django's app
loading does (daphne is an installed app). So the choice is made here, in `manage.py`, before
Django is set up, and only for the command that serves (`run_edge`): every other command and the
tests keep the standard loop. ``IOP_EVENT_LOOP=asyncio`` serves on the standard loop instead
(docs/operations.md); it is read here rather than in the settings because the settings load too
late to change it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

UVLOOP = "uvloop"
ASYNCIO = "asyncio"
LOOPS = (UVLOOP, ASYNCIO)
SERVING_COMMANDS = frozenset({"run_edge"})


class EventLoopChoiceError(SystemExit):
    """``IOP_EVENT_LOOP`` names no loop this Edge runs on."""


def serves(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is the command that serves (`manage.py run_edge ...`)."""
    return len(argv) >= 2 and argv[1] in SERVING_COMMANDS


def install(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """For a serving command, make the loops created from now on the chosen kind; the kind
    chosen, or None for any other command (which keeps the standard loop)."""
    if not serves(argv):
        return None
    choice = environ.get("IOP_EVENT_LOOP", UVLOOP).strip().lower() or UVLOOP
    if choice not in LOOPS:
        raise EventLoopChoiceError(
            f"IOP_EVENT_LOOP must be one of {', '.join(LOOPS)}, got {environ['IOP_EVENT_LOOP']!r}"
        )
    if choice == UVLOOP:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return choice
