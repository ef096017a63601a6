"""Health probes for one registry: report every provider's health on start and on each change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nodes.agent.adapters import Adapter
from nodes.agent.registry import Registry

logger = logging.getLogger(__name__)

HealthMap = dict[str, tuple[bool, str]]  # provider id -> (healthy, detail)
Report = Callable[[HealthMap], Awaitable[None]]


class HealthMonitor:
    """Probes each adapter every ``probe_interval_s``; a provider's health is its adapter's.

    Each report is the complete map for the registry, so the Edge can replace what it knew.
    """

    def __init__(self, registry: Registry, report: Report) -> None:
        self._registry = registry
        self._report = report
        self._adapter_health: dict[str, tuple[bool, str]] = {}

    def snapshot(self) -> HealthMap:
        return {
            provider_id: self._adapter_health[entry.adapter.id]
            for provider_id, entry in self._registry.providers.items()
        }

    async def run(self) -> None:
        adapters = list(self._registry.adapters.values())
        results = await asyncio.gather(*(_probe(a) for a in adapters))
        self._adapter_health = {a.id: result for a, result in zip(adapters, results, strict=True)}
        await self._report(self.snapshot())
        async with asyncio.TaskGroup() as group:
            for adapter in adapters:
                if adapter.probe_interval_s is not None:
                    group.create_task(self._watch(adapter, adapter.probe_interval_s))

    async def _watch(self, adapter: Adapter, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            result = await _probe(adapter)
            if result != self._adapter_health[adapter.id]:
                logger.info(
                    "adapter %s is %s: %s",
                    adapter.id,
                    "healthy" if result[0] else "unhealthy",
                    result[1],
                )
                self._adapter_health[adapter.id] = result
                await self._report(self.snapshot())


async def _probe(adapter: Adapter) -> tuple[bool, str]:
    # A broken probe must not take the monitor down: it just means "unhealthy".
    try:
        return await adapter.probe()
    except Exception as exc:
        return False, f"probe failed: {exc or type(exc).__name__}"
