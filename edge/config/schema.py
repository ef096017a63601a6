"""The validated, immutable Edge config (DESIGN §3).

Objects here are only ever built by ``edge.config.load``; every value is already checked,
defaulted and normalized. Inherited defaults are resolved: a provider always carries its
effective ``max_queue`` and ``queue_timeout_s``. A node's adapters are the wire contract's
``AdapterSpec`` (``nodes.wire.node_config``), the same objects the Node parses its payload into.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from edge.config.policies import Policy, PolicyEntry, Resolved, resolve
from nodes.wire.frames import ENDPOINTS
from nodes.wire.node_config import AdapterSpec


@dataclass(frozen=True, slots=True)
class EdgeSection:
    id: str
    listen: str
    admin_listen: str
    bootstrap_path: str
    # High availability (`edge.ha`): Edges of this id share a PostgreSQL leader lock.
    ha: bool = False


@dataclass(frozen=True, slots=True)
class ControlPlane:
    url: str | None


@dataclass(frozen=True, slots=True)
class PrincipalToken:
    token_ref: str
    token_hash_sha256: str
    principal_ref: str
    alias: str | None


@dataclass(frozen=True, slots=True)
class OpenAISection:
    listen: str | None
    long_context_threshold_tokens: int
    require_auth: bool
    principal_tokens: tuple[PrincipalToken, ...]
    # Browser origins answered with CORS headers (`openai.cors.allowed_origins`); "*" = any.
    cors_allowed_origins: tuple[str, ...] = ()
    # Per-principal limits, budgets and fair share (`openai.policies`), sorted by principal_ref.
    policies: tuple[PolicyEntry, ...] = ()
    # The HTTP server of `openai.listen` (`openai.server`): daphne, or uvicorn in the same process.
    server: str = "daphne"


OPENAI_SERVERS = ("daphne", "uvicorn")  # the first is the default


@dataclass(frozen=True, slots=True)
class QueueDefaults:
    max_queue: int
    queue_timeout_s: float


@dataclass(frozen=True, slots=True)
class Failover:
    """How often a run that failed before answering goes to another provider of its model."""

    max_attempts: int = 3  # attempts in all, the first included; 1 = never fail over


@dataclass(frozen=True, slots=True)
class PassiveHealth:
    """``failures`` failed runs within ``window_s`` take a provider out for ``cooldown_s``."""

    failures: int = 3  # 0 = runs never take a provider out (rejected credentials still do)
    window_s: float = 30.0
    cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    adapter: str
    served_models: tuple[str, ...]
    enabled: bool
    capacity: int
    long_context_slots: int | None
    priority: int
    max_queue: int
    queue_timeout_s: float


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    alias: str | None
    token_hash_sha256: str
    concurrency: int | None
    adapters: tuple[AdapterSpec, ...]
    providers: tuple[Provider, ...]


@dataclass(frozen=True, slots=True)
class Generation:
    default_max_tokens: int | None
    max_tokens_limit: int | None


# The OpenAI endpoints a model may serve (`models[].endpoints`), spelled as the wire names them.
ALL_ENDPOINTS: frozenset[str] = frozenset(ENDPOINTS)


@dataclass(frozen=True, slots=True)
class Model:
    """An OpenAI ``model`` key; ``providers`` maps provider id -> served model name."""

    id: str
    providers: Mapping[str, str]
    generation: Generation
    endpoints: frozenset[str] = ALL_ENDPOINTS


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    version: int
    edge: EdgeSection
    control_plane: ControlPlane
    openai: OpenAISection
    queue: QueueDefaults
    nodes: tuple[Node, ...]
    models: tuple[Model, ...]
    canonical: Mapping[str, Any] = field(compare=False, repr=False)
    revision: str = field(compare=False)
    failover: Failover = field(default_factory=Failover)
    passive_health: PassiveHealth = field(default_factory=PassiveHealth)
    _nodes_by_id: Mapping[str, Node] = field(init=False, repr=False, compare=False)
    _policies: Mapping[str, PolicyEntry] = field(init=False, repr=False, compare=False)

    def node(self, node_id: str) -> Node | None:
        return self._nodes_by_id.get(node_id)

    def policy_for(self, principal_ref: str, token_ref: str, model: str) -> Policy | None:
        """The policy of a request; None: the principal has none (unlimited, weight 1,
        interactive). A model override beats a token override beats the principal's entry."""
        if principal_ref not in self._policies:
            return None
        return self.resolve_policy(principal_ref, token_ref, model).policy

    def resolve_policy(self, principal_ref: str, token_ref: str, model: str) -> Resolved:
        """``policy_for`` with the scope each limit is counted in (the limiter's view)."""
        return resolve(self._policies, principal_ref, token_ref, model)

    def __post_init__(self) -> None:
        # A Node's sign-in, hello and health reports each look their node up: O(1) at any size.
        object.__setattr__(self, "_nodes_by_id", {n.id: n for n in self.nodes})
        object.__setattr__(self, "_policies", {p.principal_ref: p for p in self.openai.policies})

    def summary(self) -> str:
        providers = sum(len(n.providers) for n in self.nodes)
        return (
            f"{len(self.nodes)} nodes, {providers} providers, {len(self.models)} models, "
            f"{len(self.openai.principal_tokens)} principal tokens"
        )


def frozen_mapping(items: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(sorted(items.items())))
