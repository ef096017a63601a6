"""The Node's registry: provider id -> (adapter, served models), swapped whole on refresh.

A run holds the registry it started on (``begin_run``/``end_run``), so a refresh never pulls an
adapter out from under a running stream: the old registry is retired at the swap and its adapters
are closed only once its last active run ends. An adapter whose spec a refresh leaves unchanged
is carried into the new registry as it is (its connection pool and health stay), and is closed
only when the last registry holding it closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nodes.agent.adapters import Adapter, build_adapter
from nodes.wire import AdapterSpec, NodeSpec

logger = logging.getLogger(__name__)

AdapterFactory = Callable[[AdapterSpec], Adapter]


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One provider this Node serves: the adapter that runs it and the models it answers for."""

    provider_id: str
    adapter: Adapter
    served_models: frozenset[str]


class RouteError(Exception):
    """A run.request this registry cannot serve (unknown provider, adapter or target)."""


class AdapterHolds:
    """How many live registries hold each adapter: the last one to close closes the adapter."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def take(self, adapters: Iterable[Adapter]) -> None:
        for adapter in adapters:
            self._counts[id(adapter)] = self._counts.get(id(adapter), 0) + 1

    def release(self, adapters: Iterable[Adapter]) -> list[Adapter]:
        """Let go of ``adapters``; return those no registry holds any more."""
        unheld = []
        for adapter in adapters:
            self._counts[id(adapter)] -= 1
            if self._counts[id(adapter)] == 0:
                del self._counts[id(adapter)]
                unheld.append(adapter)
        return unheld


class Registry:
    def __init__(
        self,
        revision: str,
        adapters: Mapping[str, tuple[AdapterSpec, Adapter]],
        providers: Mapping[str, RegistryEntry],
        holds: AdapterHolds | None = None,
    ) -> None:
        self.revision = revision
        self.specs = MappingProxyType({aid: spec for aid, (spec, _) in adapters.items()})
        self.adapters = MappingProxyType({aid: adapter for aid, (_, adapter) in adapters.items()})
        self.providers = MappingProxyType(dict(providers))
        self._holds = holds if holds is not None else AdapterHolds()
        self._holds.take(self.adapters.values())
        self._active_runs = 0
        self._retired = False
        self._closed = asyncio.Event()
        self._close_task: asyncio.Task[None] | None = None

    @classmethod
    def build(
        cls,
        spec: NodeSpec,
        revision: str,
        *,
        adapter_factory: AdapterFactory = build_adapter,
        previous: Registry | None = None,
    ) -> Registry:
        """A registry for ``spec``, keeping ``previous``'s adapters whose spec is unchanged."""
        adapters = {}
        for adapter_spec in spec.adapters:
            if previous is not None and previous.specs.get(adapter_spec.id) == adapter_spec:
                adapters[adapter_spec.id] = (adapter_spec, previous.adapters[adapter_spec.id])
            else:
                adapters[adapter_spec.id] = (adapter_spec, adapter_factory(adapter_spec))
        providers = {
            p.id: RegistryEntry(p.id, adapters[p.adapter][1], p.served_models)
            for p in spec.providers
        }
        return cls(revision, adapters, providers, previous._holds if previous else None)

    @property
    def active_runs(self) -> int:
        return self._active_runs

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def resolve(self, provider_id: str, adapter_id: str, target: str) -> Adapter:
        entry = self.providers.get(provider_id)
        if entry is None:
            raise RouteError(f"provider {provider_id!r} is not on this node")
        if entry.adapter.id != adapter_id:
            raise RouteError(
                f"provider {provider_id!r} uses adapter {entry.adapter.id!r}, not {adapter_id!r}"
            )
        if target not in entry.served_models:
            raise RouteError(f"provider {provider_id!r} does not serve model {target!r}")
        return entry.adapter

    def begin_run(self) -> None:
        # Called synchronously when the run is accepted, so a swap cannot slip in between.
        if self._retired:
            raise RuntimeError("a retired registry takes no new runs")
        self._active_runs += 1

    def end_run(self) -> None:
        self._active_runs -= 1
        self._close_if_drained()

    def retire(self) -> None:
        """Take no new runs; close the adapters once the active runs are done."""
        self._retired = True
        self._close_if_drained()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def _close_if_drained(self) -> None:
        if self._retired and self._active_runs == 0 and self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._close_adapters())

    async def _close_adapters(self) -> None:
        unheld = self._holds.release(self.adapters.values())
        results = await asyncio.gather(
            *(adapter.aclose() for adapter in unheld), return_exceptions=True
        )
        for adapter, result in zip(unheld, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("closing adapter %s failed: %s", adapter.id, result)
        self._closed.set()


class RegistrySlot:
    """Holds the current registry and the retired ones still draining."""

    def __init__(self) -> None:
        self.current: Registry | None = None
        self._draining: set[Registry] = set()

    def swap(self, registry: Registry) -> Registry | None:
        previous, self.current = self.current, registry
        if previous is not None:
            self._retire(previous)
        return previous

    async def aclose(self) -> None:
        """Retire the current registry and wait until every retired one has closed."""
        if self.current is not None:
            self._retire(self.current)
            self.current = None
        while self._draining:
            registry = self._draining.pop()
            await registry.wait_closed()

    def _retire(self, registry: Registry) -> None:
        registry.retire()
        self._draining = {r for r in self._draining if not r.closed}
        self._draining.add(registry)
