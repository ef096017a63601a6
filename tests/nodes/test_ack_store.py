"""Node acks in the database: a Node's config ack lands in its mirror row, in batches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import yaml

from edge.config import load_config_text
from edge.mirror import import_config
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage import Usage
from nodes.ack_log import NodeAckRecorder, RevisionAcks
from nodes.ack_store import write_acks
from nodes.models import Node
from tests.e2e.harness import Tokens, echo_config
from tests.nodes.consumer_sign_in import sign_in

# The writes run in another thread, outside a test's transaction (STACK-NOTES).
pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = Tokens()
NODES = ("node-a", "node-b", "node-c")


def config_text() -> str:
    extra = [
        {"id": node_id, "token_hash_sha256": f"{index:064x}", "adapters": [], "providers": []}
        for index, node_id in enumerate(NODES[1:], start=1)
    ]
    return yaml.safe_dump(echo_config(TOKENS, 18000, 18001, extra_nodes=extra))


@pytest.fixture
def mirrored() -> str:
    """The revision of a config with three Nodes, imported into the mirror."""
    text = config_text()
    return import_config(load_config_text(text), text, source="test").revision


async def acked() -> dict[str, tuple[str, datetime | None]]:
    return {
        node.node_id: (node.last_acked_revision, node.last_acked_at)
        async for node in Node.objects.all()
    }


async def test_acks_land_in_the_node_rows_each_nodes_latest(mirrored: str) -> None:
    recorder = NodeAckRecorder(write_acks)
    before = datetime.now(UTC)
    recorder.record("node-a", "sha256:old")
    recorder.record("node-b", mirrored)
    recorder.record("node-a", mirrored)
    recorder.record("node-gone", mirrored)  # no row (any more): nothing to update

    await recorder.flush()

    rows = await acked()
    assert {node_id: revision for node_id, (revision, _) in rows.items()} == {
        "node-a": mirrored,
        "node-b": mirrored,
        "node-c": "",
    }
    assert rows["node-a"][1] is not None and rows["node-a"][1] >= before
    assert rows["node-c"][1] is None


async def test_it_writes_several_revisions_in_one_batch(mirrored: str) -> None:
    await write_acks(
        [
            RevisionAcks("sha256:1", datetime(2026, 1, 1, tzinfo=UTC), ("node-a", "node-c")),
            RevisionAcks("sha256:2", datetime(2026, 1, 2, tzinfo=UTC), ("node-b",)),
        ]
    )

    assert await acked() == {
        "node-a": ("sha256:1", datetime(2026, 1, 1, tzinfo=UTC)),
        "node-b": ("sha256:2", datetime(2026, 1, 2, tzinfo=UTC)),
        "node-c": ("sha256:1", datetime(2026, 1, 1, tzinfo=UTC)),
    }


async def write_no_usage(batch: list[Usage]) -> None:
    return None


@pytest.fixture
def runtime(mirrored: str) -> Iterator[EdgeRuntime]:
    """The process's runtime for the mirrored config, writing acks to the database."""
    previous = get_runtime() if runtime_installed() else None
    runtime = EdgeRuntime(load_config_text(config_text()), None, write_no_usage, write_acks)
    install_runtime(runtime)
    yield runtime
    install_runtime(previous)


async def test_a_connected_nodes_ack_reaches_its_row(runtime: EdgeRuntime, mirrored: str) -> None:
    communicator, _ = await sign_in(TOKENS)
    async with asyncio.timeout(5):
        while not runtime.pool.stats().providers["echo-1"].node_ready:
            await asyncio.sleep(0.01)

    await runtime.acks.flush()  # waits for the timer's flush, or is the one that writes

    revision, acked_at = (await acked())["node-a"]
    assert (revision, acked_at is not None) == (mirrored, True)
    await communicator.disconnect()
