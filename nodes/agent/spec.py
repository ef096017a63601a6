"""The node-specific config a Node receives, parsed and checked on the Node.

The payload is ``edge.config.canonical.node_canonical(node)`` as JSON. The Node does not import the
Edge's loader: it checks what it needs to run adapters and rejects a payload it cannot apply with
every problem named by path (``node.adapters[vllm].base_url: ...``). Keys it does not use (capacity,
priority, queue settings: those are the Edge's business) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ADAPTER_TYPES = ("echo", "openai_http")
# Same normalization as the Edge loader, so a hand-written payload behaves the same way.
ADAPTER_TYPE_ALIASES = {
    "openai": "openai_http",
    "openai_compatible": "openai_http",
    "vllm": "openai_http",
    "ollama": "openai_http",
}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    id: str
    type: str
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 60.0
    health_interval_s: float = 10.0
    token_delay_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    id: str
    adapter: str
    served_models: frozenset[str]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: str
    adapters: tuple[AdapterSpec, ...]
    providers: tuple[ProviderSpec, ...]


class NodeConfigError(Exception):
    """A payload the Node cannot apply; the message lists each problem with its path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def parse_node_config(data: Any, *, node_id: str) -> NodeSpec:
    problems: list[str] = []
    if not isinstance(data, dict):
        raise NodeConfigError(["node: must be an object"])
    if data.get("id") != node_id:
        problems.append(f"node.id: is {data.get('id')!r}, but this agent is node {node_id!r}")
    raw_adapters = _list(data, "adapters", "node.adapters", problems)
    adapters = [
        _parse_adapter(item, f"node.adapters[{_label(item, index)}]", problems)
        for index, item in enumerate(raw_adapters)
    ]
    # Declared ids, not parsed ones: a broken adapter should not also break its providers.
    adapter_ids = _unique_ids(raw_adapters, "node.adapters", problems)
    raw_providers = _list(data, "providers", "node.providers", problems)
    providers = [
        _parse_provider(item, f"node.providers[{_label(item, index)}]", adapter_ids, problems)
        for index, item in enumerate(raw_providers)
    ]
    _unique_ids(raw_providers, "node.providers", problems)
    if problems:
        raise NodeConfigError(problems)
    return NodeSpec(
        id=node_id,
        adapters=tuple(a for a in adapters if a),
        providers=tuple(p for p in providers if p),
    )


def _parse_adapter(item: Any, path: str, problems: list[str]) -> AdapterSpec | None:
    if not isinstance(item, dict):
        problems.append(f"{path}: must be an object")
        return None
    before = len(problems)
    adapter_id = _text(item, "id", path, problems)
    adapter_type = item.get("type")
    adapter_type = ADAPTER_TYPE_ALIASES.get(adapter_type, adapter_type)
    if adapter_type not in ADAPTER_TYPES:
        problems.append(
            f"{path}.type: {item.get('type')!r} is not one of {', '.join(ADAPTER_TYPES)}"
        )
    if adapter_type == "echo":
        delay = _number(item, "token_delay_ms", path, problems, default=0.0, minimum=0.0)
        if len(problems) > before:
            return None
        return AdapterSpec(id=adapter_id, type="echo", token_delay_ms=delay)
    base_url = item.get("base_url")
    if not _is_http_url(base_url):
        problems.append(f"{path}.base_url: must be an http:// or https:// URL, got {base_url!r}")
    api_key_env = item.get("api_key_env")
    if api_key_env is not None and not (
        isinstance(api_key_env, str) and _ENV_NAME.fullmatch(api_key_env)
    ):
        problems.append(f"{path}.api_key_env: must be an environment variable name or null")
    timeout_s = _number(item, "timeout_s", path, problems, default=60.0, above=0.0)
    interval = _number(item, "health_interval_s", path, problems, default=10.0, above=0.0)
    if len(problems) > before:
        return None
    return AdapterSpec(
        id=adapter_id,
        type="openai_http",
        base_url=base_url.rstrip("/"),
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        health_interval_s=interval,
    )


def _parse_provider(
    item: Any, path: str, adapter_ids: set[str], problems: list[str]
) -> ProviderSpec | None:
    if not isinstance(item, dict):
        problems.append(f"{path}: must be an object")
        return None
    before = len(problems)
    provider_id = _text(item, "id", path, problems)
    adapter = _text(item, "adapter", path, problems)
    if adapter and adapter not in adapter_ids:
        problems.append(f"{path}.adapter: {adapter!r} is not an adapter of this node")
    served = item.get("served_models")
    if not (isinstance(served, list) and served and all(isinstance(m, str) and m for m in served)):
        problems.append(f"{path}.served_models: must be a non-empty list of model names")
    if len(problems) > before:
        return None
    return ProviderSpec(id=provider_id, adapter=adapter, served_models=frozenset(served))


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str) or any(ch.isspace() for ch in value):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _list(data: dict[str, Any], key: str, path: str, problems: list[str]) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        problems.append(f"{path}: must be a list")
        return []
    return value


def _label(item: Any, index: int) -> str:
    """Identity paths name an entry by its id, falling back to its position."""
    if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
        return item["id"]
    return str(index)


def _text(item: dict[str, Any], key: str, path: str, problems: list[str]) -> str:
    value = item.get(key)
    if not (isinstance(value, str) and value):
        problems.append(f"{path}.{key}: must be a non-empty string")
        return ""
    return value


def _number(
    item: dict[str, Any],
    key: str,
    path: str,
    problems: list[str],
    *,
    default: float,
    minimum: float | None = None,
    above: float | None = None,
) -> float:
    value = item.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{path}.{key}: must be a number")
        return default
    if minimum is not None and value < minimum:
        problems.append(f"{path}.{key}: must be >= {minimum:g}")
    if above is not None and value <= above:
        problems.append(f"{path}.{key}: must be > {above:g}")
    return float(value)


def _unique_ids(items: list[Any], path: str, problems: list[str]) -> set[str]:
    seen: set[str] = set()
    for item in items:
        item_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(item_id, str) or not item_id:
            continue
        if item_id in seen:
            problems.append(f"{path}[{item_id}]: duplicate id")
        seen.add(item_id)
    return seen
