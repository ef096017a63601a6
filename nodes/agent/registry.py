"""The Node's registry: provider id -> (adapter, served models), swapped whole on refresh.

A run holds the registry it started on (``begin_run``/``end_run``), so a refresh never pulls an
adapter out from under a running stream: the old registry is retired at the swap and its adapters
are closed only once its last active run ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nodes.agent.adapters import Adapter, build_adapter
from nodes.agent.spec import AdapterSpec, NodeSpec

logger = logging.getLogger(__name__)

AdapterFactory = Callable[[AdapterSpec], Adapter]


@dataclass(frozen=True, slots=True)
class Route:
    provider_id: str
    adapter: Adapter
    served_models: frozenset[str]


class RouteError(Exception):
    """A run.request this registry cannot serve (unknown provider, adapter or target)."""


class Registry:
    def __init__(
        self, revision: str, adapters: Mapping[str, Adapter], routes: Mapping[str, Route]
    ) -> None:
        self.revision = revision
        self.adapters = MappingProxyType(dict(adapters))
        self.routes = MappingProxyType(dict(routes))
        self._active_runs = 0
        self._retired = False
        self._closed = asyncio.Event()
        self._close_task: asyncio.Task[None] | None = None

    @classmethod
    def build(
        cls, spec: NodeSpec, revision: str, *, adapter_factory: AdapterFactory = build_adapter
    ) -> Registry:
        adapters = {a.id: adapter_factory(a) for a in spec.adapters}
        routes = {p.id: Route(p.id, adapters[p.adapter], p.served_models) for p in spec.providers}
        return cls(revision, adapters, routes)

    @property
    def active_runs(self) -> int:
        return self._active_runs

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def resolve(self, provider_id: str, adapter_id: str, target: str) -> Adapter:
        route = self.routes.get(provider_id)
        if route is None:
            raise RouteError(f"provider {provider_id!r} is not on this node")
        if route.adapter.id != adapter_id:
            raise RouteError(
                f"provider {provider_id!r} uses adapter {route.adapter.id!r}, not {adapter_id!r}"
            )
        if target not in route.served_models:
            raise RouteError(f"provider {provider_id!r} does not serve model {target!r}")
        return route.adapter

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
        results = await asyncio.gather(
            *(adapter.aclose() for adapter in self.adapters.values()), return_exceptions=True
        )
        for adapter, result in zip(self.adapters.values(), results, strict=True):
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
