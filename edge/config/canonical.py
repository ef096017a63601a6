"""Canonical form and revision of a config.

The canonical form is plain JSON data: every default spelled out, inherited values resolved,
lists keyed by identity sorted by that identity. Two configs that mean the same thing have the
same canonical form, so its sha256 (the ``revision``) ignores order, comments and defaults.
A node's entry is exactly the payload its Node receives (``nodes.wire.node_config``). Sections
added later (``failover``, ``passive_health``) appear only when they differ from their defaults,
so a config that does not use them keeps its revision.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from edge.config.policy_load import policies_canonical
from edge.config.resilience import (
    DEFAULT_FAILOVER,
    DEFAULT_PASSIVE_HEALTH,
    resilience_canonical,
)
from edge.config.schema import (
    ALL_ENDPOINTS,
    OPENAI_SERVERS,
    ControlPlane,
    EdgeSection,
    Failover,
    Model,
    Node,
    OpenAISection,
    PassiveHealth,
    Provider,
    QueueDefaults,
)
from edge.json_pieces import json_pieces
from nodes.wire.node_config import NodePayload, ProviderPayload, adapter_payload


def provider_canonical(provider: Provider) -> ProviderPayload:
    return {
        "id": provider.id,
        "adapter": provider.adapter,
        "served_models": list(provider.served_models),
        "enabled": provider.enabled,
        "capacity": provider.capacity,
        "long_context_slots": provider.long_context_slots,
        "priority": provider.priority,
        "max_queue": provider.max_queue,
        "queue_timeout_s": provider.queue_timeout_s,
    }


def node_canonical(node: Node) -> NodePayload:
    """The node-specific config a Node receives on connect and on refresh (its wire payload)."""
    return {
        "id": node.id,
        "alias": node.alias,
        "token_hash_sha256": node.token_hash_sha256,
        "concurrency": node.concurrency,
        "adapters": [adapter_payload(a) for a in sorted(node.adapters, key=_by_id)],
        "providers": [provider_canonical(p) for p in sorted(node.providers, key=_by_id)],
    }


def model_canonical(model: Model) -> dict[str, Any]:
    canonical: dict[str, Any] = {
        "id": model.id,
        "providers": dict(sorted(model.providers.items())),
        "generation": {
            "default_max_tokens": model.generation.default_max_tokens,
            "max_tokens_limit": model.generation.max_tokens_limit,
        },
    }
    # Added later: left out at its default (every endpoint), so older configs keep their revision.
    if model.endpoints != ALL_ENDPOINTS:
        canonical["endpoints"] = sorted(model.endpoints)
    return canonical


def _openai_extras(openai: OpenAISection) -> dict[str, Any]:
    """Keys added later, left out at their defaults so older configs keep their revision."""
    extras: dict[str, Any] = {}
    if openai.cors_allowed_origins:
        extras["cors"] = {"allowed_origins": list(openai.cors_allowed_origins)}
    if openai.policies:
        extras["policies"] = policies_canonical(openai.policies)
    if openai.server != OPENAI_SERVERS[0]:
        extras["server"] = openai.server
    return extras


def build_canonical(
    version: int,
    edge: EdgeSection,
    control_plane: ControlPlane,
    openai: OpenAISection,
    queue: QueueDefaults,
    nodes: tuple[Node, ...],
    models: tuple[Model, ...],
    *,
    failover: Failover = DEFAULT_FAILOVER,
    passive_health: PassiveHealth = DEFAULT_PASSIVE_HEALTH,
) -> dict[str, Any]:
    tokens = sorted(openai.principal_tokens, key=lambda t: t.token_ref)
    return {
        "version": version,
        "edge": {
            "id": edge.id,
            "listen": edge.listen,
            "admin_listen": edge.admin_listen,
            "bootstrap_path": edge.bootstrap_path,
            # Added later: left out when off, so older configs keep their revision.
            **({"ha": True} if edge.ha else {}),
        },
        "control_plane": {"url": control_plane.url},
        "openai": {
            "listen": openai.listen,
            "long_context_threshold_tokens": openai.long_context_threshold_tokens,
            "require_auth": openai.require_auth,
            "principal_tokens": [
                {
                    "token_ref": t.token_ref,
                    "token_hash_sha256": t.token_hash_sha256,
                    "principal_ref": t.principal_ref,
                    "alias": t.alias,
                }
                for t in tokens
            ],
            **_openai_extras(openai),
        },
        "queue": {"max_queue": queue.max_queue, "queue_timeout_s": queue.queue_timeout_s},
        "nodes": [node_canonical(n) for n in sorted(nodes, key=_by_id)],
        "models": [model_canonical(m) for m in sorted(models, key=_by_id)],
        **resilience_canonical(failover, passive_health),
    }


# One encoder for every call: `json.dumps` with options builds a new one each time, which costs
# as much as encoding a small value.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(data: Any) -> str:
    return _CANONICAL_ENCODER.encode(data)


# How deep `revision_of` takes the canonical form apart: down to each node, model and token.
_PIECES_DEPTH = 3


def canonical_json_pieces(data: Any) -> Iterator[str]:
    """``canonical_json(data)`` in pieces, one per node, model or token field
    (``edge.json_pieces``): over a fleet's config one call would keep every other thread (the
    event loop's too) waiting for tens of milliseconds."""
    return json_pieces(data, _CANONICAL_ENCODER, _PIECES_DEPTH)


def revision_of(canonical: Any) -> str:
    digest = hashlib.sha256()
    for piece in canonical_json_pieces(canonical):
        digest.update(piece.encode())
    return f"sha256:{digest.hexdigest()}"


def _by_id(item: Any) -> str:
    return item.id
