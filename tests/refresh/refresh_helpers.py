"""Configs, runtimes and fake Node links for the refresh tests (no subprocess here)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from edge.config import load_config_text
from edge.runtime import EdgeRuntime
from edge.usage import Usage
from nodes.ack_log import RevisionAcks
from nodes.sessions import NodeSession
from tests.e2e.harness import Tokens, echo_config

# Ports nothing listens on: in-process tests only need the operator listener's port number,
# which the listener middleware matches against SERVER_PORT.
PUBLIC_PORT = 18000
OPERATOR_PORT = 18001
STALE_BASE = "sha256:" + "0" * 64
# One set of tokens for every config here, so two configs differ only where a test edits them.
TOKENS = Tokens()


def make_config() -> dict[str, Any]:
    """One echo node `node-a` with provider `echo-1` (capacity 4) serving model `echo`."""
    return echo_config(TOKENS, PUBLIC_PORT, OPERATOR_PORT)


def edited(config: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copied = copy.deepcopy(config)
    edit(copied)
    return copied


def with_capacity(config: dict[str, Any], capacity: int) -> dict[str, Any]:
    def edit(c: dict[str, Any]) -> None:
        c["nodes"][0]["providers"][0]["capacity"] = capacity

    return edited(config, edit)


def with_adapter_change(config: dict[str, Any]) -> dict[str, Any]:
    """A restart-required edit: a new adapter under node-a."""

    def edit(c: dict[str, Any]) -> None:
        c["nodes"][0]["adapters"].append({"id": "echo-2", "type": "echo"})

    return edited(config, edit)


def with_model_generation(config: dict[str, Any]) -> dict[str, Any]:
    """A live edit that changes no Node's config: only the model catalog."""

    def edit(c: dict[str, Any]) -> None:
        c["models"][0]["generation"] = {"default_max_tokens": 64, "max_tokens_limit": 128}

    return edited(config, edit)


def yaml_of(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)


async def write_no_usage(batch: list[Usage]) -> None:
    return None


async def write_no_acks(batch: list[RevisionAcks]) -> None:
    return None


def make_runtime(tmp_path: Path, config: dict[str, Any] | None = None) -> EdgeRuntime:
    """A runtime serving ``config`` from ``tmp_path/edge.yaml``, not installed anywhere."""
    text = yaml_of(config or make_config())
    path = tmp_path / "edge.yaml"
    path.write_text(text, encoding="utf-8")
    return EdgeRuntime(load_config_text(text), path, write_no_usage, write_no_acks)


class FakeNodeLink:
    """A connected Node that answers every `config.refresh` with ``answer`` (or never)."""

    def __init__(self, answer: str | None = "applied", error: str | None = None) -> None:
        self.answer = answer
        self.error = error
        self.frames: list[dict[str, Any]] = []
        self.session: NodeSession | None = None

    async def send_frame(self, frame: dict[str, Any]) -> None:
        self.frames.append(dict(frame))
        if frame["type"] == "config.refresh" and self.answer is not None:
            ack = {
                "type": "config.ack",
                "revision": frame["revision"],
                "refresh_id": frame["refresh_id"],
                "status": self.answer,
                "error": self.error,
            }
            # Answer after the push returns, as a real Node would.
            asyncio.get_running_loop().call_soon(self.session.resolve_ack, ack)

    async def close_session(self, code: int) -> None:
        return None

    def refreshes(self) -> list[dict[str, Any]]:
        return [frame for frame in self.frames if frame["type"] == "config.refresh"]


def connect_node(runtime: EdgeRuntime, link: FakeNodeLink, node_id: str = "node-a") -> NodeSession:
    session, _ = runtime.nodes.attach(node_id, link)
    link.session = session
    runtime.nodes.mark_ready(session, runtime.config.revision)
    return session
