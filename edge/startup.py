"""Building the process's runtime from a config file (the Django side of `edge.runtime`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.urls import get_resolver

from edge.config import EdgeConfig, load_config_file
from edge.config.overrides import BoundListeners
from edge.governance.usage_load import load_budget_usage
from edge.memory import freeze_long_lived, watch_collections
from edge.runtime import EdgeRuntime, get_runtime, install_runtime, runtime_installed
from edge.usage_store import write_usage
from iop_site.middleware import OPERATOR_URLCONF
from nodes.ack_store import write_acks
from nodes.wire.collector import tune_for_serving

log = logging.getLogger(__name__)


def start_runtime(
    config: EdgeConfig, config_path: Path, bound: BoundListeners | None = None
) -> EdgeRuntime:
    """Install the process's runtime for ``config``, read from ``config_path``, serving on
    ``bound`` (the config's own listeners when None)."""
    if not config.openai.require_auth:
        log.warning(
            "openai.require_auth is false: callers without a token, or with a wrong one, are "
            "served; usage meters them as principal (anonymous) or (unknown token)"
        )
    runtime = EdgeRuntime(
        config,
        config_path,
        write_usage,
        write_acks,
        owns_process=True,
        bound=bound,
        ping_interval_s=settings.IOP_NODE_PING_INTERVAL_S,
    )
    load_past_usage(runtime)
    install_runtime(runtime)
    import_views()
    # Django, the config and the pool live as long as the process: out of the collector's sight.
    freeze_long_lived()
    tune_for_serving()
    watch_collections()
    return runtime


def import_views() -> None:
    """Import the URL confs (the public one and the operator listener's) and the views they name
    now, before the Edge serves.

    Django imports them at the first request it resolves, on the event loop: the operator API,
    DRF and the OpenAPI schema's modules held every request and Node session up for 80-160 ms
    beside 3,000 Nodes (docs/benchmarks.md, "Fleet")."""
    for urlconf in (settings.ROOT_URLCONF, OPERATOR_URLCONF):
        get_resolver(urlconf).check()  # reads url_patterns, which imports them


def load_past_usage(runtime: EdgeRuntime) -> None:
    """Start the budgets from the usage already metered this month, so they survive a restart.

    A plain `daphne` start builds the runtime on its event loop, where Django refuses the
    database: the one read then happens in a thread of its own, waited for.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        load_budget_usage(runtime.limiter)
        return
    failures: list[BaseException] = []

    def read() -> None:
        try:
            load_budget_usage(runtime.limiter)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    reader = threading.Thread(target=read, name="iop-budget-usage")
    reader.start()
    reader.join()
    if failures:
        raise failures[0]


def ensure_runtime() -> EdgeRuntime:
    """The installed runtime, or one built from `IOP_CONFIG` (a plain `daphne` start)."""
    if not runtime_installed():
        path = Path(settings.IOP_CONFIG)
        return start_runtime(load_config_file(path), path)
    return get_runtime()
