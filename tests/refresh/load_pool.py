"""The pool both "apply under load" tests reshape: two Nodes, two echo providers each."""

from __future__ import annotations

from typing import Any

MODEL = "echo"
NODES = {"node-a": ("a-1", "a-2"), "node-b": ("b-1", "b-2")}
PROVIDERS = tuple(pid for pids in NODES.values() for pid in pids)


def provider(pid: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A provider entry; a ``long_context_slots`` of None means the key is left out."""
    item = {"id": pid, "adapter": "echo", "served_models": ["echo-small"], **settings}
    if item.get("long_context_slots") is None:
        item.pop("long_context_slots", None)
    return item


def initial_settings() -> dict[str, dict[str, Any]]:
    return {
        pid: {"capacity": 3, "priority": 1, "enabled": True, "long_context_slots": 1}
        for pid in PROVIDERS
    }
