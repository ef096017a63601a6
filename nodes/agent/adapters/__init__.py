"""Adapters turn a run into a stream of events from one kind of backend."""

from __future__ import annotations

import os
from collections.abc import Mapping

from nodes.agent.adapters.base import (
    Adapter,
    AdapterError,
    AdapterEvent,
    Delta,
    Done,
    Response,
)
from nodes.agent.adapters.echo import EchoAdapter
from nodes.agent.adapters.openai_http import OpenAIHTTPAdapter
from nodes.wire import AdapterSpec

__all__ = [
    "Adapter",
    "AdapterError",
    "AdapterEvent",
    "Delta",
    "Done",
    "Response",
    "build_adapter",
]


def build_adapter(spec: AdapterSpec, *, environ: Mapping[str, str] = os.environ) -> Adapter:
    """The adapter for ``spec``; ``environ`` is where it reads its ``api_key_env``."""
    if spec.type == "echo":
        return EchoAdapter(spec)
    return OpenAIHTTPAdapter(spec, environ=environ)
