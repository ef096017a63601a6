"""Read-only figures from the pool for dashboards and metrics."""

from __future__ import annotations

from dataclasses import dataclass

from edge.dispatch.passive import BreakerState


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made reading
# 10,000 providers (the dashboard, /status, /metrics, all on the event loop) twice as slow.
@dataclass(slots=True)
class ProviderStats:
    provider_id: str
    node_id: str
    in_flight: int
    long_in_flight: int
    capacity: int
    long_context_slots: int | None
    # Its Node reports it healthy and passive health has not taken it out.
    healthy: bool
    # The detail of the Node's last health report (e.g. a failing probe's reason); "" before one.
    health_detail: str
    # Passive health: closed (normal), open (out until its cooldown ends), half_open (one trial).
    passive_state: BreakerState
    passive_reason: str  # the failure that opened it, e.g. "upstream_auth_failed"
    recent_failures: int  # within passive_health.window_s
    reopens_in_s: float  # open: seconds until half-open; else 0.0
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
