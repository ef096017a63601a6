"""A distinctive secret planted in every config field whose value no message may repeat.

Each plant edits a config built like ``tests.e2e.harness.echo_config`` (principal tokens, a first
node with adapters) so that it is refused with an issue at the plant's path; ``plant_all`` makes
one config that carries every plant at once.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

SECRET = "sk-PLANTED-4f9c1e7b2a"
# A well-formed hash that two nodes share: refused as a reuse, and never quoted either.
SHARED_HASH = hashlib.sha256(b"planted shared token").hexdigest()
# What the YAML layer may not echo either: a value behind an explicit tag.
TAGGED_YAML = f"version: 1\nedge: {{id: !!int {SECRET}}}\nnodes: []\n"

Config = dict[str, Any]


def _adapter(adapter_id: str, **keys: Any) -> Callable[[Config], None]:
    def edit(config: Config) -> None:
        adapter = {"id": adapter_id, "type": "openai_http", "base_url": "http://127.0.0.1:9/v1"}
        config["nodes"][0]["adapters"].append({**adapter, **keys})

    return edit


def _set(*path: str | int, value: Any) -> Callable[[Config], None]:
    def edit(config: Config) -> None:
        target = config
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
        target[path[-1]] = value

    return edit


def _shared_hash(config: Config) -> None:
    config["nodes"] += [
        {"id": "twin-1", "token_hash_sha256": SHARED_HASH},
        {"id": "twin-2", "token_hash_sha256": SHARED_HASH},
    ]


def _node_path(config: Config) -> str:
    return f"nodes[{config['nodes'][0]['id']}]"


# name -> (edit, the issue path it must produce, given the config)
PLANTS: dict[str, tuple[Callable[[Config], None], Callable[[Config], str]]] = {
    "principal token hash": (
        _set("openai", "principal_tokens", 0, "token_hash_sha256", value=SECRET),
        lambda c: (
            f"openai.principal_tokens[{c['openai']['principal_tokens'][0]['token_ref']}]"
            ".token_hash_sha256"
        ),
    ),
    "node token hash": (
        _set("nodes", 0, "token_hash_sha256", value=SECRET),
        lambda c: f"{_node_path(c)}.token_hash_sha256",
    ),
    "shared hash": (_shared_hash, lambda c: "nodes[twin-2].token_hash_sha256"),
    "api_key_env": (
        _adapter("env", api_key_env=SECRET),
        lambda c: f"{_node_path(c)}.adapters[env].api_key_env",
    ),
    "base_url query": (
        _adapter("query", base_url=f"http://127.0.0.1:9/v1?api_key={SECRET}"),
        lambda c: f"{_node_path(c)}.adapters[query].base_url",
    ),
    "base_url fragment": (
        _adapter("fragment", base_url=f"http://127.0.0.1:9/v1#{SECRET}"),
        lambda c: f"{_node_path(c)}.adapters[fragment].base_url",
    ),
    "base_url user": (
        _adapter("user", base_url=f"https://{SECRET}@api.example/v1"),
        lambda c: f"{_node_path(c)}.adapters[user].base_url",
    ),
    "base_url password": (
        _adapter("password", base_url=f"https://me:{SECRET}@api.example/v1"),
        lambda c: f"{_node_path(c)}.adapters[password].base_url",
    ),
    "base_url is the key": (
        _adapter("pasted", base_url=SECRET),
        lambda c: f"{_node_path(c)}.adapters[pasted].base_url",
    ),
    "health_path query": (
        _adapter("probe", health_path=f"/health?key={SECRET}"),
        lambda c: f"{_node_path(c)}.adapters[probe].health_path",
    ),
    "control_plane.url query": (
        _set("control_plane", "url", value=f"https://cp.example/api?token={SECRET}"),
        lambda c: "control_plane.url",
    ),
    "literal token": (_set("nodes", 0, "token", value=SECRET), lambda c: f"{_node_path(c)}.token"),
    "literal api_key": (
        _adapter("literal", api_key=SECRET),
        lambda c: f"{_node_path(c)}.adapters[literal].api_key",
    ),
    "literal password": (_set("edge", "password", value=SECRET), lambda c: "edge.password"),
    "literal secret": (_set("secret", value=SECRET), lambda c: "secret"),
}

# Plants that can only stand alone: a config has one control_plane.url.
SOLO_PLANTS: dict[str, tuple[Callable[[Config], None], Callable[[Config], str]]] = {
    "control_plane.url user": (
        _set("control_plane", "url", value=f"https://me:{SECRET}@cp.example/api"),
        lambda c: "control_plane.url",
    ),
    "control_plane.url is the key": (
        _set("control_plane", "url", value=SECRET),
        lambda c: "control_plane.url",
    ),
}


def planted(config: Config, *names: str) -> Config:
    """``config`` with the named plants (every plant of ``PLANTS`` when none is named)."""
    copied = copy.deepcopy(config)
    for name in names or PLANTS:
        edit, _ = {**PLANTS, **SOLO_PLANTS}[name]
        edit(copied)
    return copied


def plant_paths(config: Config, *names: str) -> set[str]:
    """The issue paths the named plants (all of ``PLANTS`` when none is named) must produce."""
    every = {**PLANTS, **SOLO_PLANTS}
    return {every[name][1](config) for name in names or PLANTS}


def leaked(text: str) -> list[str]:
    """The planted values found in ``text``."""
    return [value for value in (SECRET, SHARED_HASH) if value in text]
