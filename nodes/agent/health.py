"""Health probes for one registry: report each provider's health once known, and on each change."""

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
    """Probes each adapter on its own, then every ``probe_interval_s``; a provider's health is
    its adapter's.

    Each adapter's first answer is reported as it comes, so an upstream that never answers keeps
    only its own providers waiting. Each report covers every provider whose adapter has answered.
    """

    def __init__(self, registry: Registry, report: Report) -> None:
        self._registry = registry
        self._report = report
        self._adapter_health: dict[str, tuple[bool, str]] = {}

    def snapshot(self) -> HealthMap:
        return {
            provider_id: self._adapter_health[entry.adapter.id]
            for provider_id, entry in self._registry.providers.items()
            if entry.adapter.id in self._adapter_health
        }

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for adapter in self._registry.adapters.values():
                group.create_task(self._watch(adapter))

    async def _watch(self, adapter: Adapter) -> None:
        while True:
            result = await _probe(adapter)
            if result != self._adapter_health.get(adapter.id):
                healthy, detail = result
                # The reason goes to the Edge as the providers' detail, and into the Node's log.
                level = logging.INFO if healthy else logging.WARNING
                state = "healthy" if healthy else "unhealthy"
                logger.log(level, "adapter %s is %s: %s", adapter.id, state, detail)
                self._adapter_health[adapter.id] = result
                await self._report(self.snapshot())
            if adapter.probe_interval_s is None:
                return
            await asyncio.sleep(adapter.probe_interval_s)


async def _probe(adapter: Adapter) -> tuple[bool, str]:
    # A broken probe must not take the monitor down: it just means "unhealthy".
    try:
        return await adapter.probe()
    except Exception as exc:
        return False, f"probe failed: {exc or type(exc).__name__}"
