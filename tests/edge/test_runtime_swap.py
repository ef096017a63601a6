"""A swap replaces the running config in one step and lets go of the replaced one afterwards, a
slice per loop turn, so freeing a fleet's config never holds the loop up in one piece."""

from __future__ import annotations

import asyncio
import sys

from bench.fleet_config import fleet_yaml
from edge.config import load_config_text
from edge.runtime import EdgeRuntime


async def write_nowhere(batch: object) -> None:
    return None


async def test_a_swap_lets_go_of_what_it_replaced_over_the_next_loop_turns() -> None:
    runtime = EdgeRuntime(load_config_text(fleet_yaml(12)), None, write_nowhere, write_nowhere)
    replaced_node = runtime.config.node("node-00001")  # every node changes below
    prepared = runtime.prepare(load_config_text(fleet_yaml(12, capacity=5)))

    runtime.swap_config(prepared)
    held_after_swap = sys.getrefcount(replaced_node)
    for _ in range(3):
        await asyncio.sleep(0)

    assert runtime.config.node("node-00001").providers[0].capacity == 5
    assert runtime.config.node("node-00001") is not replaced_node
    # Only this test holds it now: the swap kept it until a slice let go of it.
    assert sys.getrefcount(replaced_node) == held_after_swap - 1
