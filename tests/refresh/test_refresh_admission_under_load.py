"""Apply under load, in process: the exact admission invariant while refreshes swap the pool.

500 runs go through ``open_run`` on a runtime built here, with two fake echo Nodes of two
providers each, while 20 ``run_refresh`` applies change capacities, priorities, ``enabled`` and
``long_context_slots``. Every admission is audited at the moment the slot is taken, against the
snapshot in force then (the last one handed to ``apply_snapshot``) and against the test's own count
of held leases, independent of the pool's counters.

The fake Nodes finish run ``k`` (in arrival order) only once enough applies are done, so every
apply meets runs in flight and waiting, whatever the machine's speed: they wait on an
``asyncio.Condition``, never on a sleep (their few milliseconds of random delay stand for the
work, to mix the order in which runs end, not to synchronise anything).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from edge.config import load_config_text
from edge.dispatch import (
    DispatchError,
    PoolSnapshot,
    ProviderPool,
    ProviderSpec,
    snapshot_from_config,
)
from edge.dispatch.state import ProviderState
from edge.mirror import import_config
from edge.runs import RunFailed, open_run
from edge.runtime import EdgeRuntime
from nodes.sessions import NodeSession
from refresh.actions import run_refresh
from tests.e2e.harness import echo_config, sha256_hex
from tests.refresh.load_pool import MODEL, NODES, PROVIDERS, initial_settings, provider
from tests.refresh.refresh_helpers import OPERATOR_PORT, PUBLIC_PORT, TOKENS, yaml_of

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 20240611
RUNS = 500
APPLIES = 20
LONG_SHARE = 0.25
THRESHOLD = 1000
LONG_TOKENS = 4000
NORMAL_TOKENS = 10
WAIT_S = 15.0


# -- configs ----------------------------------------------------------------------------------


def config_with(settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Two echo Nodes, two providers each, one model routed to all four; generous queues."""
    (first, first_ids), (second, second_ids) = NODES.items()
    config = echo_config(
        TOKENS,
        PUBLIC_PORT,
        OPERATOR_PORT,
        node_id=first,
        providers=[provider(pid, settings[pid]) for pid in first_ids],
        models=[{"id": MODEL, "providers": dict.fromkeys(PROVIDERS, "echo-small")}],
        extra_nodes=[
            {
                "id": second,
                "token_hash_sha256": sha256_hex(TOKENS.node(second)),
                "adapters": [{"id": "echo", "type": "echo"}],
                "providers": [provider(pid, settings[pid]) for pid in second_ids],
            }
        ],
        threshold=THRESHOLD,
    )
    config["queue"] = {"max_queue": RUNS, "queue_timeout_s": 60}
    return config


def random_settings(rng: random.Random) -> dict[str, dict[str, Any]]:
    """Capacities 1-6, priorities 0-2, ``enabled`` and long slots at random; some provider
    always serves both context classes, so no run is ever left without a provider."""
    while True:
        settings = {}
        for pid in PROVIDERS:
            capacity = rng.randint(1, 6)
            settings[pid] = {
                "capacity": capacity,
                "priority": rng.randint(0, 2),
                "enabled": rng.random() < 0.7,
                "long_context_slots": rng.choice([None, 0, *range(1, capacity + 1)]),
            }
        if any(s["enabled"] and s["long_context_slots"] != 0 for s in settings.values()):
            return settings


# -- the audit --------------------------------------------------------------------------------


@dataclass
class AdmissionAudit:
    """Checks every slot taken against the snapshot in force and its own count of held slots."""

    runtime: EdgeRuntime
    in_force: dict[str, ProviderSpec] = field(default_factory=dict)
    held: Counter[str] = field(default_factory=Counter)
    held_long: Counter[str] = field(default_factory=Counter)
    admissions: Counter[str] = field(default_factory=Counter)
    long_admissions: int = 0
    violations: list[str] = field(default_factory=list)

    def snapshot(self, snapshot: PoolSnapshot) -> None:
        self.in_force = {spec.id: spec for spec in snapshot.providers}

    def admit(self, state: ProviderState, long: bool) -> None:
        pid = state.id
        spec = self.in_force.get(pid)
        where = f"admission #{sum(self.admissions.values()) + 1} on {pid}"
        if (state.in_flight, state.long_in_flight) != (self.held[pid], self.held_long[pid]):
            self.violations.append(
                f"{where}: pool counts {state.in_flight}/{state.long_in_flight} held, "
                f"the audit {self.held[pid]}/{self.held_long[pid]}"
            )
        if spec is None:
            self.violations.append(f"{where}: the provider is not in the config in force")
        else:
            if not spec.enabled:
                self.violations.append(f"{where}: the provider is disabled")
            if self.runtime.nodes.ready(spec.node_id) is None:
                self.violations.append(f"{where}: node {spec.node_id} is not ready")
            if self.held[pid] >= spec.capacity:
                self.violations.append(
                    f"{where}: {self.held[pid]} held, capacity in force {spec.capacity}"
                )
            slots = spec.long_context_slots
            if long and slots is not None and self.held_long[pid] >= slots:
                self.violations.append(
                    f"{where}: {self.held_long[pid]} long held, long slots in force {slots}"
                )
        self.held[pid] += 1
        self.admissions[pid] += 1
        if long:
            self.held_long[pid] += 1
            self.long_admissions += 1

    def release(self, state: ProviderState, long: bool) -> None:
        self.held[state.id] -= 1
        if long:
            self.held_long[state.id] -= 1


@pytest.fixture
def audited(monkeypatch: pytest.MonkeyPatch) -> list[AdmissionAudit]:
    """Wrap the pool's one place that takes a slot, its one place that frees one, and its
    snapshot swap; an audit appended to the list sees every pool of the test."""
    audits: list[AdmissionAudit] = []
    admit, release, apply_snapshot = (
        ProviderPool._admit,
        ProviderPool._release,
        ProviderPool.apply_snapshot,
    )

    def audited_admit(self, group, state, served, long, queued_ms):
        for audit in audits:
            audit.admit(state, long)
        return admit(self, group, state, served, long, queued_ms)

    def audited_release(self, state, long):
        for audit in audits:
            audit.release(state, long)
        return release(self, state, long)

    def audited_apply_snapshot(self, snapshot):
        for audit in audits:
            audit.snapshot(snapshot)  # in force before the swap's own admissions
        return apply_snapshot(self, snapshot)

    monkeypatch.setattr(ProviderPool, "_admit", audited_admit)
    monkeypatch.setattr(ProviderPool, "_release", audited_release)
    monkeypatch.setattr(ProviderPool, "apply_snapshot", audited_apply_snapshot)
    return audits


# -- the fake echo Nodes ----------------------------------------------------------------------


class Gate:
    """How many applies are done; fake Nodes wait on it."""

    def __init__(self) -> None:
        self.applied = 0
        self.changed = asyncio.Condition()

    async def bump(self) -> None:
        async with self.changed:
            self.applied += 1
            self.changed.notify_all()

    async def wait_for(self, applies: int) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.applied >= applies), WAIT_S)


@dataclass
class EchoFleet:
    """What the fake Nodes share: run arrival order, the apply gate, the random delays."""

    rng: random.Random
    gate: Gate
    arrivals: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def applies_needed(self, arrival: int) -> int:
        """Run ``k`` finishes once ``k * (APPLIES + 1) // RUNS`` applies are done: the last
        runs wait for every apply, so every apply meets live runs."""
        return min(arrival * (APPLIES + 1) // RUNS, APPLIES)


class EchoNodeLink:
    """A connected Node: echoes each run after a small random delay, acks every refresh."""

    def __init__(self, node_id: str, fleet: EchoFleet) -> None:
        self.node_id = node_id
        self.fleet = fleet
        self.session: NodeSession | None = None
        self.providers = set(NODES[node_id])
        self.refreshes: list[dict[str, Any]] = []
        self.cancels = 0

    async def send_frame(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "run.request":
            if frame["provider_id"] not in self.providers:
                self.fleet.errors.append(f"{self.node_id} got a run for {frame['provider_id']}")
            arrival = self.fleet.arrivals
            self.fleet.arrivals += 1
            task = asyncio.get_running_loop().create_task(self._echo(frame, arrival))
            self.fleet.tasks.add(task)
            task.add_done_callback(self.fleet.tasks.discard)
        elif kind == "config.refresh":
            self.refreshes.append(dict(frame))
            self.providers = {p["id"] for p in frame["node"]["providers"]}
            ack = {
                "type": "config.ack",
                "revision": frame["revision"],
                "refresh_id": frame["refresh_id"],
                "status": "applied",
                "error": None,
            }
            asyncio.get_running_loop().call_soon(self.session.resolve_ack, ack)
        elif kind == "run.cancel":
            self.cancels += 1

    async def _echo(self, frame: dict[str, Any], arrival: int) -> None:
        rng = self.fleet.rng
        run_id, session = frame["run_id"], self.session
        await self.fleet.gate.wait_for(self.fleet.applies_needed(arrival))
        await asyncio.sleep(rng.uniform(0, 0.004))  # the Node's work, not a synchronisation
        text = "echo: " + frame["request"]["messages"][-1]["content"]
        chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        if not session.deliver(run_id, "delta", chunk):
            self.fleet.errors.append(f"{self.node_id}: {run_id} unknown to its session")
        await asyncio.sleep(rng.uniform(0, 0.002))
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        session.deliver(run_id, "done", {"usage": usage, "finish_reason": "stop"})

    async def close_session(self, code: int) -> None:
        return None


# -- the test ---------------------------------------------------------------------------------


@pytest.fixture
def runtime(tmp_path) -> EdgeRuntime:
    text = yaml_of(config_with(initial_settings()))
    path = tmp_path / "edge.yaml"
    path.write_text(text, encoding="utf-8")
    import_config(load_config_text(text), text, source="test")

    async def write_no_usage(batch: list[Any]) -> None:
        return None

    return EdgeRuntime(load_config_text(text), path, write_no_usage, write_no_usage)


@dataclass
class Outcome:
    provider: str | None = None
    status: str = "not run"
    content: str | None = None


async def test_applies_under_load_never_admit_above_the_capacity_in_force(
    runtime: EdgeRuntime, audited: list[AdmissionAudit]
) -> None:
    rng = random.Random(SEED)
    audit = AdmissionAudit(runtime)
    audit.snapshot(snapshot_from_config(runtime.config))
    audited.append(audit)
    fleet = EchoFleet(random.Random(SEED + 1), Gate())
    links = {node_id: EchoNodeLink(node_id, fleet) for node_id in NODES}
    for node_id, link in links.items():
        link.session, _ = runtime.nodes.attach(node_id, link)
        runtime.nodes.mark_ready(link.session, runtime.config.revision)

    outcomes = [Outcome() for _ in range(RUNS)]
    long_runs = {i for i in range(RUNS) if rng.random() < LONG_SHARE}

    async def one_run(i: int) -> None:
        tokens = LONG_TOKENS if i in long_runs else NORMAL_TOKENS
        request = {"model": MODEL, "messages": [{"role": "user", "content": f"run {i}"}]}
        outcome = outcomes[i]
        try:
            async with open_run(runtime, MODEL, request, tokens, timeout_s=60) as run:
                outcome.provider = run.lease.provider_id
                expected_class = "long" if i in long_runs else "normal"
                assert run.lease.context_class == expected_class
                parts = [
                    choice["delta"]["content"]
                    async for chunk in run.deltas()
                    for choice in chunk["choices"]
                ]
            outcome.status, outcome.content = "ok", "".join(parts)
        except DispatchError as error:
            outcome.status = f"no lease: {error.code}"
        except RunFailed as failure:
            outcome.status = f"failed: {failure.code}"

    results = []
    under_load = []

    async def applies() -> None:
        for _ in range(APPLIES):
            stats = runtime.pool.stats()
            in_flight = sum(p.in_flight for p in stats.providers.values())
            under_load.append((in_flight, stats.models[MODEL].queue_depth))
            config = config_with(random_settings(rng))
            result = await run_refresh(
                runtime, mode="apply", config_yaml=yaml_of(config), requested_by="test"
            )
            results.append((config, result))
            await fleet.gate.bump()

    runs = [asyncio.create_task(one_run(i)) for i in range(RUNS)]
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(applies(), *runs)
        await asyncio.gather(*fleet.tasks)

    assert audit.violations == []
    assert fleet.errors == []
    failed = {i: o.status for i, o in enumerate(outcomes) if o.status != "ok"}
    assert failed == {}, "every run gets a provider and finishes"
    wrong = {i: o.content for i, o in enumerate(outcomes) if o.content != f"echo: run {i}"}
    assert wrong == {}
    assert sum(audit.admissions.values()) == RUNS
    assert audit.long_admissions == len(long_runs) > 0
    assert len(set(audit.admissions)) == len(PROVIDERS), audit.admissions
    assert all(links[n].cancels == 0 for n in NODES)

    # Every apply went through, met live runs, and was pushed to the Nodes it changed.
    assert [r.status for _, r in results] == ["applied"] * APPLIES, [r.errors for _, r in results]
    assert all(in_flight > 0 and waiting > 0 for in_flight, waiting in under_load), under_load
    pushes = [push for _, r in results for push in r.node_pushes]
    assert pushes and all(push["status"] == "acked" for push in pushes), pushes
    assert sum(len(link.refreshes) for link in links.values()) == len(pushes)

    # Every counter is back at zero and the runtime runs the last config applied.
    stats = runtime.pool.stats()
    assert {
        pid: (p.in_flight, p.long_in_flight) for pid, p in stats.providers.items()
    } == dict.fromkeys(PROVIDERS, (0, 0))
    assert {mid: (m.queue_depth, m.long_queue_depth) for mid, m in stats.models.items()} == {
        MODEL: (0, 0)
    }
    assert set(audit.held.values()) == {0} and set(audit.held_long.values()) <= {0}
    last_config, last = results[-1]
    assert runtime.config.revision == last.candidate_revision
    assert runtime.config == load_config_text(yaml_of(last_config))
    assert runtime.config_path.read_text(encoding="utf-8") == yaml_of(last_config)
    in_force = {
        pid: (p.capacity, p.long_context_slots, p.enabled) for pid, p in stats.providers.items()
    }
    assert in_force == {
        item["id"]: (item["capacity"], item.get("long_context_slots"), item["enabled"])
        for node in last_config["nodes"]
        for item in node["providers"]
    }
