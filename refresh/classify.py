"""Refresh classification: what changed between two canonical configs, and how it applies.

An identity-keyed diff (DESIGN §6): lists of nodes, adapters, providers, models and principal
tokens are matched by id, so reordering is no change, and every change is classified ``live`` or
``restart`` from an explicit allow-list of live paths. Plain Python, so the refresh view, the admin
review and the CLI share it and its tests need no Django.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from edge.config.canonical import canonical_json
from edge.config.resilience import default_sections
from edge.config.schema import OPENAI_SERVERS
from edge.pacing import pace

Op = Literal["added", "removed", "changed"]
Apply = Literal["live", "restart"]

# Lists whose items carry an identity, keyed by it. Patterns replace every identity with `*`.
_KEYED_LISTS = {
    "nodes": "id",
    "nodes[*].adapters": "id",
    "nodes[*].providers": "id",
    "models": "id",
    "openai.principal_tokens": "token_ref",
    "openai.policies": "principal_ref",
    "openai.policies[*].token_overrides": "token_ref",
    "openai.policies[*].model_overrides": "model",
}
# A mapping whose keys are identities (provider id -> served name): its entries are items.
_KEYED_MAPPINGS = frozenset({"models[*].providers"})
# Sets of strings: compared sorted and reported whole, never element by element.
_SET_LISTS = frozenset(
    {
        "nodes[*].providers[*].served_models",
        "models[*].endpoints",
        "openai.cors.allowed_origins",
    }
)

# Everything not allowed here needs a restart, so a path nobody thought of is safe by default.
_LIVE_PATHS = frozenset(
    {
        "nodes[*].concurrency",
        # Only ever reported under a node present on both sides: an added or removed node is
        # one restart change that covers its providers.
        "nodes[*].providers[*]",
        "nodes[*].providers[*].enabled",
        "nodes[*].providers[*].capacity",
        "nodes[*].providers[*].priority",
        "nodes[*].providers[*].max_queue",
        "nodes[*].providers[*].queue_timeout_s",
        "nodes[*].providers[*].long_context_slots",
        "nodes[*].providers[*].served_models",
        "models[*]",
        "models[*].providers[*]",
        "models[*].endpoints",
        "openai.long_context_threshold_tokens",
        "openai.cors",
        "openai.cors.allowed_origins",
        "openai.policies",
    }
)
_LIVE_PREFIXES = (
    "queue.",
    "models[*].generation.",
    "failover.",
    "passive_health.",
    "openai.policies[",
)


@dataclass(frozen=True, slots=True)
class Change:
    """One changed leaf, or one added/removed keyed item with its whole value."""

    path: str
    op: Op
    old: Any
    new: Any
    apply: Apply

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "op": self.op,
            "old": self.old,
            "new": self.new,
            "apply": self.apply,
        }


@dataclass(frozen=True, slots=True)
class Classification:
    """Every list sorted, ``[]`` when empty: the refresh result copies them as they are.

    ``reconfigured_nodes`` is not part of the result: the nodes present on both sides whose own
    config (the node payload a Node receives) changed, which are the Nodes a live apply pushes to.
    """

    changes: list[Change] = field(default_factory=list)
    changed_nodes: list[str] = field(default_factory=list)
    changed_providers: list[str] = field(default_factory=list)
    changed_models: list[str] = field(default_factory=list)
    restart_required_paths: list[str] = field(default_factory=list)
    reconfigured_nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        changes = []
        for change in self.changes:
            pace()  # a fleet's tens of thousands, built in a thread beside the event loop
            changes.append(change.to_dict())
        return {
            "changes": changes,
            "changed_nodes": list(self.changed_nodes),
            "changed_providers": list(self.changed_providers),
            "changed_models": list(self.changed_models),
            "restart_required_paths": list(self.restart_required_paths),
        }


@dataclass(frozen=True, slots=True)
class _At:
    """Where the walk is: the reported path, its identity-free pattern, the items it is inside."""

    path: str = ""
    pattern: str = ""
    scope: tuple[tuple[str, str], ...] = ()  # (collection pattern, identity), outermost first

    def attr(self, name: str) -> _At:
        dot = "." if self.path else ""
        return _At(f"{self.path}{dot}{name}", f"{self.pattern}{dot}{name}", self.scope)

    def item(self, identity: str) -> _At:
        scope = (*self.scope, (self.pattern, identity))
        return _At(f"{self.path}[{identity}]", f"{self.pattern}[*]", scope)


_Found = tuple[_At, Op, Any, Any]


def classify(old: Mapping[str, Any], new: Mapping[str, Any]) -> Classification:
    """Diff two canonical config forms by identity and classify each change live or restart."""
    found: list[_Found] = []
    _walk(_with_defaults(old), _with_defaults(new), _At(), found)
    found.sort(key=lambda entry: entry[0].path)

    changes = [Change(at.path, op, o, n, _apply_of(at.pattern)) for at, op, o, n in found]
    touched: dict[str, set[str]] = {"nodes": set(), "nodes[*].providers": set(), "models": set()}
    added_or_removed_nodes: set[str] = set()
    for at, op, o, n in found:
        for collection, identity in at.scope:
            touched.get(collection, set()).add(identity)
        if at.pattern == "nodes[*]" and op != "changed":
            # An added or removed node is one change; its providers changed all the same.
            added_or_removed_nodes.add(at.scope[-1][1])
            touched["nodes[*].providers"].update(p["id"] for p in (o or n).get("providers", []))
    return Classification(
        changes=changes,
        changed_nodes=sorted(touched["nodes"]),
        changed_providers=sorted(touched["nodes[*].providers"]),
        changed_models=sorted(touched["models"]),
        restart_required_paths=[c.path for c in changes if c.apply == "restart"],
        # The canonical form's `nodes[*]` is the node payload itself, so a change under an
        # existing node is exactly a change of what that Node receives.
        reconfigured_nodes=sorted(touched["nodes"] - added_or_removed_nodes),
    )


def format_change(change: Change) -> str:
    """One terraform-plan-like line, e.g. ``~ nodes[a].providers[p].capacity: 4 → 8 (live)``."""
    if change.op == "added":
        sign = "+"
    elif change.op == "removed":
        sign = "-"
    else:
        sign = "!" if change.apply == "restart" else "~"
    how = "live" if change.apply == "live" else "restart required"
    if change.op != "changed":
        return f"{sign} {change.path} ({how})"
    delta = list_delta(change.old, change.new)
    if delta is not None:
        return f"{sign} {change.path}: {delta.text()} ({how})"
    return f"{sign} {change.path}: {render_value(change.old)} → {render_value(change.new)} ({how})"


def format_summary(changes: Sequence[Change]) -> str:
    if not changes:
        return "No changes."
    restart = sum(change.apply == "restart" for change in changes)
    noun = "change" if len(changes) == 1 else "changes"
    live = len(changes) - restart
    return f"Plan: {len(changes)} {noun} ({live} live, {restart} restart required)."


def _walk(old: Any, new: Any, at: _At, found: list[_Found]) -> None:
    if at.scope and isinstance(old, dict | list) and old == new and _encode_alike(old, new):
        # An unchanged item (most of a fleet's nodes, when one changed).
        return
    both_lists = isinstance(old, list) and isinstance(new, list)
    if at.pattern in _SET_LISTS and both_lists:
        if sorted(old) != sorted(new):
            found.append((at, "changed", sorted(old), sorted(new)))
    elif at.pattern in _KEYED_LISTS and both_lists:
        key = _KEYED_LISTS[at.pattern]
        _walk_entries({i[key]: i for i in old}, {i[key]: i for i in new}, at.item, found)
    elif isinstance(old, dict) and isinstance(new, dict):
        _walk_entries(old, new, at.item if at.pattern in _KEYED_MAPPINGS else at.attr, found)
    elif canonical_json(old) != canonical_json(new):
        # Compared as the revision sees them, so 1, 1.0 and true are three different values.
        found.append((at, "changed", _plain(old), _plain(new)))


def _walk_entries(
    old: dict[str, Any], new: dict[str, Any], child: Callable[[str], _At], found: list[_Found]
) -> None:
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            found.append((child(name), "removed", _plain(old[name]), None))
        elif name not in old:
            found.append((child(name), "added", None, _plain(new[name])))
        elif type(was := old[name]) is type(now := new[name]) and type(was) in _SCALARS:
            # Most leaves of a changed node (a fleet-wide change has tens of thousands): settled
            # without encoding them.
            if not _same_scalar(was, now):
                found.append((child(name), "changed", was, now))
        else:
            _walk(was, now, child(name), found)


_SCALARS = (str, int, bool, type(None), float)


def _same_scalar(old: Any, new: Any) -> bool:
    """Whether two scalars of one type encode alike, as the revision sees them. Floats differ
    from `==` twice: 0.0 and -0.0 are equal but encode apart; two NaNs encode alike."""
    if type(old) is not float:
        return bool(old == new)
    if old != old:  # NaN, which encodes as itself
        return new != new
    return old == new and math.copysign(1.0, old) == math.copysign(1.0, new)


def _encode_alike(old: dict[str, Any] | list[Any], new: dict[str, Any] | list[Any]) -> bool:
    """Whether two equal collections encode alike: `==` alone takes 1, 1.0 and true for one
    value. A list of strings (served models) is settled without encoding it: only a string
    equals a string. Anything else is compared by C code, in calls small enough not to hold the
    interpreter long."""
    if type(old) is list and all(type(item) is str for item in old):
        return True
    return canonical_json(old) == canonical_json(new)


def _apply_of(pattern: str) -> Apply:
    if pattern in _LIVE_PATHS or pattern.startswith(_LIVE_PREFIXES):
        return "live"
    return "restart"


def _with_defaults(canonical: Mapping[str, Any]) -> dict[str, Any]:
    """The sections the canonical form leaves out at their defaults filled in, so a first change
    reads ``failover.max_attempts: 3 → 5``, not a whole section added; a first policy reads
    ``openai.policies[team-a]`` added, not the whole list."""
    filled = {**default_sections(), **canonical}
    if isinstance(filled.get("openai"), Mapping):
        # `openai.server: daphne → uvicorn`, not a key added.
        filled["openai"] = {"policies": [], "server": OPENAI_SERVERS[0], **filled["openai"]}
    if isinstance(filled.get("edge"), Mapping):
        filled["edge"] = {"ha": False, **filled["edge"]}  # `edge.ha: false → true`
    return filled


def _plain(value: Any) -> Any:
    """A JSON-ready deep copy: a change never aliases a config's data."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class ListDelta:
    """How a list value changed: the items added and removed (as many times as they were),
    or, when neither, only the order."""

    added: list[Any]
    removed: list[Any]

    def text(self) -> str:
        parts = [
            f"{word} {', '.join(map(render_value, items))}"
            for word, items in (("added", self.added), ("removed", self.removed))
            if items
        ]
        return "; ".join(parts) or "reordered"


def list_delta(old: Any, new: Any) -> ListDelta | None:
    """The delta of two lists, items compared as the revision sees them; None unless both are
    lists."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return None
    unmatched = Counter(canonical_json(item) for item in old)
    added = []
    for item in new:
        key = canonical_json(item)
        if unmatched[key]:
            unmatched[key] -= 1
        else:
            added.append(item)
    removed = []
    for item in old:
        key = canonical_json(item)
        if unmatched[key]:
            unmatched[key] -= 1
            removed.append(item)
    return ListDelta(added, removed)


def render_value(value: Any) -> str:
    """A changed value as the plan shows it: strings bare, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
