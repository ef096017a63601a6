from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes.agent.registry import Registry, RegistrySlot, RouteError
from nodes.wire import AdapterSpec, NodeConfigError, parse_node_config


class RecordingAdapter:
    probe_interval_s = None

    def __init__(self, spec: AdapterSpec) -> None:
        self.id = spec.id
        self.closed = False

    async def stream(self, request: dict[str, Any], target: str, endpoint: str) -> Any:
        yield  # never used here

    async def probe(self) -> tuple[bool, str]:
        return True, "ok"

    async def aclose(self) -> None:
        self.closed = True


async def settle() -> None:
    """Give the loop a few turns, so a close scheduled by mistake would have happened."""
    for _ in range(10):
        await asyncio.sleep(0)


def build(fakes: Any, revision: str, **node: Any) -> Registry:
    spec = parse_node_config(fakes.make_node(**node), node_id="node-a")
    return Registry.build(spec, revision, adapter_factory=RecordingAdapter)


def test_it_resolves_a_provider_to_its_adapter(fakes: Any) -> None:
    registry = build(fakes, "r1")
    assert registry.resolve("p-echo", "echo", "echo-small") is registry.adapters["echo"]


@pytest.mark.parametrize(
    ("provider", "adapter", "target", "reason"),
    [
        ("p-gone", "echo", "echo-small", "provider 'p-gone' is not on this node"),
        ("p-echo", "vllm", "echo-small", "provider 'p-echo' uses adapter 'echo', not 'vllm'"),
        ("p-echo", "echo", "gpt-9", "provider 'p-echo' does not serve model 'gpt-9'"),
    ],
)
def test_it_names_what_a_run_request_got_wrong(
    fakes: Any, provider: str, adapter: str, target: str, reason: str
) -> None:
    with pytest.raises(RouteError, match=reason):
        build(fakes, "r1").resolve(provider, adapter, target)


async def test_it_swaps_in_one_step(fakes: Any) -> None:
    slot = RegistrySlot()
    first, second = build(fakes, "r1"), build(fakes, "r2")
    assert slot.swap(first) is None
    assert slot.swap(second) is first
    assert slot.current is second
    await slot.aclose()


async def test_it_closes_an_idle_retired_registry_at_once(fakes: Any) -> None:
    slot = RegistrySlot()
    old = build(fakes, "r1")
    slot.swap(old)
    slot.swap(build(fakes, "r2"))
    async with asyncio.timeout(2):
        await old.wait_closed()
    assert old.adapters["echo"].closed
    await slot.aclose()


async def test_it_closes_the_old_registry_only_after_its_last_run(fakes: Any) -> None:
    slot = RegistrySlot()
    old = build(fakes, "r1")
    slot.swap(old)
    old.begin_run()
    old.begin_run()
    new = build(fakes, "r2")
    slot.swap(new)
    new.begin_run()  # new runs land on the new registry

    old.end_run()
    await settle()
    assert not old.adapters["echo"].closed
    assert old.active_runs == 1

    old.end_run()
    async with asyncio.timeout(2):
        await old.wait_closed()
    assert old.adapters["echo"].closed
    assert not new.adapters["echo"].closed
    new.end_run()
    await slot.aclose()
    assert new.adapters["echo"].closed


async def test_it_takes_no_runs_once_retired(fakes: Any) -> None:
    registry = build(fakes, "r1")
    registry.retire()
    with pytest.raises(RuntimeError):
        registry.begin_run()
    await registry.wait_closed()


async def test_it_keeps_the_current_registry_when_a_payload_is_rejected(fakes: Any) -> None:
    slot = RegistrySlot()
    current = build(fakes, "r1")
    slot.swap(current)
    with pytest.raises(NodeConfigError):
        parse_node_config(fakes.make_node(node_id="node-b"), node_id="node-a")
    assert slot.current is current
    assert not current.closed
    await slot.aclose()


async def test_closing_the_slot_waits_for_draining_registries(fakes: Any) -> None:
    slot = RegistrySlot()
    old = build(fakes, "r1")
    slot.swap(old)
    old.begin_run()
    slot.swap(build(fakes, "r2"))
    closing = asyncio.create_task(slot.aclose())
    await settle()
    assert not closing.done()
    old.end_run()
    async with asyncio.timeout(2):
        await closing
    assert old.closed


async def test_it_carries_unchanged_adapters_and_closes_each_with_its_last_registry(
    fakes: Any,
) -> None:
    first = build(fakes, "r1")
    same_spec = parse_node_config(fakes.make_node(), node_id="node-a")
    changed_spec = parse_node_config(fakes.make_node(token_delay_ms=5), node_id="node-a")

    second = Registry.build(same_spec, "r2", adapter_factory=RecordingAdapter, previous=first)
    third = Registry.build(changed_spec, "r3", adapter_factory=RecordingAdapter, previous=second)

    assert second.adapters["echo"] is first.adapters["echo"]
    assert third.adapters["echo"] is not second.adapters["echo"]
    first.retire()
    await first.wait_closed()
    assert not first.adapters["echo"].closed  # the second registry still holds it
    second.retire()
    await second.wait_closed()
    assert first.adapters["echo"].closed and not third.adapters["echo"].closed
