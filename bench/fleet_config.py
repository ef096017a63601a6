"""Generated fleet configs: N nodes x 10 providers, the shape the fleet benchmark measures.

Each node has one `openai_http` adapter and ten providers; the providers serve 100 models
round-robin, so every model has N/10 routes. Node ``i``'s token is ``fleet-token-<i>``, so a
simulated Node can sign in without a token file.
"""

from __future__ import annotations

import hashlib

PROVIDERS_PER_NODE = 10
MODELS = 100


def node_id(index: int) -> str:
    return f"node-{index:05d}"


def node_token(index: int) -> str:
    return f"fleet-token-{index}"


def fleet_yaml(
    nodes: int,
    *,
    capacity: int = 4,
    edge_listen: str = "127.0.0.1:8000",
    admin_listen: str = "127.0.0.1:8001",
) -> str:
    """The config text of a fleet of ``nodes`` nodes; ``capacity`` sets every provider's."""
    lines = [
        "version: 1",
        "edge:",
        "  id: edge-fleet",
        f"  listen: {edge_listen}",
        f"  admin_listen: {admin_listen}",
        "openai:",
        "  require_auth: false",
        "nodes:",
    ]
    routes: dict[int, list[str]] = {m: [] for m in range(MODELS)}
    for i in range(nodes):
        digest = hashlib.sha256(node_token(i).encode()).hexdigest()
        lines += [
            f"  - id: {node_id(i)}",
            f'    token_hash_sha256: "{digest}"',
            "    adapters:",
            "      - id: vllm",
            "        type: openai_http",
            f"        base_url: http://10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}:8000/v1",
            "        timeout_s: 300",
            "    providers:",
        ]
        for j in range(PROVIDERS_PER_NODE):
            provider = f"{node_id(i)}-p{j}"
            model = (i * PROVIDERS_PER_NODE + j) % MODELS
            routes[model].append(provider)
            lines += [
                f"      - id: {provider}",
                "        adapter: vllm",
                f"        served_models: [model-{model:03d}]",
                f"        capacity: {capacity}",
                "        priority: 10",
            ]
    lines.append("models:")
    for model, providers in routes.items():
        lines.append(f"  - id: model-{model:03d}")
        lines.append("    providers:")
        lines += [f"      {p}: model-{model:03d}" for p in providers]
    return "\n".join(lines) + "\n"


def one_change(text: str) -> str:
    """``text`` with the first provider's capacity raised by one: a live change to one Node."""
    first = text.index("capacity: ")
    end = text.index("\n", first)
    capacity = int(text[first + len("capacity: ") : end])
    return f"{text[:first]}capacity: {capacity + 1}{text[end:]}"
