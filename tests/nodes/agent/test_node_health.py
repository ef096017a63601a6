from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodes.agent.health import HealthMap, HealthMonitor
from nodes.agent.registry import Registry, RegistryEntry
from nodes.wire import AdapterSpec


class ScriptedAdapter:
    """Answers probes from a script; the last answer repeats."""

    def __init__(self, adapter_id: str, answers: list[Any], interval_s: float | None) -> None:
        self.id = adapter_id
        self.probe_interval_s = interval_s
        self._answers = answers

    async def stream(
        self, request: dict[str, Any], target: str, endpoint: str
    ) -> AsyncIterator[Any]:
        yield  # not used here

    async def probe(self) -> tuple[bool, str]:
        answer = self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def aclose(self) -> None:
        return None


def registry_of(*adapters: ScriptedAdapter, providers: dict[str, str]) -> Registry:
    by_id = {a.id: a for a in adapters}
    entries = {
        pid: RegistryEntry(pid, by_id[aid], frozenset({"m"})) for pid, aid in providers.items()
    }
    return Registry(
        "r1", {aid: (AdapterSpec(id=aid, type="echo"), a) for aid, a in by_id.items()}, entries
    )


async def reports_of(registry: Registry, count: int) -> list[HealthMap]:
    reports: asyncio.Queue[HealthMap] = asyncio.Queue()

    async def report(health: HealthMap) -> None:
        reports.put_nowait(health)

    task = asyncio.create_task(HealthMonitor(registry, report).run())
    try:
        async with asyncio.timeout(5):
            return [await reports.get() for _ in range(count)]
    finally:
        task.cancel()


async def test_it_reports_every_provider_once_probed() -> None:
    registry = registry_of(
        ScriptedAdapter("echo", [(True, "echo")], None),
        ScriptedAdapter("vllm", [(False, "GET /models: HTTP 503")], 60),
        providers={"p1": "echo", "p2": "vllm", "p3": "vllm"},
    )
    # One report per adapter as its probe answers; the last one covers every provider.
    *_, last = await reports_of(registry, 2)
    assert last == {
        "p1": (True, "echo"),
        "p2": (False, "GET /models: HTTP 503"),
        "p3": (False, "GET /models: HTTP 503"),
    }


async def test_it_reports_again_only_when_a_probe_result_changes() -> None:
    ok, down = (True, "GET /models: HTTP 200"), (False, "GET /models: HTTP 500")
    registry = registry_of(
        ScriptedAdapter("vllm", [ok, ok, ok, down, down, ok], 0.001), providers={"p": "vllm"}
    )
    reports = await reports_of(registry, 3)
    assert reports == [{"p": ok}, {"p": down}, {"p": ok}]


async def test_a_failing_probe_means_unhealthy() -> None:
    registry = registry_of(
        ScriptedAdapter("vllm", [RuntimeError("boom")], None), providers={"p": "vllm"}
    )
    [report] = await reports_of(registry, 1)
    assert report == {"p": (False, "probe failed: boom")}


class HangingAdapter(ScriptedAdapter):
    """An upstream that accepts the probe and never answers it."""

    def __init__(self, adapter_id: str) -> None:
        super().__init__(adapter_id, [], 60)

    async def probe(self) -> tuple[bool, str]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_probe_that_never_answers_holds_back_only_its_own_providers() -> None:
    registry = registry_of(
        HangingAdapter("stuck"),
        ScriptedAdapter("echo", [(True, "echo")], None),
        ScriptedAdapter("vllm", [(False, "GET /models: HTTP 404")], 60),
        providers={"p-stuck": "stuck", "p-echo": "echo", "p-vllm": "vllm"},
    )
    reports = await reports_of(registry, 2)
    assert reports[-1] == {"p-echo": (True, "echo"), "p-vllm": (False, "GET /models: HTTP 404")}
    assert all("p-stuck" not in report for report in reports)


async def test_it_logs_why_an_adapter_is_unhealthy(caplog: pytest.LogCaptureFixture) -> None:
    registry = registry_of(
        ScriptedAdapter("vllm", [(False, "GET /models: HTTP 404")], None), providers={"p": "vllm"}
    )
    with caplog.at_level(logging.INFO, logger="nodes.agent.health"):
        await reports_of(registry, 1)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "adapter vllm is unhealthy: GET /models: HTTP 404"
