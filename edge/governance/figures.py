"""Per-principal figures for ``GET /status``, ``/metrics`` and the dashboard (plain Python).

One row per principal that has a policy or has been seen since the Edge started: requests in
flight (admitted, not yet ended), queued in the pool, admitted and limited (refused with 429)
since start, and what is left of the principal's own day and month budgets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edge.config import EdgeConfig
from edge.governance.limits import Limiter

PRINCIPAL_COLUMNS = (
    "principal",
    "in_flight",
    "queued",
    "admitted",
    "limited",
    "tokens_per_day_remaining",
    "tokens_per_month_remaining",
)


@dataclass(frozen=True, slots=True)
class PrincipalFigures:
    principal: str
    in_flight: int
    queued: int
    admitted: int
    limited: int
    tokens_per_day_remaining: int | None  # None: the principal's entry sets no such budget
    tokens_per_month_remaining: int | None

    def row(self) -> list[object]:
        return [getattr(self, column) for column in PRINCIPAL_COLUMNS]


def principal_figures(
    limiter: Limiter, config: EdgeConfig, queued: Mapping[str, int]
) -> tuple[PrincipalFigures, ...]:
    """Call on the event loop that owns the limiter and the pool."""
    names = {entry.principal_ref for entry in config.openai.policies}
    names |= limiter.counts.keys() | queued.keys()
    rows = []
    for name in sorted(names):
        counts = limiter.counts.get(name)
        # The principal's own entry: no token or model override applies to "" and "".
        left = limiter.remaining_budget(config.resolve_policy(name, "", ""))
        rows.append(
            PrincipalFigures(
                name,
                counts.in_flight if counts else 0,
                queued.get(name, 0),
                counts.admitted if counts else 0,
                counts.limited if counts else 0,
                left.get("tokens_per_day"),
                left.get("tokens_per_month"),
            )
        )
    return tuple(rows)
