"""The Edge's in-memory runtime: the running config, the provider pool and the Node sessions.

One per process, living on the event loop that serves requests. A live refresh swaps the config
copy-on-write: a new immutable config and pool snapshot replace the old ones in one step, and the
pool keeps its counters (DESIGN §6).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from edge.config import EdgeConfig
from edge.config.schema import Model, PrincipalToken
from edge.dispatch import ProviderPool, snapshot_from_config
from edge.memory import return_free_memory
from edge.tokens import sha256_hex
from edge.usage import Usage, UsageRecorder
from nodes.sessions import NodeSessionStore


class EdgeRuntime:
    """Everything the request path reads, none of it from the database."""

    def __init__(
        self,
        config: EdgeConfig,
        config_path: Path | None,
        write_usage: Callable[[list[Usage]], Awaitable[None]],
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.started_at = time.time()
        self.pool = ProviderPool(snapshot_from_config(config))
        self.nodes = NodeSessionStore(self.pool.set_node_ready)
        self.usage = UsageRecorder(write_usage, on_quiet=return_free_memory)
        self.refresh_lock = asyncio.Lock()  # refreshes are serialized
        self.principals: Mapping[str, PrincipalToken] = _principals(config)
        self.models: Mapping[str, Model] = _models(config)

    def swap_config(self, config: EdgeConfig) -> None:
        """Make ``config`` the running one. Only live-classified changes may reach here."""
        self.pool.apply_snapshot(snapshot_from_config(config))
        self.principals = _principals(config)
        self.models = _models(config)
        self.config = config

    def principal_for(self, bearer_token: str) -> PrincipalToken | None:
        return self.principals.get(sha256_hex(bearer_token))


def _principals(config: EdgeConfig) -> dict[str, PrincipalToken]:
    return {t.token_hash_sha256: t for t in config.openai.principal_tokens}


def _models(config: EdgeConfig) -> dict[str, Model]:
    return {m.id: m for m in config.models}


_runtime: EdgeRuntime | None = None


def install_runtime(runtime: EdgeRuntime | None) -> None:
    global _runtime
    _runtime = runtime


def runtime_installed() -> bool:
    return _runtime is not None


def get_runtime() -> EdgeRuntime:
    """The process's runtime; ``run_edge`` (or the ASGI app on first use) installs it."""
    if _runtime is None:
        raise RuntimeError("the Edge runtime is not installed")
    return _runtime
