"""The Node payload: what ``config`` and ``config.refresh`` frames carry in ``node`` (DESIGN §5).

One contract for both sides: the adapter types and their aliases, the keys each adapter type
carries, the defaults, the payload shapes, the specs, and the Node's parser. The Edge holds its
config's adapters as ``AdapterSpec`` and sends ``edge.config.canonical.node_canonical(node)``
(which also feeds the config revision); its loader checks the YAML more strictly (bounds, hints,
credential rules). The Node parses the payload with ``parse_node_config`` into a ``NodeSpec``,
checking what it needs to run adapters and rejecting a payload it cannot apply with every problem
named by path (``node.adapters[vllm].base_url: ...``). Keys the Node does not use (capacity,
priority, queue settings: those are the Edge's business) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NotRequired, TypedDict, cast, get_args
from urllib.parse import urlsplit, urlunsplit

AdapterType = Literal["echo", "openai_http"]
ADAPTER_TYPES: tuple[AdapterType, ...] = get_args(AdapterType)
# Other names operators use for an OpenAI-compatible server; both sides normalize them.
ADAPTER_TYPE_ALIASES: Mapping[str, AdapterType] = MappingProxyType(
    {
        "openai": "openai_http",
        "openai_compatible": "openai_http",
        "vllm": "openai_http",
        "ollama": "openai_http",
    }
)

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_HEALTH_INTERVAL_S = 10.0
DEFAULT_TOKEN_DELAY_MS = 0.0
# The probe path, under ``base_url``; ``False`` = no probe (the provider counts as healthy).
DEFAULT_HEALTH_PATH = "/models"
# What the caller's output-token limit is sent upstream as; None = as the caller sent it.
MAX_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")
DEFAULT_MAX_TOKENS_PARAM = None


class EchoAdapterPayload(TypedDict):
    id: str
    type: Literal["echo"]
    token_delay_ms: float


class OpenAIHTTPAdapterPayload(TypedDict):
    id: str
    type: Literal["openai_http"]
    base_url: str
    api_key_env: str | None
    timeout_s: float
    health_interval_s: float
    # Optional keys: left out at their default, so configs that do not use them keep their
    # canonical form (and revision).
    health_path: NotRequired[str | Literal[False]]
    max_tokens_param: NotRequired[str | None]


AdapterPayload = EchoAdapterPayload | OpenAIHTTPAdapterPayload

# The keys each adapter type carries (the others do not apply to it), read off the shapes above
# so that the two cannot drift apart.
ADAPTER_KEYS: Mapping[AdapterType, tuple[str, ...]] = MappingProxyType(
    {
        "echo": tuple(EchoAdapterPayload.__annotations__),
        "openai_http": tuple(OpenAIHTTPAdapterPayload.__annotations__),
    }
)


class ProviderPayload(TypedDict):
    id: str
    adapter: str
    served_models: list[str]
    enabled: bool
    capacity: int
    long_context_slots: int | None
    priority: int
    max_queue: int
    queue_timeout_s: float


class NodePayload(TypedDict):
    id: str
    alias: str | None
    token_hash_sha256: str
    concurrency: int | None
    adapters: list[AdapterPayload]
    providers: list[ProviderPayload]


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """An adapter on a Node: what the Edge config holds and what the Node builds from.

    Only the fields in ``ADAPTER_KEYS[type]`` mean anything for a given type.
    """

    id: str
    type: AdapterType
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    health_interval_s: float = DEFAULT_HEALTH_INTERVAL_S
    token_delay_ms: float = DEFAULT_TOKEN_DELAY_MS
    health_path: str | Literal[False] = DEFAULT_HEALTH_PATH
    max_tokens_param: str | None = DEFAULT_MAX_TOKENS_PARAM


@dataclass(frozen=True, slots=True)
class NodeProviderSpec:
    """A provider as the Node serves it: its adapter and the models it answers for."""

    id: str
    adapter: str
    served_models: frozenset[str]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: str
    adapters: tuple[AdapterSpec, ...]
    providers: tuple[NodeProviderSpec, ...]


def normalize_adapter_type(name: object) -> AdapterType | None:
    """The adapter type ``name`` spells, an alias resolved; None when it names none."""
    if not isinstance(name, str):
        return None
    if name in ADAPTER_TYPES:
        return cast("AdapterType", name)
    return ADAPTER_TYPE_ALIASES.get(name)


_OPTIONAL_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {"health_path": DEFAULT_HEALTH_PATH, "max_tokens_param": DEFAULT_MAX_TOKENS_PARAM}
)


def adapter_payload(spec: AdapterSpec) -> AdapterPayload:
    """The payload entry for ``spec``: the keys of its type, optional ones only when not default."""
    payload = {
        key: getattr(spec, key)
        for key in ADAPTER_KEYS[spec.type]
        if key not in _OPTIONAL_DEFAULTS or getattr(spec, key) != _OPTIONAL_DEFAULTS[key]
    }
    return cast("AdapterPayload", payload)


def health_path_problem(value: object) -> str | None:
    """Why ``value`` is no ``health_path`` (a path under ``base_url``, or false); None if it is."""
    if value is False:
        return None
    if isinstance(value, str) and _HEALTH_PATH.fullmatch(value):
        return None
    # The value is not echoed: a query string may hold a key.
    return "must be a path under base_url such as /health (no query), or false for no probe"


def url_for_message(value: str) -> str:
    """``value`` as a message may name it: no userinfo, query or fragment, which may hold a key.

    Only a URL with a scheme and a host is named at all; anything else may be the key itself.
    """
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "an unreadable URL"
    if not parts.scheme or not host:
        return "a value that is no URL"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def max_tokens_param_problem(value: object) -> str | None:
    """Why ``value`` is no ``max_tokens_param``; None if it is one."""
    if value is None or value in MAX_TOKENS_PARAMS:
        return None
    return (
        f"must be one of {', '.join(MAX_TOKENS_PARAMS)}, or null to send it as sent (got {value!r})"
    )


class NodeConfigError(Exception):
    """A payload the Node cannot apply; the message lists each problem with its path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEALTH_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")  # URL path characters


def parse_node_config(data: object, *, node_id: str) -> NodeSpec:
    """The ``node`` of a config frame as this Node runs it, or ``NodeConfigError``."""
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


def _parse_adapter(item: object, path: str, problems: list[str]) -> AdapterSpec | None:
    if not isinstance(item, dict):
        problems.append(f"{path}: must be an object")
        return None
    before = len(problems)
    adapter_id = _text(item, "id", path, problems)
    adapter_type = normalize_adapter_type(item.get("type"))
    if adapter_type is None:
        problems.append(
            f"{path}.type: {item.get('type')!r} is not one of {', '.join(ADAPTER_TYPES)}"
        )
    if adapter_type == "echo":
        delay = _number(
            item, "token_delay_ms", path, problems, default=DEFAULT_TOKEN_DELAY_MS, minimum=0.0
        )
        if len(problems) > before:
            return None
        return AdapterSpec(id=adapter_id, type="echo", token_delay_ms=delay)
    base_url = _http_url(item, path, problems)
    api_key_env = item.get("api_key_env")
    if api_key_env is not None and not (
        isinstance(api_key_env, str) and _ENV_NAME.fullmatch(api_key_env)
    ):
        problems.append(f"{path}.api_key_env: must be an environment variable name or null")
    timeout_s = _number(item, "timeout_s", path, problems, default=DEFAULT_TIMEOUT_S, above=0.0)
    interval = _number(
        item, "health_interval_s", path, problems, default=DEFAULT_HEALTH_INTERVAL_S, above=0.0
    )
    health_path = item.get("health_path", DEFAULT_HEALTH_PATH)
    if problem := health_path_problem(health_path):
        problems.append(f"{path}.health_path: {problem}")
    max_tokens_param = item.get("max_tokens_param", DEFAULT_MAX_TOKENS_PARAM)
    if problem := max_tokens_param_problem(max_tokens_param):
        problems.append(f"{path}.max_tokens_param: {problem}")
    if len(problems) > before or base_url is None:
        return None
    return AdapterSpec(
        id=adapter_id,
        type="openai_http",
        base_url=base_url,
        api_key_env=api_key_env,
        timeout_s=timeout_s,
        health_interval_s=interval,
        health_path=health_path,
        max_tokens_param=max_tokens_param,
    )


def _parse_provider(
    item: object, path: str, adapter_ids: set[str], problems: list[str]
) -> NodeProviderSpec | None:
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
        served = None
    if len(problems) > before or served is None:
        return None
    return NodeProviderSpec(id=provider_id, adapter=adapter, served_models=frozenset(served))


def _http_url(item: dict[str, Any], path: str, problems: list[str]) -> str | None:
    """``base_url`` without its trailing slashes, or None with the problem recorded."""
    value = item.get("base_url")
    if not isinstance(value, str) or not _is_http_url(value):
        # The value is not echoed: it may be a key pasted into the wrong field.
        problems.append(f"{path}.base_url: must be an http:// or https:// URL")
        return None
    return value.rstrip("/")


def _is_http_url(value: str) -> bool:
    if any(ch.isspace() for ch in value):
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


def _label(item: object, index: int) -> str:
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
