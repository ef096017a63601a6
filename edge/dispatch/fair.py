"""Weighted fair queuing across principals: who among the waiters goes first.

Start-time fair queuing over one virtual clock per model. A waiter's *tag* is
``max(virtual now - CREDIT_TOKENS / weight, its principal's last finish)``; its principal's
finish moves on by ``charge / weight`` (charge: the request's estimated tokens). Waiters go in
tag order, so each principal's tags only grow (FIFO within a principal) and a principal that
has been served less than its share gets the smaller tags. The virtual clock is the largest tag
granted so far. A principal that used less than its share banks at most ``CREDIT_TOKENS`` of it
(a burst of a few requests goes ahead of a backlogged principal's queue, which keeps a light
principal's wait short); beyond that, idle time earns nothing.

Priority classes sit on top: an interactive waiter goes before a batch one, unless the batch
waiter has *aged* (waited ``BATCH_AGING_SHARE`` of its queue timeout); then the two compete on
their tags as equals, so batch work gets its fair share before it could time out.

Plain Python; only the pool's wait path uses it (admission without waiting never does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

PriorityClass = Literal["interactive", "batch"]
INTERACTIVE: PriorityClass = "interactive"
BATCH: PriorityClass = "batch"
PRIORITY_CLASSES: tuple[PriorityClass, ...] = (INTERACTIVE, BATCH)

# A batch waiter ages after this share of its queue timeout: it then competes with interactive
# waiters on its tag, early enough to be admitted before it times out.
BATCH_AGING_SHARE = 0.5

# The credit a principal below its share may bank, in tokens (divided by its weight in tags).
CREDIT_TOKENS = 8192

# The per-principal finish tags are pruned (the ones the clock has passed: at most their credit
# is at stake, which a pruned principal then gets in full) when there are more than this many,
# and than twice the count after the last prune.
PRUNE_AFTER = 1024


@dataclass(frozen=True, slots=True)
class Share:
    """Whose request it is, for fair queuing: the principal's key, weight and class, and the
    request's ``charge`` in tokens (0: charge its estimated input tokens)."""

    principal: str = ""
    weight: float = 1.0
    priority_class: PriorityClass = INTERACTIVE
    charge: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, int | float) and math.isfinite(self.weight)):
            raise ValueError(f"weight: must be a finite number, got {self.weight!r}")
        if self.weight <= 0:
            raise ValueError(f"weight: must be greater than 0, got {self.weight!r}")
        if self.priority_class not in PRIORITY_CLASSES:
            raise ValueError(
                f"priority_class: must be one of {', '.join(PRIORITY_CLASSES)}, "
                f"got {self.priority_class!r}"
            )
        if not isinstance(self.charge, int) or self.charge < 0:
            raise ValueError(f"charge: must be an integer of 0 or more, got {self.charge!r}")


UNSHARED = Share()  # a request without a policy: weight 1, interactive


class VirtualClock:
    """A model's virtual time and each principal's last finish tag."""

    __slots__ = ("_finish", "_prune_at", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._finish: dict[str, float] = {}
        self._prune_at = PRUNE_AFTER

    def tag(self, principal: str, weight: float, charge: int) -> tuple[float, float]:
        """A new waiter's (start, finish) tags; its principal's finish moves on to ``finish``."""
        finish = self._finish.get(principal, 0.0)
        floor = self.now - CREDIT_TOKENS / weight
        start = finish if finish > floor else floor
        finish = start + max(charge, 1) / weight
        self._finish[principal] = finish
        if len(self._finish) > self._prune_at:
            self._prune()
        return start, finish

    def granted(self, start: float) -> None:
        """A waiter with this start tag got a slot: virtual time reaches it."""
        if start > self.now:
            self.now = start

    def withdrawn(self, principal: str, start: float, finish: float) -> None:
        """A waiter left without a slot (timeout, cancel, error): if it was its principal's
        latest, the principal is not charged for it."""
        if self._finish.get(principal) == finish:
            self._finish[principal] = start

    def _prune(self) -> None:
        now = self.now
        self._finish = {p: f for p, f in self._finish.items() if f > now}
        self._prune_at = max(PRUNE_AFTER, 2 * len(self._finish))
