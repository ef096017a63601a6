"""At most so many log lines per interval; the rest are counted and summed up in one line.

A peer that misbehaves on purpose (a Node sending thousands of bad frames a second) must not make
the Edge's log its megaphone: each session's warnings go through one ``LogLimit``. Plain Python,
with the clock injected, so it is tested without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class LogLimit:
    """Up to ``lines`` lines per ``interval_s`` window for one ``subject`` (e.g. ``node n1``).

    Lines past that are dropped and counted; the count is logged as one summary line when the
    next line comes after the window, or at ``flush`` (the session's end).
    """

    def __init__(
        self,
        subject: str,
        *,
        lines: int = 20,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._subject = subject
        self._lines = lines
        self._interval_s = interval_s
        self._clock = clock
        self._window_start: float | None = None
        self._logged = 0
        self.suppressed = 0  # lines dropped in the current window, not yet summed up

    def log(self, logger: logging.Logger, level: int, message: str, *args: object) -> None:
        """``logger.log(level, message, *args)``, unless this window's lines are used up."""
        now = self._clock()
        if self._window_start is None or now - self._window_start >= self._interval_s:
            self._summarize(logger, now)
            self._window_start = now
            self._logged = 0
        if self._logged < self._lines:
            self._logged += 1
            logger.log(level, message, *args)
        else:
            self.suppressed += 1

    def warning(self, logger: logging.Logger, message: str, *args: object) -> None:
        self.log(logger, logging.WARNING, message, *args)

    def flush(self, logger: logging.Logger) -> None:
        """Log the summary of the lines dropped so far, if any."""
        self._summarize(logger, self._clock())

    def _summarize(self, logger: logging.Logger, now: float) -> None:
        if not self.suppressed or self._window_start is None:
            return
        logger.warning(
            "%s: %d more warnings suppressed in the last %.0f s",
            self._subject,
            self.suppressed,
            now - self._window_start,
        )
        self.suppressed = 0
