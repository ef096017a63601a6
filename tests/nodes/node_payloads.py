"""Node payloads for tests, built by the Edge's own canonical form."""

from __future__ import annotations

from edge.config.canonical import node_canonical
from edge.config.schema import Node, Provider
from nodes import wire


def make_node(
    *,
    node_id: str = "node-a",
    token_delay_ms: float = 0.0,
    providers: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("p-echo", "echo", ("echo-small",)),
    ),
    extra_adapters: tuple[wire.AdapterSpec, ...] = (),
) -> wire.NodePayload:
    """The payload the Edge sends, built by the Edge's own canonical form."""
    adapters = (
        wire.AdapterSpec(id="echo", type="echo", token_delay_ms=token_delay_ms),
        *extra_adapters,
    )
    node = Node(
        id=node_id,
        alias=None,
        token_hash_sha256="0" * 64,
        concurrency=None,
        adapters=adapters,
        providers=tuple(
            Provider(
                id=pid,
                adapter=adapter,
                served_models=served,
                enabled=True,
                capacity=4,
                long_context_slots=None,
                priority=100,
                max_queue=8,
                queue_timeout_s=30.0,
            )
            for pid, adapter, served in providers
        ),
    )
    return node_canonical(node)
