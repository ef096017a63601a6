"""Which config object a change's path is about (plain Python), for links to its mirror page.

A path names items by identity, e.g. ``nodes[node-a].providers[echo-1].capacity``; the object
is the innermost item that has a mirror row: here provider ``echo-1``. Identities never contain
brackets (edge/config/formats.py), so a bracket ends one.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["node", "adapter", "provider", "model", "route", "principal_token"]

# An item's collection pattern (its identities replaced by `*`) -> the kind of mirror row.
_KINDS: dict[str, Kind] = {
    "nodes": "node",
    "nodes[*].adapters": "adapter",
    "nodes[*].providers": "provider",
    "models": "model",
    "models[*].providers": "route",
    "openai.principal_tokens": "principal_token",
}
_SEGMENT = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)((?:\[[^\]]*\])*)")
_IDENTITY = re.compile(r"\[([^\]]*)\]")


def object_of(path: str) -> tuple[Kind, tuple[str, ...]] | None:
    """The kind and natural key of the innermost mirrored item ``path`` is in, or None.

    The key is the identities from the outside in that name the row: ``("node-a", "echo")``
    for an adapter, ``(model, provider)`` for a route, the one identity otherwise.
    """
    pattern, identities, found = "", [], None
    position = 0
    while position < len(path):
        segment = _SEGMENT.match(path, position)
        if segment is None or segment.end() == position:
            return found
        position = segment.end()
        pattern = f"{pattern}.{segment[1]}" if pattern else segment[1]
        for identity in _IDENTITY.findall(segment[2]):
            identities.append(identity)
            kind = _KINDS.get(pattern)
            if kind is not None:
                found = (kind, _key(kind, identities))
            pattern += "[*]"
    return found


def _key(kind: Kind, identities: list[str]) -> tuple[str, ...]:
    if kind in ("adapter", "route"):
        return tuple(identities[-2:])
    return (identities[-1],)
