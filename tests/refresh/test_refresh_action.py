"""`run_refresh` on a runtime built in the test: what an apply changes, and what a refusal keeps."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from edge.models import ConfigRevision
from providers.models import Provider
from refresh import actions
from refresh.actions import run_refresh
from refresh.models import RefreshRecord
from tests.refresh.refresh_helpers import (
    STALE_BASE,
    FakeNodeLink,
    connect_node,
    make_config,
    with_adapter_change,
    with_capacity,
    with_model_generation,
    yaml_of,
)

pytestmark = pytest.mark.django_db(transaction=True)


def refresh(runtime, mode="apply", config=None, **kwargs):
    text = None if config is None else yaml_of(config)
    return run_refresh(runtime, mode=mode, config_yaml=text, requested_by="test", **kwargs)


@sync_to_async
def mirror_state() -> dict:
    return {
        "capacity": Provider.objects.get(provider_id="echo-1").capacity,
        "active": ConfigRevision.objects.get(active=True).revision,
        "revisions": ConfigRevision.objects.count(),
    }


@sync_to_async
def records() -> list[RefreshRecord]:
    return list(RefreshRecord.objects.order_by("id"))


async def test_it_applies_a_live_change_everywhere(runtime):
    link = FakeNodeLink()
    connect_node(runtime, link)
    before = runtime.config_path.read_text()
    candidate = yaml_of(with_capacity(make_config(), 8))

    result = await run_refresh(
        runtime, mode="apply", config_yaml=candidate, requested_by="test", request_id="req-1"
    )

    assert result.status == "applied"
    assert runtime.config.revision == result.candidate_revision
    assert runtime.config.node("node-a").providers[0].capacity == 8
    assert runtime.pool.stats().providers["echo-1"].capacity == 8
    assert runtime.config_path.read_text() == candidate
    assert runtime.config_path.with_name("edge.yaml.bak").read_text() == before
    assert not list(runtime.config_path.parent.glob(".edge.yaml.*")), "temporary file left"
    assert await mirror_state() == {
        "capacity": 8,
        "active": result.candidate_revision,
        "revisions": 2,
    }
    assert result.node_pushes == [{"node": "node-a", "status": "acked", "error": None}]
    [push] = link.refreshes()
    assert push["refresh_id"] == result.refresh_id
    assert push["revision"] == result.candidate_revision
    assert push["node"]["providers"][0]["capacity"] == 8
    [record] = await records()
    assert record.refresh_id == result.refresh_id
    assert (record.mode, record.status) == ("apply", "applied")
    assert (record.candidate_yaml, record.request_id) == (candidate, "req-1")
    assert record.result == result.to_dict()


async def test_it_commits_the_applied_record_with_the_mirror_before_pushing(runtime, monkeypatch):
    connect_node(runtime, FakeNodeLink())
    push = actions._push
    seen_at_push = []

    async def observed_push(*args):
        state = await mirror_state()
        seen_at_push.append(
            (state["active"], [(r.status, r.result["node_pushes"]) for r in await records()])
        )
        return await push(*args)

    monkeypatch.setattr(actions, "_push", observed_push)

    result = await refresh(runtime, config=with_capacity(make_config(), 8))

    assert seen_at_push == [(result.candidate_revision, [("applied", [])])]
    [record] = await records()
    assert record.result["node_pushes"] == [{"node": "node-a", "status": "acked", "error": None}]


async def test_it_rereads_the_config_file_without_a_candidate(runtime):
    runtime.config_path.write_text(yaml_of(with_capacity(make_config(), 6)))

    result = await refresh(runtime)

    assert result.status == "applied"
    assert runtime.config.node("node-a").providers[0].capacity == 6


@pytest.mark.parametrize("answer", ["rejected", None])
async def test_it_records_a_node_that_rejects_or_never_acks(runtime, answer, settings):
    settings.IOP_REFRESH_ACK_TIMEOUT_S = 0.2
    connect_node(runtime, FakeNodeLink(answer=answer, error="adapters[echo]: broken"))

    result = await refresh(runtime, config=with_capacity(make_config(), 8))

    assert result.status == "applied"
    expected = (
        {"node": "node-a", "status": "rejected", "error": "adapters[echo]: broken"}
        if answer
        else {"node": "node-a", "status": "timeout", "error": None}
    )
    assert result.node_pushes == [expected]


async def test_it_reports_a_changed_node_that_is_not_connected(runtime):
    result = await refresh(runtime, config=with_capacity(make_config(), 8))

    assert result.node_pushes == [{"node": "node-a", "status": "not_connected", "error": None}]


async def test_it_pushes_nothing_when_no_node_config_changed(runtime):
    link = FakeNodeLink()
    connect_node(runtime, link)

    result = await refresh(runtime, config=with_model_generation(make_config()))

    assert result.status == "applied"
    assert runtime.models["echo"].generation.default_max_tokens == 64
    assert result.node_pushes == []
    assert link.refreshes() == []


@pytest.mark.parametrize(
    ("candidate", "base_revision", "status"),
    [
        (with_adapter_change(with_capacity(make_config(), 8)), None, "restart_required"),
        (with_capacity(make_config(), 0), None, "invalid"),
        (with_capacity(make_config(), 8), STALE_BASE, "stale"),
    ],
)
async def test_it_changes_nothing_on_a_refusal(runtime, candidate, base_revision, status):
    link = FakeNodeLink()
    connect_node(runtime, link)
    config, revision = runtime.config, runtime.config.revision
    file_bytes = runtime.config_path.read_bytes()
    mirror = await mirror_state()

    result = await refresh(runtime, config=candidate, base_revision=base_revision)

    assert result.status == status
    assert result.node_pushes == []
    assert runtime.config is config and runtime.config.revision == revision
    assert runtime.pool.stats().providers["echo-1"].capacity == 4
    assert runtime.config_path.read_bytes() == file_bytes
    assert not runtime.config_path.with_name("edge.yaml.bak").exists()
    assert await mirror_state() == mirror
    assert link.frames == []
    [record] = await records()
    # An invalid candidate's YAML is not kept: it may hold a refused raw credential.
    expected_yaml = "" if status == "invalid" else yaml_of(candidate)
    assert (record.status, record.candidate_yaml) == (status, expected_yaml)


async def test_it_refuses_an_apply_whose_config_file_cannot_be_written(runtime, monkeypatch):
    config, file_bytes = runtime.config, runtime.config_path.read_bytes()
    mirror = await mirror_state()

    def disk_full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("refresh.persist._replace", disk_full)
    result = await refresh(runtime, config=with_capacity(make_config(), 8))

    assert result.status == "invalid"
    assert result.errors[0]["path"] == "config_file"
    assert "No space left" in result.errors[0]["message"]
    assert runtime.config is config and runtime.config_path.read_bytes() == file_bytes
    assert await mirror_state() == mirror
    [record] = await records()
    assert record.status == "invalid"


async def test_it_keeps_the_running_config_as_the_backup(runtime):
    running_text = runtime.config_path.read_text()
    edited = yaml_of(with_capacity(make_config(), 8))
    runtime.config_path.write_text(edited)  # the operator edits the file in place

    result = await refresh(runtime, config=None)

    assert result.status == "applied"
    assert runtime.config_path.with_name("edge.yaml.bak").read_text() == running_text
    assert runtime.config_path.read_text() == edited


async def test_it_lists_the_restart_paths_of_a_refused_apply(runtime):
    result = await refresh(runtime, config=with_adapter_change(make_config()))

    assert result.to_dict()["restart_required_paths"] == ["nodes[node-a].adapters[echo-2]"]
    assert [c["apply"] for c in result.to_dict()["changes"]] == ["restart"]


async def test_it_swaps_the_snapshot_but_pushes_nothing_without_changes(runtime):
    link = FakeNodeLink()
    connect_node(runtime, link)
    config, file_bytes = runtime.config, runtime.config_path.read_bytes()

    result = await refresh(runtime, config=make_config())

    assert result.status == "no_change"
    assert runtime.config is not config
    assert runtime.config.revision == config.revision
    assert result.node_pushes == [] and link.frames == []
    assert runtime.config_path.read_bytes() == file_bytes
    [record] = await records()
    assert record.status == "no_change"


async def test_it_dry_runs_without_changing_anything(runtime):
    config, file_bytes = runtime.config, runtime.config_path.read_bytes()

    result = await refresh(runtime, mode="dry_run", config=with_capacity(make_config(), 8))

    assert result.status == "ok"
    assert runtime.config is config
    assert runtime.config_path.read_bytes() == file_bytes
    assert (await mirror_state())["capacity"] == 4
    [record] = await records()
    assert (record.mode, record.status) == ("dry_run", "ok")


async def test_it_serializes_refreshes_so_each_plans_on_the_last_apply(runtime):
    first, second = with_capacity(make_config(), 5), with_capacity(make_config(), 6)
    start = runtime.config.revision

    results = await asyncio.gather(refresh(runtime, config=first), refresh(runtime, config=second))

    assert [r.status for r in results] == ["applied", "applied"]
    one, two = await records()
    assert one.base_revision == start
    # Without the lock both would have planned against `start`.
    assert two.base_revision == one.candidate_revision
    assert runtime.config.revision == two.candidate_revision
    assert (await mirror_state())["active"] == two.candidate_revision


async def test_it_applies_only_one_of_two_plans_on_the_same_base(runtime):
    base = runtime.config.revision
    first, second = with_capacity(make_config(), 5), with_capacity(make_config(), 6)

    results = await asyncio.gather(
        refresh(runtime, config=first, base_revision=base),
        refresh(runtime, config=second, base_revision=base),
    )

    assert sorted(r.status for r in results) == ["applied", "stale"]
    assert runtime.config.node("node-a").providers[0].capacity == 5
    assert [r.status for r in await records()] == ["applied", "stale"]


@pytest.mark.parametrize("content", [None, b"\xff\xfe not utf-8"])
async def test_it_records_an_unreadable_config_file_as_invalid(runtime, content):
    config = runtime.config
    if content is None:
        runtime.config_path.unlink()
    else:
        runtime.config_path.write_bytes(content)

    result = await refresh(runtime, config=None)

    assert result.status == "invalid"
    assert result.errors[0]["path"] == "config_file"
    assert runtime.config is config
    [record] = await records()
    assert (record.status, record.candidate_yaml) == ("invalid", "")


@pytest.mark.parametrize("connected_before", [True, False])
async def test_a_node_that_connects_between_staging_and_swap_gets_its_push(
    runtime, monkeypatch, connected_before
):
    # Pushes are built turns of the loop before the swap; a Node whose hello came in meanwhile
    # got the old config, so its push is held on the session it has at the swap.
    old_link, new_link = FakeNodeLink(), FakeNodeLink()
    if connected_before:
        connect_node(runtime, old_link)
    stage = actions._stage_pushes

    async def connecting_meanwhile(*args):
        staged = await stage(*args)
        connect_node(runtime, new_link)
        return staged

    monkeypatch.setattr(actions, "_stage_pushes", connecting_meanwhile)

    result = await refresh(runtime, config=with_capacity(make_config(), 8))

    assert result.node_pushes == [{"node": "node-a", "status": "acked", "error": None}]
    [push] = new_link.refreshes()
    assert push["revision"] == result.candidate_revision
    assert old_link.refreshes() == []


async def test_pushes_are_staged_a_slice_per_loop_turn(runtime, monkeypatch):
    monkeypatch.setattr(actions, "STAGED_PER_TURN", 1)
    connect_node(runtime, FakeNodeLink())
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)  # the counter waits for its next turn
    staged = await actions._stage_pushes(runtime, runtime.config, ["node-a", "node-x"], "rf-1")
    counter.cancel()

    assert turns == 2
    assert [s.node_id for s in staged.staged] == ["node-a"]  # node-x has no config
    assert staged.pushes["node-x"]["status"] == "not_connected"
