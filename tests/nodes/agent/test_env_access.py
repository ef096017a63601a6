"""Which environment variables a Node lets the Edge's config name: the rule, and a real Node
process that refuses to send its own token to an upstream the Edge names."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from nodes import wire
from nodes.agent.env_access import EnvAccess, allowed_names
from tests.nodes.agent.test_node_agent_cli import start_process
from tests.nodes.node_payloads import make_node

TOKEN = "node-secret-token"


@pytest.mark.parametrize(
    ("name", "permitted"),
    [
        ("VLLM_API_KEY", True),  # the default rule: *_API_KEY
        ("OPENAI_API_KEY", True),
        ("IOP_NODE_TOKEN", False),  # never, whatever the rule
        ("IOP_EDGE_API_KEY", False),  # IOP_ names are the gateway's own
        ("HOME", False),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("LISTED", True),  # allowed by the operator
        ("COPY_API_KEY", False),  # holds the node token
        ("LISTED_COPY", False),  # holds the node token, allowed or not
    ],
)
def test_the_rule(name: str, permitted: bool) -> None:
    environ = {"COPY_API_KEY": TOKEN, "LISTED_COPY": TOKEN, "IOP_NODE_TOKEN": TOKEN}
    access = EnvAccess(frozenset({"LISTED", "LISTED_COPY"}), environ, TOKEN)
    assert access.permits(name) is permitted


def test_adapters_see_only_the_permitted_variables() -> None:
    environ = {"IOP_NODE_TOKEN": TOKEN, "VLLM_API_KEY": "k", "HOME": "/root", "X": "x"}
    assert EnvAccess(frozenset({"X"}), environ, TOKEN).view() == {"VLLM_API_KEY": "k", "X": "x"}


def test_a_config_naming_a_variable_it_does_not_read_is_a_problem_named_by_path() -> None:
    payload = node_with("http://127.0.0.1:9/v1", ("up", "IOP_NODE_TOKEN"), ("ok", "VLLM_API_KEY"))
    spec = wire.parse_node_config(payload, node_id="node-a")
    [problem] = EnvAccess().problems(spec)
    assert problem.startswith("node.adapters[up].api_key_env: this variable is not allowed")
    assert "IOP_NODE_TOKEN" not in problem  # a name may be a pasted secret: never quoted


def test_allowed_names_come_from_flags_and_the_environment() -> None:
    names = allowed_names(["A_KEY"], {"IOP_NODE_ALLOWED_ENV": " B_KEY, ,C_KEY"})
    assert names == {"A_KEY", "B_KEY", "C_KEY"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["IOP_NODE_TOKEN"], "IOP_NODE_TOKEN holds the node token"),
        (["not-a-name"], "'not-a-name' is not an environment variable name"),
    ],
)
def test_allowed_names_refuse_the_token_and_non_names(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        allowed_names(flags, {})


def node_with(base_url: str, *adapters: tuple[str, str]) -> wire.NodePayload:
    """A node whose openai_http adapters (id, api_key_env) all call ``base_url``."""
    return make_node(
        extra_adapters=tuple(
            wire.AdapterSpec(
                id=adapter_id,
                type="openai_http",
                base_url=base_url,
                api_key_env=env,
                health_path=False,
            )
            for adapter_id, env in adapters
        ),
        providers=tuple((f"p-{a}", a, ("m",)) for a, _ in adapters),
    )


class RecordingUpstream:
    """An OpenAI-compatible server that records every Authorization header it is sent."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        self.url = ""

    async def chat(self, request: web.Request) -> web.Response:
        self.authorizations.append(request.headers.get("Authorization", ""))
        completion = {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        return web.json_response(completion)


@pytest.fixture
async def upstream() -> AsyncIterator[RecordingUpstream]:
    recorder = RecordingUpstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", recorder.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    recorder.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    yield recorder
    await runner.cleanup()


async def test_a_real_node_never_sends_its_token_to_an_upstream_the_edge_names(
    edge: Any, fakes: Any, upstream: RecordingUpstream
) -> None:
    env = {"IOP_NODE_TOKEN": TOKEN, "VLLM_API_KEY": "vllm-key", "COPY_API_KEY": TOKEN}
    process = await start_process("--edge", edge.url, "--node-id", "node-a", env=env)
    try:
        connection = await edge.next_connection()
        await connection.expect("hello")
        acks = []
        for revision, env_name in [("r-token", "IOP_NODE_TOKEN"), ("r-copy", "COPY_API_KEY")]:
            await connection.send(wire.config(revision, node_with(upstream.url, ("up", env_name))))
            acks.append(await connection.expect("config.ack", revision=revision))
            await connection.send(fakes.run_request(revision, provider_id="p-up", adapter_id="up"))
            refused = await connection.expect("run.event", run_id=revision)
            assert refused["data"]["code"] == "node_not_ready"  # nothing was built

        await connection.send(wire.config("r-ok", node_with(upstream.url, ("up", "VLLM_API_KEY"))))
        applied = await connection.expect("config.ack", revision="r-ok")
        run = fakes.run_request("r1", provider_id="p-up", adapter_id="up", target="m", stream=False)
        await connection.send(run)
        await connection.expect("run.event", run_id="r1", event="done")
    finally:
        process.terminate()
        _, err = await process.communicate()

    for ack in acks:
        assert ack["status"] == "rejected"
        assert ack["error"].startswith(
            "node.adapters[up].api_key_env: this variable is not allowed"
        )
    assert applied["status"] == "applied"
    assert upstream.authorizations == ["Bearer vllm-key"]
    seen = json.dumps([*connection.frames, upstream.authorizations]) + err.decode()
    assert TOKEN not in seen
