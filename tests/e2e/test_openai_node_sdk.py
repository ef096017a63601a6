"""The official openai-node SDK against a real Edge and Node: what a JavaScript app gets is what
the Python SDK gets. Installed from npm at a pinned version; skipped, saying why, without node/npm
or when the install fails (no registry)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from nodes.agent.adapters.echo_embeddings import echo_embedding
from tests.e2e.harness import echo_config

OPENAI_NODE_VERSION = "7.59.0"
CLIENT_SCRIPT = Path(__file__).parent / "js" / "openai_node_client.mjs"


@pytest.fixture(scope="module")
def openai_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node_modules directory holding openai-node."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("openai-node test skipped: no node/npm on this machine")
    prefix = tmp_path_factory.mktemp("openai-node")
    try:
        subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--silent",
             f"openai@{OPENAI_NODE_VERSION}"],
            check=True, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pytest.skip(f"openai-node test skipped: npm install openai@{OPENAI_NODE_VERSION} failed")
    return prefix / "node_modules"


@pytest.fixture(scope="module")
def stack(openai_stack_factory: Any) -> Any:
    stack = openai_stack_factory(echo_config)
    stack.start_node("node-a")
    return stack


def test_openai_node_gets_what_the_python_sdk_gets(stack: Any, openai_node: Path) -> None:
    env = {
        **os.environ,
        "IOP_BASE_URL": f"{stack.edge.base_url}/v1",
        "IOP_API_KEY": stack.tokens.client("app-1"),
    }
    ran = subprocess.run(
        ["node", str(CLIENT_SCRIPT), str(openai_node)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout.strip().splitlines()[-1])

    python: openai.OpenAI = stack.client()
    messages: Any = [{"role": "user", "content": "hello from node"}]
    chat = python.chat.completions.create(model="echo", messages=messages)
    completion = python.completions.create(model="echo", prompt="say this")
    response = python.responses.create(model="echo", input="hi there")
    assert got == {
        "model": "echo",
        "unknown_model": {"status": 404, "code": "model_not_found"},
        "chat": chat.choices[0].message.content,
        "chat_stream": chat.choices[0].message.content,
        "embedding": echo_embedding("alpha"),
        "completion": completion.choices[0].text,
        "response": response.output_text,
        "response_stream": response.output_text,
    }
    assert got["chat"] and got["response"]
