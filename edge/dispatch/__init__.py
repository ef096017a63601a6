"""The provider pool: in-memory dispatch of requests to providers (DESIGN §4). No Django here."""

from __future__ import annotations

from edge.dispatch.affinity import ResponseRoutes
from edge.dispatch.errors import (
    ContextTooLong,
    DispatchError,
    EdgeShuttingDown,
    ModelNotFound,
    NoProviderAvailable,
    QueueFull,
    QueueTimeout,
)
from edge.dispatch.estimate import estimate_input_tokens
from edge.dispatch.fair import BATCH, INTERACTIVE, UNSHARED, PriorityClass, Share
from edge.dispatch.lease import LONG, NORMAL, ContextClass, Lease
from edge.dispatch.passive import CLOSED, HALF_OPEN, OPEN, PassiveHealthPolicy
from edge.dispatch.pool import ProviderPool
from edge.dispatch.snapshot import ModelSpec, PoolSnapshot, ProviderSpec, snapshot_from_config
from edge.dispatch.stats import ModelStats, PoolStats, ProviderStats

__all__ = [
    "BATCH",
    "CLOSED",
    "HALF_OPEN",
    "INTERACTIVE",
    "LONG",
    "NORMAL",
    "OPEN",
    "UNSHARED",
    "ContextClass",
    "ContextTooLong",
    "DispatchError",
    "EdgeShuttingDown",
    "Lease",
    "ModelNotFound",
    "ModelSpec",
    "ModelStats",
    "NoProviderAvailable",
    "PassiveHealthPolicy",
    "PoolSnapshot",
    "PoolStats",
    "PriorityClass",
    "ProviderPool",
    "ProviderSpec",
    "ProviderStats",
    "QueueFull",
    "QueueTimeout",
    "ResponseRoutes",
    "Share",
    "estimate_input_tokens",
    "snapshot_from_config",
]
