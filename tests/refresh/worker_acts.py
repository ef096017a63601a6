"""What tests have the plan worker do on the plan it holds, in place of its writes."""

from __future__ import annotations

# First, as for the real writes: in the worker, this sets Django up before an order's models
# are unpickled.
import refresh.worker_writes  # noqa: F401
from refresh.persist import ApplyOrder
from refresh.plan_worker import HeldPlan


def what_is_written(held: HeldPlan, order: ApplyOrder) -> tuple[str, str, str, str]:
    """In place of ``worker_writes.write_apply_held``: what it would write."""
    return held.result.refresh_id, held.result.status, order.record.status, held.candidate_text
