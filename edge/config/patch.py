"""A candidate config as what it changes over the running one, to carry across processes.

A refresh is planned in a worker process (``refresh.plan_worker``), so that loading a fleet's
candidate never competes with the Edge's event loop for the interpreter. The Edge still needs the
candidate itself to swap it in, and reading a whole fleet's config back (tens of thousands of
objects) would cost the Edge most of what the worker saved. The worker sends a ``ConfigPatch``
instead: every top-level section, and only the nodes, models and canonical entries that differ
from the running config's; ``apply_patch`` builds the candidate in the Edge from the running
config's own objects and those pieces, so it is also shared as ``sharing_unchanged`` would share
it.

Plain Python; a patch is pickled with ``dumps`` (a config holds read-only mappings, which the
standard pickler refuses), and in pieces (``dumps_in_pieces``) to cross to the Edge.
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from edge.config.schema import EdgeConfig, Model, Node
from edge.config.sharing import KEYED_SECTIONS
from edge.pacing import pace

# Entries (nodes, models, canonical entries) per pickled piece of a patch. Unpickling plain dicts
# and lists never gives up the interpreter: the canonical entries of 3,000 changed nodes in one
# piece held the Edge's event loop for 70 ms; a piece of 100 holds it for a few.
PIECE_ENTRIES = 100

# The sections of an EdgeConfig sent whole: small, whatever the size of the fleet.
_WHOLE_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(EdgeConfig)
    if f.init and f.name not in ("nodes", "models", "canonical")
)


@dataclass(frozen=True, slots=True)
class ConfigPatch:
    """The candidate's sections, its node and model ids in order, and the nodes, models and
    canonical entries (by section, then id) that are not equal to the running config's."""

    base_revision: str
    sections: Mapping[str, Any]
    node_ids: tuple[str, ...]
    nodes: Mapping[str, Node]
    model_ids: tuple[str, ...]
    models: Mapping[str, Model]
    canonical: Mapping[str, Any]  # every non-keyed section whole, keyed ones as id order
    canonical_entries: Mapping[str, Mapping[str, Any]]  # keyed section -> id -> changed entry


class PatchMismatch(ValueError):
    """The patch was made over another config than the one it is applied to."""


def patch_against(candidate: EdgeConfig, running: EdgeConfig) -> ConfigPatch:
    """What ``apply_patch(patch, running)`` needs to rebuild ``candidate``."""
    running_models = {model.id: model for model in running.models}
    canonical: dict[str, Any] = {}
    entries: dict[str, dict[str, Any]] = {}
    for key, value in candidate.canonical.items():
        previous = running.canonical.get(key)
        if key in KEYED_SECTIONS and isinstance(value, list) and isinstance(previous, list):
            by_id = {entry["id"]: entry for entry in previous}
            canonical[key] = [entry["id"] for entry in value]
            entries[key] = {e["id"]: e for e in value if by_id.get(e["id"]) != e}
        else:
            canonical[key] = value
    return ConfigPatch(
        base_revision=running.revision,
        sections={name: getattr(candidate, name) for name in _WHOLE_FIELDS},
        node_ids=tuple(node.id for node in candidate.nodes),
        nodes={n.id: n for n in candidate.nodes if running.node(n.id) != n},
        model_ids=tuple(model.id for model in candidate.models),
        models={m.id: m for m in candidate.models if running_models.get(m.id) != m},
        canonical=canonical,
        canonical_entries=entries,
    )


def apply_patch(patch: ConfigPatch, running: EdgeConfig) -> EdgeConfig:
    """The candidate the patch was made from, built over ``running``; raises PatchMismatch when
    ``running`` is not the config it was made against."""
    if patch.base_revision != running.revision:
        raise PatchMismatch(
            f"the patch was made against {patch.base_revision}, not {running.revision}"
        )
    running_models = {model.id: model for model in running.models}
    canonical: dict[str, Any] = {}
    for key, value in patch.canonical.items():
        if key in patch.canonical_entries:
            changed = patch.canonical_entries[key]
            by_id = {entry["id"]: entry for entry in running.canonical[key]}
            canonical[key] = [changed[i] if i in changed else by_id[i] for i in value]
        else:
            canonical[key] = value
    return EdgeConfig(
        **patch.sections,
        nodes=tuple(_pick(patch.nodes, running.node, i) for i in patch.node_ids),
        models=tuple(_pick(patch.models, running_models.get, i) for i in patch.model_ids),
        canonical=canonical,
    )


def _pick(changed: Mapping[str, Any], running: Any, piece_id: str) -> Any:
    piece = changed.get(piece_id)
    return piece if piece is not None else running(piece_id)


def read_only(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    """A read-only mapping over ``items``, in their order: how a pickled one is rebuilt."""
    return MappingProxyType(items)


def _read_only_reduced(mapping: MappingProxyType[Any, Any]) -> tuple[Any, ...]:
    return read_only, (dict(mapping),)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[MappingProxyType] = _read_only_reduced


def dumps(value: object) -> bytes:
    """``pickle.dumps`` that also takes the read-only mappings a config holds."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(value)
    return buffer.getvalue()


def dumps_in_pieces(patch: ConfigPatch) -> list[bytes]:
    """``patch`` pickled as its small parts, then its changed entries PIECE_ENTRIES at a time;
    ``loads_in_pieces`` rebuilds it one piece per call."""
    skeleton = dataclasses.replace(
        patch, nodes={}, models={}, canonical_entries={key: {} for key in patch.canonical_entries}
    )
    keyed: list[tuple[str, str | None, Mapping[str, Any]]] = [
        ("nodes", None, patch.nodes),
        ("models", None, patch.models),
        *(("canonical_entries", key, entries) for key, entries in patch.canonical_entries.items()),
    ]
    pieces = [dumps(skeleton)]
    for name, section, mapping in keyed:
        items = list(mapping.items())
        for start in range(0, len(items), PIECE_ENTRIES):
            pieces.append(dumps((name, section, items[start : start + PIECE_ENTRIES])))
    return pieces


def loads_in_pieces(pieces: Sequence[bytes]) -> ConfigPatch:
    """The patch ``dumps_in_pieces`` made."""
    skeleton: ConfigPatch = pickle.loads(pieces[0])
    nodes: dict[str, Node] = {}
    models: dict[str, Model] = {}
    entries: dict[str, dict[str, Any]] = {key: {} for key in skeleton.canonical_entries}
    for piece in pieces[1:]:
        pace()
        name, section, items = pickle.loads(piece)
        if name == "nodes":
            nodes.update(items)
        elif name == "models":
            models.update(items)
        else:
            entries[section].update(items)
    return dataclasses.replace(skeleton, nodes=nodes, models=models, canonical_entries=entries)
