"""The pool's input: an immutable view of the providers and model routes it dispatches over.

Kept separate from ``edge.config`` so the pool can be built and tested without the loader, and so
a refresh can hand the pool exactly what dispatch needs (DESIGN §6: copy-on-write swap).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from edge.dispatch.passive import PassiveHealthPolicy
from edge.pacing import pace

if TYPE_CHECKING:
    from edge.config.schema import EdgeConfig, Provider


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """One provider as dispatch sees it. ``long_context_slots``: None = no long limit, 0 = none."""

    id: str
    node_id: str
    adapter_id: str
    served_models: tuple[str, ...]
    enabled: bool
    capacity: int
    long_context_slots: int | None
    priority: int
    max_queue: int
    queue_timeout_s: float


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model group: the OpenAI ``model`` key and its routes (provider id -> served name)."""

    id: str
    routes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SnapshotDelta:
    """What a snapshot changed against the one it was built from (``PoolSnapshot.sharing``):
    the providers whose spec is a new object (changed or added) and the ids it dropped. The
    base is held weakly, so a chain of snapshots never keeps its history alive."""

    base: weakref.ref[PoolSnapshot]
    providers: tuple[ProviderSpec, ...]
    dropped_provider_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, weakref_slot=True)
class PoolSnapshot:
    providers: tuple[ProviderSpec, ...]
    models: tuple[ModelSpec, ...]
    long_context_threshold_tokens: int
    passive_health: PassiveHealthPolicy = field(default_factory=PassiveHealthPolicy)
    delta: SnapshotDelta | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The config loader already validates all of this; checking again here keeps a
        # hand-built snapshot from failing later with a KeyError deep inside the pool.
        provider_ids = {p.id for p in self.providers}
        if len(provider_ids) != len(self.providers):
            raise ValueError("provider ids must be unique")
        if len({m.id for m in self.models}) != len(self.models):
            raise ValueError("model ids must be unique")
        for model in self.models:
            unknown = sorted(set(model.routes) - provider_ids)
            if unknown:
                raise ValueError(f"model {model.id!r} routes to unknown providers {unknown}")

    def sharing(self, previous: PoolSnapshot) -> PoolSnapshot:
        """This snapshot with every spec equal to one of ``previous`` replaced by that object.

        The pool's swap leaves a provider or model whose spec is the very object it already has
        as it is, and swapping it in over ``previous`` visits only the providers in its
        ``delta``: a refresh of one provider in a fleet's thirty thousand costs the event loop
        a dictionary copy, not a pass over all of them.
        """
        old_providers = {p.id: p for p in previous.providers}
        old_models = {m.id: m for m in previous.models}
        providers = tuple(_shared(old_providers, p) for p in self.providers)
        return replace(
            self,
            providers=providers,
            models=tuple(_shared(old_models, m) for m in self.models),
            delta=_delta(previous, old_providers, providers),
        )

    def delta_over(self, base: PoolSnapshot | None) -> SnapshotDelta | None:
        """The delta, if this snapshot was built over ``base``; else None (a full swap)."""
        delta = self.delta
        return delta if delta is not None and base is not None and delta.base() is base else None


def snapshot_from_config(
    config: EdgeConfig,
    previous: PoolSnapshot | None = None,
    previous_config: EdgeConfig | None = None,
) -> PoolSnapshot:
    """The dispatch view of a validated Edge config, sharing what did not change with
    ``previous`` (as ``PoolSnapshot.sharing`` does). ``previous_config``: the config
    ``previous`` was built from; a node of ``config`` that is the very object it holds keeps its
    specs as they are, unbuilt and uncompared, so a refresh of one node in thousands builds and
    compares only that one's (at 3,000 nodes, 45 ms when every spec was compared, a few ms now).
    """
    old: dict[str, ProviderSpec] = {}
    if previous is not None:
        old = {spec.id: spec for spec in previous.providers}
    providers: list[ProviderSpec] = []
    for node in config.nodes:
        pace()
        if previous_config is not None and old and previous_config.node(node.id) is node:
            providers += [old[provider.id] for provider in node.providers]
        else:
            providers += [_shared(old, _provider_spec(node.id, p)) for p in node.providers]
    models = tuple(
        ModelSpec(id=model.id, routes=MappingProxyType(dict(model.providers)))
        for model in config.models
    )
    delta = None
    if previous is not None:
        old_models = {m.id: m for m in previous.models}
        models = tuple(_shared(old_models, m) for m in models)
        delta = _delta(previous, old, providers)
    passive = config.passive_health
    return PoolSnapshot(
        tuple(providers),
        models,
        config.openai.long_context_threshold_tokens,
        PassiveHealthPolicy(passive.failures, passive.window_s, passive.cooldown_s),
        delta=delta,
    )


def _delta(
    previous: PoolSnapshot, old: Mapping[str, ProviderSpec], providers: Sequence[ProviderSpec]
) -> SnapshotDelta:
    """What a snapshot of ``providers`` changes over ``previous`` (whose specs ``old`` holds)."""
    changed = tuple(p for p in providers if old.get(p.id) is not p)
    kept = {p.id for p in providers}
    dropped = tuple(provider_id for provider_id in old if provider_id not in kept)
    return SnapshotDelta(weakref.ref(previous), changed, dropped)


def _provider_spec(node_id: str, provider: Provider) -> ProviderSpec:
    return ProviderSpec(
        id=provider.id,
        node_id=node_id,
        adapter_id=provider.adapter,
        served_models=tuple(provider.served_models),
        enabled=provider.enabled,
        capacity=provider.capacity,
        long_context_slots=provider.long_context_slots,
        priority=provider.priority,
        max_queue=provider.max_queue,
        queue_timeout_s=provider.queue_timeout_s,
    )


_Spec = TypeVar("_Spec", ProviderSpec, ModelSpec)


def _shared(previous: Mapping[str, _Spec], spec: _Spec) -> _Spec:
    pace()
    old = previous.get(spec.id)
    return old if old is spec or old == spec else spec
