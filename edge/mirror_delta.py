"""Which nodes and models a config changes from another: the part of the mirror a sync touches.

Plain Python, for `edge.mirror.import_config` when the mirror is known to hold ``base``. A
delta's rows are its nodes' (node row, adapters, providers), its models' (catalog row) and the
routes of its models to its nodes' providers. Every other row is the same in ``base`` and in the
config, so it already matches.

That covers every route that changed: a changed route changes its model, and the node of its
provider joins the delta (a row the sync writes may only point at rows it reads). A provider
removed or moved changes its old and its new node by itself. An unchanged model's routes to a
changed node's providers stay as they are: a provider is updated in place, never recreated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from edge.config.schema import EdgeConfig, Model


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


_Item = TypeVar("_Item", bound=_Identified)


@dataclass(frozen=True)
class MirrorDelta:
    """The ids of the nodes and models whose rows a sync reads and writes."""

    nodes: frozenset[str]
    models: frozenset[str]


def mirror_delta(base: EdgeConfig, config: EdgeConfig) -> MirrorDelta:
    """The nodes and models added, removed or changed from ``base`` to ``config``, and the nodes
    whose providers gained, lost or changed a route."""
    nodes = _differing(base.nodes, config.nodes)
    models = _differing(base.models, config.models)
    before = {model.id: model for model in base.models if model.id in models}
    after = {model.id: model for model in config.models if model.id in models}
    rerouted = {
        provider_id
        for model_id in models
        for provider_id, _ in _routes(before.get(model_id)) ^ _routes(after.get(model_id))
    }
    on_changed_nodes = {
        provider.id
        for node_id in nodes
        for node in (base.node(node_id), config.node(node_id))
        if node is not None
        for provider in node.providers
    }
    # A rerouted provider on a node that did not change is on that node in both configs. Found by
    # a scan of the nodes: only a change to routes alone needs one.
    elsewhere = rerouted - on_changed_nodes
    if elsewhere:
        nodes.update(
            node.id
            for node in config.nodes
            if not elsewhere.isdisjoint(provider.id for provider in node.providers)
        )
    return MirrorDelta(frozenset(nodes), frozenset(models))


def _differing(before: Iterable[_Item], after: Iterable[_Item]) -> set[str]:
    """The ids of the items added, removed or changed."""
    unmatched = {item.id: item for item in before}
    differing = set()
    for item in after:
        old = unmatched.pop(item.id, None)
        # Identity first: a refresh's candidate shares every unchanged node and model with the
        # config in force (`edge.config.sharing`), and comparing a fleet's nodes takes milliseconds.
        if old is not item and old != item:
            differing.add(item.id)
    return differing | unmatched.keys()


def _routes(model: Model | None) -> set[tuple[str, str]]:
    return set(model.providers.items()) if model is not None else set()
