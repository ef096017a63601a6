"""Building the process's runtime from a config file (the Django side of `edge.runtime`)."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from edge.config import EdgeConfig, load_config_file
from edge.memory import freeze_long_lived, watch_collections
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage_store import write_usage
from nodes.ack_store import write_acks

log = logging.getLogger(__name__)


def start_runtime(config: EdgeConfig, config_path: Path) -> EdgeRuntime:
    """Install the process's runtime for ``config``, read from ``config_path``."""
    if not config.openai.require_auth:
        log.warning(
            "openai.require_auth is false: callers without a token, or with a wrong one, are "
            "served; usage meters them as principal (anonymous) or (unknown token)"
        )
    runtime = EdgeRuntime(config, config_path, write_usage, write_acks, owns_process=True)
    install_runtime(runtime)
    # Django, the config and the pool live as long as the process: out of the collector's sight.
    freeze_long_lived()
    watch_collections()
    return runtime


def ensure_runtime() -> EdgeRuntime:
    """The installed runtime, or one built from `IOP_CONFIG` (a plain `daphne` start)."""
    if not runtime_installed():
        path = Path(settings.IOP_CONFIG)
        return start_runtime(load_config_file(path), path)
    return get_runtime()
