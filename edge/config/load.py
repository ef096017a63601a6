"""Load an Edge config: parse -> defaults -> normalize -> validate -> EdgeConfig (DESIGN §3).

Every problem is collected with its identity path and reported together; nothing partial is
returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edge.config import formats
from edge.config.canonical import build_canonical, revision_of
from edge.config.cross_checks import (
    as_list,
    check_duplicates,
    check_listener_ports,
    check_references,
    check_unique_ids,
    declared_ids,
)
from edge.config.errors import ConfigError
from edge.config.fields import Fields, item_path, join, show_number, type_name
from edge.config.policy_load import check_policy_models, load_policies
from edge.config.resilience import load_failover, load_passive_health
from edge.config.schema import (
    ALL_ENDPOINTS,
    OPENAI_SERVERS,
    ControlPlane,
    EdgeConfig,
    EdgeSection,
    Generation,
    Model,
    Node,
    OpenAISection,
    PrincipalToken,
    Provider,
    QueueDefaults,
    frozen_mapping,
)
from edge.config.yaml_source import MAX_CONFIG_BYTES, parse_yaml
from edge.memory import collection_paused
from nodes.wire.frames import ENDPOINTS
from nodes.wire.node_config import (
    ADAPTER_KEYS,
    ADAPTER_TYPE_ALIASES,
    ADAPTER_TYPES,
    DEFAULT_HEALTH_INTERVAL_S,
    DEFAULT_HEALTH_PATH,
    DEFAULT_MAX_TOKENS_PARAM,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOKEN_DELAY_MS,
    AdapterSpec,
    health_path_problem,
    max_tokens_param_problem,
    normalize_adapter_type,
)

TOP_KEYS = (
    "version",
    "edge",
    "control_plane",
    "openai",
    "queue",
    "failover",
    "passive_health",
    "nodes",
    "models",
)
EDGE_KEYS = ("id", "listen", "admin_listen", "bootstrap_path", "ha")
OPENAI_KEYS = (
    "listen",
    "long_context_threshold_tokens",
    "require_auth",
    "principal_tokens",
    "cors",
    "policies",
    "server",
)
CORS_KEYS = ("allowed_origins",)
TOKEN_KEYS = ("token_ref", "token_hash_sha256", "principal_ref", "alias")
NODE_KEYS = ("id", "alias", "token_hash_sha256", "concurrency", "adapters", "providers")
PROVIDER_KEYS = (
    "id",
    "adapter",
    "served_models",
    "enabled",
    "capacity",
    "long_context_slots",
    "priority",
    "max_queue",
    "queue_timeout_s",
)
MODEL_KEYS = ("id", "providers", "generation", "endpoints")
GENERATION_KEYS = ("default_max_tokens", "max_tokens_limit")

DEFAULT_LISTEN = "127.0.0.1:8000"
DEFAULT_ADMIN_LISTEN = "127.0.0.1:8001"
DEFAULT_BOOTSTRAP_PATH = "var/bootstrap"
DEFAULT_THRESHOLD = 100_000
DEFAULT_MAX_QUEUE = 64
DEFAULT_QUEUE_TIMEOUT_S = 30.0
DEFAULT_PRIORITY = 100
MAX_TIMEOUT_S = 3600


def load_config_file(path: str | Path) -> EdgeConfig:
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError.single("", f"config is {size} bytes; the limit is {MAX_CONFIG_BYTES}")
        text = file.read_bytes()
    except OSError as exc:
        raise ConfigError.single("", f"cannot read {file}: {exc.strerror}") from None
    return load_config_text(text)


def load_config_text(
    text: str | bytes, parse: Callable[[str | bytes], Any] = parse_yaml
) -> EdgeConfig:
    """Parse (with ``parse``: in this thread, or in a worker process) and validate."""
    with collection_paused():
        return build_config(parse(text))


def build_config(data: Any) -> EdgeConfig:
    """Validate parsed YAML data into an EdgeConfig, or raise ConfigError with every issue."""
    fields = Fields()
    root = fields.mapping(data, "", TOP_KEYS, required=("version", "edge", "nodes"))
    if root is None:
        raise ConfigError(fields.issues)
    version = fields.integer(root, "version", "")
    if version is not None and version != 1:
        fields.error("version", f"must be 1 (got {show_number(version)})")
    edge = _edge(fields, root["edge"]) if "edge" in root else None
    control_plane = _control_plane(fields, optional_section(root, "control_plane"))
    openai = _openai(fields, optional_section(root, "openai"))
    queue = _queue(fields, optional_section(root, "queue"))
    failover = load_failover(fields, optional_section(root, "failover"))
    passive_health = load_passive_health(fields, optional_section(root, "passive_health"))
    nodes = tuple(
        node
        for index, raw in enumerate(fields.sequence(root, "nodes", ""))
        if (node := _node(fields, raw, item_path("nodes", raw, index), queue)) is not None
    )
    models = tuple(
        model
        for index, raw in enumerate(fields.sequence(root, "models", ""))
        if (model := _model(fields, raw, item_path("models", raw, index))) is not None
    )
    check_unique_ids(fields, nodes, models, openai)
    check_listener_ports(fields, edge, openai)
    declared_providers = {
        ident
        for raw_node in as_list(root.get("nodes"))
        if isinstance(raw_node, dict)
        for ident in declared_ids(raw_node.get("providers"))
    }
    check_references(fields, nodes, models, declared_providers)
    if openai is not None:
        check_policy_models(fields, openai.policies, declared_ids(root.get("models")))
    if (
        fields.issues
        or edge is None
        or openai is None
        or queue is None
        or failover is None
        or passive_health is None
    ):
        raise ConfigError(fields.issues)
    canonical = build_canonical(
        version,
        edge,
        control_plane,
        openai,
        queue,
        nodes,
        models,
        failover=failover,
        passive_health=passive_health,
    )
    return EdgeConfig(
        version=version,
        edge=edge,
        control_plane=control_plane,
        openai=openai,
        queue=queue,
        nodes=nodes,
        models=models,
        canonical=canonical,
        revision=revision_of(canonical),
        failover=failover,
        passive_health=passive_health,
    )


def optional_section(data: dict, key: str) -> Any:
    """An optional mapping: absent or null means all defaults; `[]`, `0` or `""` stay wrong."""
    value = data.get(key)
    return {} if value is None else value


def _edge(fields: Fields, raw: Any) -> EdgeSection | None:
    data = fields.mapping(raw, "edge", EDGE_KEYS, required=("id",))
    if data is None:
        return None
    edge_id = fields.string(data, "id", "edge", pattern=formats.ID, expected=formats.ID_EXPECTED)
    listen = _listen(fields, data, "listen", "edge", DEFAULT_LISTEN)
    admin_listen = _listen(fields, data, "admin_listen", "edge", DEFAULT_ADMIN_LISTEN)
    if admin_listen is not None and not formats.is_loopback(admin_listen):
        fields.error(
            "edge.admin_listen",
            f"must be a loopback address such as 127.0.0.1 or [::1] (got {admin_listen!r})",
        )
        admin_listen = None
    bootstrap = fields.string(data, "bootstrap_path", "edge", default=DEFAULT_BOOTSTRAP_PATH)
    if bootstrap == "":
        fields.error("edge.bootstrap_path", "must not be empty")
    ha = fields.boolean(data, "ha", "edge", default=False)
    if edge_id is None or listen is None or admin_listen is None or bootstrap is None or ha is None:
        return None
    return EdgeSection(edge_id, listen, admin_listen, bootstrap, ha)


def _listen(fields: Fields, data: dict, key: str, path: str, default: str | None) -> str | None:
    value = fields.string(data, key, path, default=default)
    if value is None:
        return None
    problem = formats.listen_problem(value)
    if problem:
        fields.error(join(path, key), problem)
        return None
    return value


def _control_plane(fields: Fields, raw: Any) -> ControlPlane:
    data = fields.mapping(raw, "control_plane", ("url",))
    url = fields.string(data, "url", "control_plane", default=None) if data else None
    if url is not None and (problem := formats.url_problem(url)):
        fields.error("control_plane.url", problem)
    return ControlPlane(url=formats.normalize_url(url) if url else None)


def _openai(fields: Fields, raw: Any) -> OpenAISection | None:
    data = fields.mapping(raw, "openai", OPENAI_KEYS)
    if data is None:
        return None
    listen = _listen(fields, data, "listen", "openai", None)
    threshold = fields.integer(
        data, "long_context_threshold_tokens", "openai", default=DEFAULT_THRESHOLD, minimum=1
    )
    require_auth = fields.boolean(data, "require_auth", "openai", default=True)
    tokens = []
    for index, raw_token in enumerate(fields.sequence(data, "principal_tokens", "openai")):
        path = item_path("openai.principal_tokens", raw_token, index, key="token_ref")
        token = _principal_token(fields, raw_token, path)
        if token is not None:
            tokens.append(token)
    origins = _cors_origins(fields, optional_section(data, "cors"))
    policies = load_policies(fields, data, {t.token_ref: t.principal_ref for t in tokens})
    server = _openai_server(fields, data)
    if threshold is None or require_auth is None or origins is None or server is None:
        return None
    return OpenAISection(listen, threshold, require_auth, tuple(tokens), origins, policies, server)


def _openai_server(fields: Fields, data: Mapping[str, Any]) -> str | None:
    server = fields.string(data, "server", "openai", default=OPENAI_SERVERS[0])
    if server is None:
        return None
    if server not in OPENAI_SERVERS:
        choices = ", ".join(OPENAI_SERVERS)
        fields.error("openai.server", f"must be one of {choices} (got {server!r})")
        return None
    if server != OPENAI_SERVERS[0] and data.get("listen") is None:
        # The other listeners (the admin, the Node websockets) stay daphne's.
        fields.error("openai.server", f"{server} serves openai.listen only: set openai.listen")
        return None
    return server


def _cors_origins(fields: Fields, raw: Any) -> tuple[str, ...] | None:
    data = fields.mapping(raw, "openai.cors", CORS_KEYS)
    if data is None:
        return None
    origins = []
    for index, origin in enumerate(fields.sequence(data, "allowed_origins", "openai.cors")):
        path = f"openai.cors.allowed_origins[{index}]"
        if not isinstance(origin, str):
            fields.error(path, f"must be a string (got {type_name(origin)})")
        elif problem := formats.origin_problem(origin):
            fields.error(path, problem)
        else:
            origins.append(origin.lower())
    check_duplicates(fields, "openai.cors.allowed_origins", origins, "origin")
    return tuple(sorted(set(origins)))


def _principal_token(fields: Fields, raw: Any, path: str) -> PrincipalToken | None:
    data = fields.mapping(raw, path, TOKEN_KEYS, required=TOKEN_KEYS[:3])
    if data is None:
        return None
    token_ref = fields.string(
        data, "token_ref", path, pattern=formats.ID, expected=formats.ID_EXPECTED
    )
    digest = _sha256(fields, data, path)
    principal = fields.string(
        data, "principal_ref", path, pattern=formats.REF, expected=formats.REF_EXPECTED
    )
    alias = fields.string(
        data, "alias", path, default=None, pattern=formats.LABEL, expected=formats.LABEL_EXPECTED
    )
    if token_ref is None or digest is None or principal is None:
        return None
    return PrincipalToken(token_ref, digest, principal, alias)


def _sha256(fields: Fields, data: dict, path: str) -> str | None:
    return fields.string(
        data,
        "token_hash_sha256",
        path,
        pattern=formats.SHA256_HEX,
        expected=formats.SHA256_EXPECTED,
    )


def _queue(fields: Fields, raw: Any) -> QueueDefaults | None:
    data = fields.mapping(raw, "queue", ("max_queue", "queue_timeout_s"))
    if data is None:
        return None
    max_queue = fields.integer(data, "max_queue", "queue", default=DEFAULT_MAX_QUEUE, minimum=0)
    timeout = _timeout(fields, data, "queue_timeout_s", "queue", DEFAULT_QUEUE_TIMEOUT_S)
    if max_queue is None or timeout is None:
        return None
    return QueueDefaults(max_queue, timeout)


def _timeout(fields: Fields, data: dict, key: str, path: str, default: float) -> float | None:
    return fields.number(data, key, path, default=default, above=0, maximum=MAX_TIMEOUT_S)


def _node(fields: Fields, raw: Any, path: str, queue: QueueDefaults | None) -> Node | None:
    data = fields.mapping(raw, path, NODE_KEYS, required=("id", "token_hash_sha256"))
    if data is None:
        return None
    node_id = fields.string(data, "id", path, pattern=formats.ID, expected=formats.ID_EXPECTED)
    alias = fields.string(
        data, "alias", path, default=None, pattern=formats.ID, expected=formats.ID_EXPECTED
    )
    digest = _sha256(fields, data, path)
    concurrency = fields.integer(data, "concurrency", path, default=None, minimum=1)
    adapters = [
        adapter
        for index, raw_adapter in enumerate(fields.sequence(data, "adapters", path))
        if (
            adapter := _adapter(
                fields, raw_adapter, item_path(f"{path}.adapters", raw_adapter, index)
            )
        )
    ]
    providers = [
        provider
        for index, raw_provider in enumerate(fields.sequence(data, "providers", path))
        if (
            provider := _provider(
                fields, raw_provider, item_path(f"{path}.providers", raw_provider, index), queue
            )
        )
    ]
    check_duplicates(fields, f"{path}.adapters", [a.id for a in adapters], "adapter id")
    adapter_ids = {a.id for a in adapters}
    # An adapter that is declared but invalid has its own error already.
    declared_adapters = declared_ids(data.get("adapters"))
    for provider in providers:
        if provider.adapter not in declared_adapters:
            fields.error(
                f"{path}.providers[{provider.id}].adapter",
                f"names adapter '{provider.adapter}', which this node does not define"
                + (f" (defined: {', '.join(sorted(adapter_ids))})" if adapter_ids else ""),
            )
    if node_id is None or digest is None:
        return None
    return Node(node_id, alias, digest, concurrency, tuple(adapters), tuple(providers))


def _adapter(fields: Fields, raw: Any, path: str) -> AdapterSpec | None:
    raw_type = raw.get("type") if isinstance(raw, dict) else None
    adapter_type = normalize_adapter_type(raw_type)
    known = ADAPTER_KEYS[adapter_type] if adapter_type else ("id", "type")
    other = {
        key: f"does not apply to adapter type '{adapter_type}'"
        for keys in ADAPTER_KEYS.values()
        for key in keys
        if adapter_type and key not in known
    }
    data = fields.mapping(raw, path, known, required=("id", "type"), other_known=other)
    if data is None:
        return None
    adapter_id = fields.string(data, "id", path, pattern=formats.ID, expected=formats.ID_EXPECTED)
    if "type" in data and adapter_type is None:
        choices = ", ".join(sorted((*ADAPTER_TYPES, *ADAPTER_TYPE_ALIASES)))
        fields.error(join(path, "type"), f"must be one of {choices} (got {raw_type!r})")
        return None
    if adapter_id is None or adapter_type is None:
        return None
    if adapter_type == "echo":
        delay = fields.number(
            data, "token_delay_ms", path, default=DEFAULT_TOKEN_DELAY_MS, minimum=0, maximum=10_000
        )
        return None if delay is None else AdapterSpec(adapter_id, "echo", token_delay_ms=delay)
    base_url = fields.string(data, "base_url", path)
    if "base_url" not in data:
        fields.error(join(path, "base_url"), "is required for an openai_http adapter")
    elif base_url is not None and (problem := formats.url_problem(base_url)):
        fields.error(join(path, "base_url"), problem)
        base_url = None
    key_env = fields.string(
        data,
        "api_key_env",
        path,
        default=None,
        pattern=formats.ENV_NAME,
        expected=formats.ENV_NAME_EXPECTED,
    )
    timeout = _timeout(fields, data, "timeout_s", path, DEFAULT_TIMEOUT_S)
    interval = _timeout(fields, data, "health_interval_s", path, DEFAULT_HEALTH_INTERVAL_S)
    health_path = data.get("health_path", DEFAULT_HEALTH_PATH)
    max_tokens_param = data.get("max_tokens_param", DEFAULT_MAX_TOKENS_PARAM)
    problems = {
        "health_path": health_path_problem(health_path),
        "max_tokens_param": max_tokens_param_problem(max_tokens_param),
    }
    for key, problem in problems.items():
        if problem:
            fields.error(join(path, key), problem)
    if base_url is None or timeout is None or interval is None or any(problems.values()):
        return None
    return AdapterSpec(
        adapter_id,
        "openai_http",
        base_url=formats.normalize_url(base_url),
        api_key_env=key_env,
        timeout_s=timeout,
        health_interval_s=interval,
        health_path=health_path,
        max_tokens_param=max_tokens_param,
    )


def _provider(fields: Fields, raw: Any, path: str, queue: QueueDefaults | None) -> Provider | None:
    data = fields.mapping(
        raw, path, PROVIDER_KEYS, required=("id", "adapter", "served_models", "capacity")
    )
    if data is None:
        return None
    provider_id = fields.string(data, "id", path, pattern=formats.ID, expected=formats.ID_EXPECTED)
    adapter = fields.string(data, "adapter", path, pattern=formats.ID, expected=formats.ID_EXPECTED)
    served = _served_models(fields, data, path)
    enabled = fields.boolean(data, "enabled", path, default=True)
    capacity = fields.integer(data, "capacity", path, minimum=1)
    slots = fields.integer(data, "long_context_slots", path, default=None, minimum=0)
    if slots is not None and capacity is not None and slots > capacity:
        fields.error(
            join(path, "long_context_slots"),
            f"must be <= capacity {show_number(capacity)} (got {show_number(slots)}); "
            "a long request also holds a normal slot",
        )
    priority = fields.integer(data, "priority", path, default=DEFAULT_PRIORITY, minimum=0)
    default_queue = queue.max_queue if queue else DEFAULT_MAX_QUEUE
    max_queue = fields.integer(data, "max_queue", path, default=default_queue, minimum=0)
    default_timeout = queue.queue_timeout_s if queue else DEFAULT_QUEUE_TIMEOUT_S
    timeout = _timeout(fields, data, "queue_timeout_s", path, default_timeout)
    if (
        provider_id is None
        or adapter is None
        or served is None
        or enabled is None
        or capacity is None
        or priority is None
        or max_queue is None
        or timeout is None
        or (slots is not None and slots > capacity)
    ):
        return None
    return Provider(
        provider_id, adapter, served, enabled, capacity, slots, priority, max_queue, timeout
    )


def _served_models(fields: Fields, data: dict, path: str) -> tuple[str, ...] | None:
    if "served_models" not in data:
        return None
    key_path = join(path, "served_models")
    raw = data["served_models"]
    if not isinstance(raw, list) or not raw:
        fields.error(key_path, "must be a non-empty list of model names")
        return None
    names = []
    for index, name in enumerate(raw):
        if not isinstance(name, str) or not formats.SERVED_NAME.fullmatch(name):
            fields.error(f"{key_path}[{index}]", f"must be {formats.SERVED_NAME_EXPECTED}")
            return None
        names.append(name)
    check_duplicates(fields, key_path, names, "served model")
    return tuple(sorted(set(names)))


def _model(fields: Fields, raw: Any, path: str) -> Model | None:
    data = fields.mapping(raw, path, MODEL_KEYS, required=("id", "providers"))
    if data is None:
        return None
    model_id = fields.string(
        data, "id", path, pattern=formats.MODEL_ID, expected=formats.MODEL_ID_EXPECTED
    )
    routes = (
        _routes(fields, data.get("providers"), join(path, "providers"))
        if "providers" in data
        else None
    )
    generation = _generation(fields, optional_section(data, "generation"), join(path, "generation"))
    endpoints = _endpoints(fields, data, join(path, "endpoints"))
    if model_id is None or routes is None or generation is None or endpoints is None:
        return None
    return Model(model_id, frozen_mapping(routes), generation, endpoints)


def _endpoints(fields: Fields, data: dict, path: str) -> frozenset[str] | None:
    """``models[].endpoints``: which of the OpenAI endpoints the model serves; all by default."""
    if data.get("endpoints") is None:
        return ALL_ENDPOINTS
    raw = data["endpoints"]
    if not isinstance(raw, list) or not raw:
        fields.error(path, f"must be a non-empty list of: {', '.join(ENDPOINTS)}")
        return None
    names = []
    for index, name in enumerate(raw):
        if name not in ENDPOINTS:
            shown = repr(name) if isinstance(name, str) else type_name(name)
            fields.error(f"{path}[{index}]", f"must be one of {', '.join(ENDPOINTS)} (got {shown})")
            return None
        names.append(name)
    check_duplicates(fields, path, names, "endpoint")
    return frozenset(names)


def _routes(fields: Fields, raw: Any, path: str) -> dict[str, str] | None:
    if not isinstance(raw, dict) or not raw:
        fields.error(path, "must map at least one provider id to its served model name")
        return None
    routes = {}
    for provider_id, served in raw.items():
        if not isinstance(provider_id, str) or not formats.ID.fullmatch(provider_id):
            fields.error(path, f"provider id {provider_id!r} must be {formats.ID_EXPECTED}")
        elif not isinstance(served, str) or not formats.SERVED_NAME.fullmatch(served):
            fields.error(
                f"{path}[{provider_id}]",
                f"must be a served model name ({formats.SERVED_NAME_EXPECTED})",
            )
        else:
            routes[provider_id] = served
    return routes if len(routes) == len(raw) else None


def _generation(fields: Fields, raw: Any, path: str) -> Generation | None:
    data = fields.mapping(raw, path, GENERATION_KEYS)
    if data is None:
        return None
    default = fields.integer(data, "default_max_tokens", path, default=None, minimum=1)
    limit = fields.integer(data, "max_tokens_limit", path, default=None, minimum=1)
    if default is not None and limit is not None and default > limit:
        fields.error(
            join(path, "default_max_tokens"),
            f"must be <= max_tokens_limit {show_number(limit)} (got {show_number(default)})",
        )
        return None
    return Generation(default, limit)
