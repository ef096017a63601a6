"""Read-only figures from the pool for dashboards and metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderStats:
    provider_id: str
    node_id: str
    in_flight: int
    long_in_flight: int
    capacity: int
    long_context_slots: int | None
    healthy: bool
    enabled: bool
    node_ready: bool
    # False for a provider dropped from the snapshot that still has runs to drain.
    listed: bool


@dataclass(frozen=True, slots=True)
class ModelStats:
    model_id: str
    queue_depth: int
    long_queue_depth: int
    # Age of the oldest waiter in seconds; 0.0 when nobody waits (a gauge, never missing).
    oldest_wait_s: float


@dataclass(frozen=True, slots=True)
class PoolStats:
    providers: dict[str, ProviderStats]
    models: dict[str, ModelStats]
