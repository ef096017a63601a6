"""Building the process's runtime from a config file (the Django side of `edge.runtime`)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from edge.config import EdgeConfig, load_config_file
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage_store import write_usage


def start_runtime(config: EdgeConfig, config_path: Path) -> EdgeRuntime:
    """Install the process's runtime for ``config``, read from ``config_path``."""
    runtime = EdgeRuntime(config, config_path, write_usage)
    install_runtime(runtime)
    return runtime


def ensure_runtime() -> EdgeRuntime:
    """The installed runtime, or one built from `IOP_CONFIG` (a plain `daphne` start)."""
    if not runtime_installed():
        path = Path(settings.IOP_CONFIG)
        return start_runtime(load_config_file(path), path)
    return get_runtime()
