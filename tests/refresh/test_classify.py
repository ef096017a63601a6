"""Refresh classification: the DESIGN §6 table path by path, plus an identity-diff property."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.config.canonical import build_canonical, revision_of
from edge.config.schema import (
    ControlPlane,
    EdgeSection,
    Generation,
    Model,
    Node,
    OpenAISection,
    PrincipalToken,
    Provider,
    QueueDefaults,
)
from nodes.wire import AdapterSpec
from refresh.classify import Change, ListDelta, classify, format_change, format_summary, list_delta

HASH_A = "a" * 64
HASH_B = "b" * 64


def make_provider(provider_id: str, adapter: str, served: tuple[str, ...]) -> Provider:
    return Provider(provider_id, adapter, served, True, 4, 1, 100, 32, 30.0)


def make_canonical() -> dict[str, Any]:
    """Two nodes, three providers, two models, two principal tokens."""
    node_a = Node(
        id="node-a",
        alias="a",
        token_hash_sha256=HASH_A,
        concurrency=8,
        adapters=(
            AdapterSpec("echo", "echo"),
            AdapterSpec("vllm", "openai_http", base_url="http://127.0.0.1:9000/v1"),
        ),
        providers=(
            make_provider("p1", "echo", ("echo-small", "echo-tiny")),
            make_provider("p2", "vllm", ("llama",)),
        ),
    )
    node_b = Node(
        id="node-b",
        alias="b",
        token_hash_sha256=HASH_B,
        concurrency=None,
        adapters=(AdapterSpec("echo", "echo"),),
        providers=(make_provider("p3", "echo", ("echo-small",)),),
    )
    models = (
        Model("echo", {"p1": "echo-small", "p3": "echo-small"}, Generation(512, 4096)),
        Model("big", {"p2": "llama"}, Generation(None, None)),
    )
    tokens = (
        PrincipalToken("cli-demo", HASH_A, "team-demo", "demo"),
        PrincipalToken("cli-other", HASH_B, "team-other", None),
    )
    return build_canonical(
        version=1,
        edge=EdgeSection("edge-dev", "127.0.0.1:8000", "127.0.0.1:8001", "var/bootstrap"),
        control_plane=ControlPlane(None),
        openai=OpenAISection(None, 100000, True, tokens),
        queue=QueueDefaults(64, 30.0),
        nodes=(node_a, node_b),
        models=models,
    )


def node(cfg: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in cfg["nodes"] if n["id"] == node_id)


def provider(cfg: dict[str, Any], node_id: str, provider_id: str) -> dict[str, Any]:
    return next(p for p in node(cfg, node_id)["providers"] if p["id"] == provider_id)


def adapter(cfg: dict[str, Any], node_id: str, adapter_id: str) -> dict[str, Any]:
    return next(a for a in node(cfg, node_id)["adapters"] if a["id"] == adapter_id)


def model(cfg: dict[str, Any], model_id: str) -> dict[str, Any]:
    return next(m for m in cfg["models"] if m["id"] == model_id)


def token(cfg: dict[str, Any], token_ref: str) -> dict[str, Any]:
    return next(t for t in cfg["openai"]["principal_tokens"] if t["token_ref"] == token_ref)


def remove(items: list[dict[str, Any]], key: str, identity: str) -> None:
    items[:] = [item for item in items if item[key] != identity]


NEW_PROVIDER = {**provider(make_canonical(), "node-a", "p1"), "id": "p9"}
NEW_NODE = {
    **node(make_canonical(), "node-b"),
    "id": "node-c",
    "alias": "c",
    "providers": [{**provider(make_canonical(), "node-b", "p3"), "id": "p4"}],
}
NEW_MODEL = {
    "id": "m2",
    "providers": {"p2": "llama"},
    "generation": model(make_canonical(), "echo")["generation"],
}
NEW_TOKEN = {
    "token_ref": "cli-new",
    "token_hash_sha256": "c" * 64,
    "principal_ref": "t",
    "alias": None,
}

Mutation = Callable[[dict[str, Any]], object]

# (mutation, path, op) for every row of the DESIGN §6 table.
LIVE_CASES: dict[str, tuple[Mutation, str, str]] = {
    # Left out of the canonical form at their defaults; a diff reads them as if spelled out.
    "failover max_attempts": (
        lambda c: c.update(failover={"max_attempts": 5}),
        "failover.max_attempts",
        "changed",
    ),
    "passive_health cooldown_s": (
        lambda c: c.update(passive_health={"failures": 3, "window_s": 30.0, "cooldown_s": 60.0}),
        "passive_health.cooldown_s",
        "changed",
    ),
    "provider enabled": (
        lambda c: provider(c, "node-a", "p1").update(enabled=False),
        "nodes[node-a].providers[p1].enabled",
        "changed",
    ),
    "provider capacity": (
        lambda c: provider(c, "node-a", "p1").update(capacity=8),
        "nodes[node-a].providers[p1].capacity",
        "changed",
    ),
    "provider priority": (
        lambda c: provider(c, "node-a", "p1").update(priority=5),
        "nodes[node-a].providers[p1].priority",
        "changed",
    ),
    "provider max_queue": (
        lambda c: provider(c, "node-a", "p1").update(max_queue=0),
        "nodes[node-a].providers[p1].max_queue",
        "changed",
    ),
    "provider queue_timeout_s": (
        lambda c: provider(c, "node-a", "p1").update(queue_timeout_s=5.0),
        "nodes[node-a].providers[p1].queue_timeout_s",
        "changed",
    ),
    "provider long_context_slots": (
        lambda c: provider(c, "node-a", "p1").update(long_context_slots=None),
        "nodes[node-a].providers[p1].long_context_slots",
        "changed",
    ),
    "provider served_models": (
        lambda c: provider(c, "node-a", "p1")["served_models"].append("echo-big"),
        "nodes[node-a].providers[p1].served_models",
        "changed",
    ),
    "provider added under existing node": (
        lambda c: node(c, "node-a")["providers"].append(copy.deepcopy(NEW_PROVIDER)),
        "nodes[node-a].providers[p9]",
        "added",
    ),
    "provider removed under existing node": (
        lambda c: remove(node(c, "node-b")["providers"], "id", "p3"),
        "nodes[node-b].providers[p3]",
        "removed",
    ),
    "queue max_queue": (lambda c: c["queue"].update(max_queue=1), "queue.max_queue", "changed"),
    "queue queue_timeout_s": (
        lambda c: c["queue"].update(queue_timeout_s=9.0),
        "queue.queue_timeout_s",
        "changed",
    ),
    "model added": (lambda c: c["models"].append(copy.deepcopy(NEW_MODEL)), "models[m2]", "added"),
    "model removed": (lambda c: remove(c["models"], "id", "big"), "models[big]", "removed"),
    "model route added": (
        lambda c: model(c, "echo")["providers"].update(p2="llama"),
        "models[echo].providers[p2]",
        "added",
    ),
    "model route removed": (
        lambda c: model(c, "echo")["providers"].pop("p3"),
        "models[echo].providers[p3]",
        "removed",
    ),
    "model route changed": (
        lambda c: model(c, "echo")["providers"].update(p1="echo-tiny"),
        "models[echo].providers[p1]",
        "changed",
    ),
    "model generation default_max_tokens": (
        lambda c: model(c, "echo")["generation"].update(default_max_tokens=64),
        "models[echo].generation.default_max_tokens",
        "changed",
    ),
    "model generation max_tokens_limit": (
        lambda c: model(c, "echo")["generation"].update(max_tokens_limit=128),
        "models[echo].generation.max_tokens_limit",
        "changed",
    ),
    "openai long_context_threshold_tokens": (
        lambda c: c["openai"].update(long_context_threshold_tokens=2000),
        "openai.long_context_threshold_tokens",
        "changed",
    ),
    "node concurrency": (
        lambda c: node(c, "node-a").update(concurrency=2),
        "nodes[node-a].concurrency",
        "changed",
    ),
}

RESTART_CASES: dict[str, tuple[Mutation, str, str]] = {
    "version": (lambda c: c.update(version=2), "version", "changed"),
    "edge id": (lambda c: c["edge"].update(id="edge-2"), "edge.id", "changed"),
    "edge listen": (lambda c: c["edge"].update(listen="0.0.0.0:80"), "edge.listen", "changed"),
    "edge admin_listen": (
        lambda c: c["edge"].update(admin_listen="127.0.0.1:9"),
        "edge.admin_listen",
        "changed",
    ),
    "edge bootstrap_path": (
        lambda c: c["edge"].update(bootstrap_path="var/b2"),
        "edge.bootstrap_path",
        "changed",
    ),
    "control_plane url": (
        lambda c: c["control_plane"].update(url="https://cp.example"),
        "control_plane.url",
        "changed",
    ),
    "openai listen": (
        lambda c: c["openai"].update(listen="127.0.0.1:8002"),
        "openai.listen",
        "changed",
    ),
    "openai require_auth": (
        lambda c: c["openai"].update(require_auth=False),
        "openai.require_auth",
        "changed",
    ),
    "principal token added": (
        lambda c: c["openai"]["principal_tokens"].append(dict(NEW_TOKEN)),
        "openai.principal_tokens[cli-new]",
        "added",
    ),
    "principal token removed": (
        lambda c: remove(c["openai"]["principal_tokens"], "token_ref", "cli-other"),
        "openai.principal_tokens[cli-other]",
        "removed",
    ),
    "principal token hash": (
        lambda c: token(c, "cli-demo").update(token_hash_sha256="d" * 64),
        "openai.principal_tokens[cli-demo].token_hash_sha256",
        "changed",
    ),
    "principal token principal_ref": (
        lambda c: token(c, "cli-demo").update(principal_ref="team-x"),
        "openai.principal_tokens[cli-demo].principal_ref",
        "changed",
    ),
    "principal token alias": (
        lambda c: token(c, "cli-other").update(alias="other"),
        "openai.principal_tokens[cli-other].alias",
        "changed",
    ),
    "node added": (lambda c: c["nodes"].append(copy.deepcopy(NEW_NODE)), "nodes[node-c]", "added"),
    "node removed": (lambda c: remove(c["nodes"], "id", "node-b"), "nodes[node-b]", "removed"),
    "node alias": (
        lambda c: node(c, "node-a").update(alias="aa"),
        "nodes[node-a].alias",
        "changed",
    ),
    "node token_hash_sha256": (
        lambda c: node(c, "node-a").update(token_hash_sha256="e" * 64),
        "nodes[node-a].token_hash_sha256",
        "changed",
    ),
    "adapter added": (
        lambda c: node(c, "node-b")["adapters"].append({"id": "echo2", "type": "echo"}),
        "nodes[node-b].adapters[echo2]",
        "added",
    ),
    "adapter removed": (
        lambda c: remove(node(c, "node-a")["adapters"], "id", "vllm"),
        "nodes[node-a].adapters[vllm]",
        "removed",
    ),
    "adapter base_url": (
        lambda c: adapter(c, "node-a", "vllm").update(base_url="http://10.0.0.2:8000/v1"),
        "nodes[node-a].adapters[vllm].base_url",
        "changed",
    ),
    "adapter token_delay_ms": (
        lambda c: adapter(c, "node-a", "echo").update(token_delay_ms=5.0),
        "nodes[node-a].adapters[echo].token_delay_ms",
        "changed",
    ),
    "provider adapter": (
        lambda c: provider(c, "node-a", "p1").update(adapter="vllm"),
        "nodes[node-a].providers[p1].adapter",
        "changed",
    ),
    "unlisted top-level key": (lambda c: c.update(telemetry={"on": True}), "telemetry", "added"),
    "unlisted provider key": (
        lambda c: provider(c, "node-a", "p1").update(weight=3),
        "nodes[node-a].providers[p1].weight",
        "added",
    ),
    "unlisted model key": (
        lambda c: model(c, "echo").update(description="x"),
        "models[echo].description",
        "added",
    ),
}


def mutated(mutation: Mutation) -> dict[str, Any]:
    cfg = make_canonical()
    mutation(cfg)
    return cfg


@pytest.mark.parametrize(
    ("mutation", "path", "op", "apply"),
    [pytest.param(*case, "live", id=name) for name, case in LIVE_CASES.items()]
    + [pytest.param(*case, "restart", id=name) for name, case in RESTART_CASES.items()],
)
def test_it_classifies_each_path(mutation: Mutation, path: str, op: str, apply: str) -> None:
    result = classify(make_canonical(), mutated(mutation))

    assert [(c.path, c.op, c.apply) for c in result.changes] == [(path, op, apply)]
    assert result.restart_required_paths == ([path] if apply == "restart" else [])


def test_a_section_back_at_its_defaults_is_a_live_change_of_its_leaves() -> None:
    tuned = mutated(
        lambda c: c.update(passive_health={"failures": 5, "window_s": 30.0, "cooldown_s": 30.0})
    )

    result = classify(tuned, make_canonical())

    assert [(c.path, c.old, c.new, c.apply) for c in result.changes] == [
        ("passive_health.failures", 5, 3, "live")
    ]


def test_it_reports_whole_items_and_sorted_served_models() -> None:
    new = mutated(lambda c: provider(c, "node-a", "p1").update(served_models=["z", "echo-small"]))
    new["models"].append(copy.deepcopy(NEW_MODEL))

    added, served = classify(make_canonical(), new).changes

    assert (served.old, served.new) == (["echo-small", "echo-tiny"], ["echo-small", "z"])
    assert (added.old, added.new) == (None, NEW_MODEL)


def test_it_ignores_the_order_of_every_identity_keyed_list() -> None:
    new = make_canonical()
    for items in [new["nodes"], new["models"], new["openai"]["principal_tokens"]]:
        items.reverse()
    for n in new["nodes"]:
        n["adapters"].reverse()
        n["providers"].reverse()
        for p in n["providers"]:
            p["served_models"].reverse()

    assert classify(make_canonical(), new).changes == []
    assert classify(make_canonical(), new).reconfigured_nodes == []


def test_it_lists_an_added_node_once_and_counts_its_providers() -> None:
    new = mutated(lambda c: c["nodes"].append(copy.deepcopy(NEW_NODE)))
    node(new, "node-a")["providers"].append(copy.deepcopy(NEW_PROVIDER))

    result = classify(make_canonical(), new)

    assert [(c.path, c.apply) for c in result.changes] == [
        ("nodes[node-a].providers[p9]", "live"),
        ("nodes[node-c]", "restart"),
    ]
    assert result.changed_nodes == ["node-a", "node-c"]
    assert result.changed_providers == ["p4", "p9"]
    assert result.reconfigured_nodes == ["node-a"]


def test_it_keeps_every_list_present_and_sorted() -> None:
    new = make_canonical()
    for case in [*LIVE_CASES.values(), *RESTART_CASES.values()]:
        if case[2] != "removed":  # a removal would hide the changes made under it
            case[0](new)

    result = classify(make_canonical(), new).to_dict()

    assert set(result) == {
        "changes",
        "changed_nodes",
        "changed_providers",
        "changed_models",
        "restart_required_paths",
    }
    paths = [change["path"] for change in result["changes"]]
    assert paths == sorted(paths)
    assert result["changed_nodes"] == ["node-a", "node-b", "node-c"]
    assert result["changed_providers"] == ["p1", "p4", "p9"]
    assert result["changed_models"] == ["echo", "m2"]
    assert result["restart_required_paths"] == sorted(result["restart_required_paths"])
    assert set(result["changes"][0]) == {"path", "op", "old", "new", "apply"}


def test_it_returns_empty_lists_for_identical_configs() -> None:
    assert classify(make_canonical(), make_canonical()).to_dict() == {
        "changes": [],
        "changed_nodes": [],
        "changed_providers": [],
        "changed_models": [],
        "restart_required_paths": [],
    }


def test_equal_numbers_that_encode_apart_are_a_change() -> None:
    # 0.0 == -0.0, but the revision (and a Node's config) tells them apart.
    old = mutated(lambda c: provider(c, "node-a", "p1").update(queue_timeout_s=0.0))
    new = mutated(lambda c: provider(c, "node-a", "p1").update(queue_timeout_s=-0.0))

    changes = classify(old, new).changes

    assert [(c.path, c.old, c.new) for c in changes] == [
        ("nodes[node-a].providers[p1].queue_timeout_s", 0.0, -0.0)
    ]


@pytest.mark.parametrize(
    ("old_value", "new_value", "changed"),
    [
        (30.0, 30.0, False),
        (30.0, 45.5, True),
        (float("nan"), float("nan"), False),  # NaN != NaN, but both encode as NaN
        (float("inf"), float("-inf"), True),
        (-0.0, -0.0, False),
    ],
)
def test_a_float_leaf_changes_when_its_encoding_does(
    old_value: float, new_value: float, changed: bool
) -> None:
    old = mutated(lambda c: provider(c, "node-a", "p1").update(queue_timeout_s=old_value))
    new = mutated(lambda c: provider(c, "node-a", "p1").update(queue_timeout_s=new_value))

    paths = [c.path for c in classify(old, new).changes]

    assert paths == (["nodes[node-a].providers[p1].queue_timeout_s"] if changed else [])


def test_an_equal_list_of_strings_is_no_change_and_another_one_is() -> None:
    old = mutated(lambda c: provider(c, "node-a", "p1").update(served_models=["a", "b"]))
    same = mutated(lambda c: provider(c, "node-a", "p1").update(served_models=["a", "b"]))
    other = mutated(lambda c: provider(c, "node-a", "p1").update(served_models=["a", "c"]))

    assert classify(old, same).changes == []
    assert [(c.path, c.old, c.new) for c in classify(old, other).changes] == [
        ("nodes[node-a].providers[p1].served_models", ["a", "b"], ["a", "c"])
    ]


def test_it_pushes_only_to_nodes_whose_own_config_changed() -> None:
    new = mutated(lambda c: model(c, "echo")["providers"].pop("p3"))
    assert classify(make_canonical(), new).reconfigured_nodes == []

    new = mutated(lambda c: remove(c["nodes"], "id", "node-b"))
    adapter(new, "node-a", "echo").update(token_delay_ms=1.0)
    assert classify(make_canonical(), new).reconfigured_nodes == ["node-a"]


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            Change("nodes[a].providers[p].capacity", "changed", 4, 8, "live"),
            "~ nodes[a].providers[p].capacity: 4 → 8 (live)",
        ),
        (Change("models[m2]", "added", None, {"id": "m2"}, "live"), "+ models[m2] (live)"),
        (
            Change("nodes[b]", "removed", {"id": "b"}, None, "restart"),
            "- nodes[b] (restart required)",
        ),
        (
            Change("edge.listen", "changed", "127.0.0.1:8000", "127.0.0.1:9000", "restart"),
            "! edge.listen: 127.0.0.1:8000 → 127.0.0.1:9000 (restart required)",
        ),
        (
            Change("n[a].providers[p].served_models", "changed", ["a"], ["a", "b"], "live"),
            "~ n[a].providers[p].served_models: added b (live)",
        ),
        (
            Change("n[a].providers[p].served_models", "changed", ["a", "c"], ["b", "d"], "live"),
            "~ n[a].providers[p].served_models: added b, d; removed a, c (live)",
        ),
        (
            Change("n[a].adapters[x].headers", "changed", [{"k": 1}], [], "restart"),
            '! n[a].adapters[x].headers: removed {"k":1} (restart required)',
        ),
        (
            Change("control_plane.url", "changed", None, "x", "restart"),
            "! control_plane.url: null → x (restart required)",
        ),
    ],
)
def test_it_formats_a_plan_line(change: Change, line: str) -> None:
    assert format_change(change) == line


def test_it_summarizes_a_plan() -> None:
    live = Change("queue.max_queue", "changed", 1, 2, "live")
    restart = Change("version", "changed", 1, 2, "restart")

    assert format_summary([]) == "No changes."
    assert format_summary([live]) == "Plan: 1 change (1 live, 0 restart required)."
    assert format_summary([live, live, restart]) == "Plan: 3 changes (2 live, 1 restart required)."


# --- property: no change exactly when the canonical revisions match -----------------------------

FRESH_IDS = st.sampled_from(["x1", "x2", "x3"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 4, 30, 100, 0.0, -0.0, 1.0, 4.0, 30.0, 100.0]),
    st.sampled_from(["a", "b"]),
)


def canonicalized(cfg: dict[str, Any]) -> dict[str, Any]:
    """Sort every identity-keyed list and served_models, as the canonical form does."""
    cfg = copy.deepcopy(cfg)
    cfg["nodes"].sort(key=lambda n: n["id"])
    cfg["models"].sort(key=lambda m: m["id"])
    cfg["openai"]["principal_tokens"].sort(key=lambda t: t["token_ref"])
    for n in cfg["nodes"]:
        n["adapters"].sort(key=lambda a: a["id"])
        n["providers"].sort(key=lambda p: p["id"])
        for p in n["providers"]:
            p["served_models"].sort()
    return cfg


def collections(cfg: dict[str, Any]) -> list[tuple[list[Any] | dict[str, Any], str]]:
    """Every identity-keyed collection with its kind, for adding, removing and shuffling."""
    found: list[tuple[list[Any] | dict[str, Any], str]] = [
        (cfg["nodes"], "node"),
        (cfg["models"], "model"),
        (cfg["openai"]["principal_tokens"], "token"),
    ]
    for n in cfg["nodes"]:
        found += [(n["adapters"], "adapter"), (n["providers"], "provider")]
        found += [(p["served_models"], "served") for p in n["providers"]]
    found += [(m["providers"], "route") for m in cfg["models"]]
    return found


def leaves(value: Any) -> list[tuple[list[Any] | dict[str, Any], Any]]:
    """(container, key) of every scalar that is not an identity."""
    entries = enumerate(value) if isinstance(value, list) else value.items()
    found = []
    for key, item in entries:
        if isinstance(item, list | dict):
            found += leaves(item)
        elif key not in ("id", "token_ref"):
            found.append((value, key))
    return found


def retyped(value: Any) -> Any:
    """The same number in another JSON type (true -> 1 -> 1.0 -> 1); anything else unchanged.

    Python calls these equal, the revision does not, so classify must not either.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def set_leaf(data: st.DataObject, cfg: dict[str, Any]) -> None:
    container, key = data.draw(st.sampled_from(leaves(cfg)))
    # served_models holds strings only: the canonical form sorts them.
    values = st.sampled_from(["a", "b"]) if isinstance(container, list) else SCALARS
    container[key] = data.draw(st.one_of(st.just(retyped(container[key])), values))


def remove_item(data: st.DataObject, cfg: dict[str, Any]) -> None:
    container, _ = data.draw(st.sampled_from(collections(cfg)))
    if container:
        entry = data.draw(st.sampled_from(list(container)))
        if isinstance(container, list):
            container.remove(entry)
        else:
            del container[entry]


def add_item(data: st.DataObject, cfg: dict[str, Any]) -> None:
    container, kind = data.draw(st.sampled_from(collections(cfg)))
    identity = data.draw(FRESH_IDS)
    taken = (
        container
        if kind in ("route", "served")
        else [item.get("id", item.get("token_ref")) for item in container]
    )
    if identity in taken:
        return
    if kind == "route":
        container[identity] = data.draw(st.sampled_from(["a", "b"]))
    elif kind == "served":
        container.append(identity)
    elif kind == "token":
        container.append({**NEW_TOKEN, "token_ref": identity})
    else:
        template = {"node": NEW_NODE, "model": NEW_MODEL, "provider": NEW_PROVIDER}.get(kind)
        container.append({**copy.deepcopy(template or {"type": "echo"}), "id": identity})


def shuffle(data: st.DataObject, cfg: dict[str, Any]) -> None:
    for container, kind in collections(cfg):
        if kind != "route":  # a mapping has no order to shuffle
            container[:] = data.draw(st.permutations(container))


def mutate(data: st.DataObject, cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(cfg)
    for step in data.draw(
        st.lists(st.sampled_from([set_leaf, remove_item, add_item, shuffle]), max_size=4)
    ):
        step(data, cfg)
    return cfg


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_it_finds_no_change_exactly_when_revisions_match(data: st.DataObject) -> None:
    # `new` grows out of `old`, so shuffles alone (equal revisions) come up as often as real edits.
    old = mutate(data, make_canonical())
    new = mutate(data, old)

    no_change = classify(old, new).changes == []

    assert no_change == (revision_of(canonicalized(old)) == revision_of(canonicalized(new)))


@pytest.mark.parametrize(
    ("old", "new", "delta"),
    [
        (["a"], ["a", "b"], ListDelta(["b"], [])),
        (["a", "b"], ["b"], ListDelta([], ["a"])),
        (["a", "a", "b"], ["a", "c"], ListDelta(["c"], ["a", "b"])),
        (["a", "b"], ["b", "a"], ListDelta([], [])),
        # Compared as the revision sees them: 1 and 1.0 and true are three values.
        ([1, {"k": [1]}], [1.0, {"k": [1]}], ListDelta([1.0], [1])),
        ([], [], ListDelta([], [])),
        ("a", ["a"], None),
        (None, [], None),
    ],
)
def test_it_says_what_a_list_gained_and_lost(old, new, delta: ListDelta | None) -> None:
    assert list_delta(old, new) == delta


def test_it_words_a_list_delta() -> None:
    assert ListDelta(["b", 2], ["a"]).text() == "added b, 2; removed a"
    assert ListDelta([], []).text() == "reordered"
