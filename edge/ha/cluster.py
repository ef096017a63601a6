"""High availability, the Django side: the database check, the takeover and the fence.

- The database must be PostgreSQL: the leader lock is one of its advisory locks.
- A takeover makes the cluster's config the running one: the active revision's YAML, which every
  start, import and applied refresh writes to the database (``ConfigRevision``), not this Edge's
  file, which may be stale. Only the cluster's first start, with no revision in the database,
  serves the local file (and imports it). The budgets restart from the metered usage.
- A fence ends what a leader that lost its lock still serves: queued requests and runs fail with
  ``edge_standby`` (their callers get a 503 to retry), the Node sessions close with 4503 so the
  Nodes look for the new leader, and the usage and acks still buffered are written if the
  database takes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection, transaction

from edge.config import EdgeConfig, load_config_text
from edge.governance.limits import Limiter
from edge.governance.usage_load import load_budget_usage
from edge.ha.commit_guard import LeaderCommitGuard
from edge.ha.elector import Elector
from edge.ha.role import EDGE_STANDBY, lock_key
from edge.models import ConfigRevision
from edge.runtime import EdgeRuntime
from iop_site.postgres_fields import POSTGRES_ENGINE
from nodes import wire

if TYPE_CHECKING:
    from edge.ha.pg_lock import PgLeaderLock

log = logging.getLogger(__name__)

# Connection settings passed on to the lock's own connection (the rest are Django's).
_PASSED_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "options", "service")


def ha_database_problem(
    config: EdgeConfig, database: Mapping[str, Any] | None = None
) -> str | None:
    """Why this database cannot run ``config``'s HA mode, or None."""
    if not config.edge.ha:
        return None
    engine = (database or settings.DATABASES["default"])["ENGINE"]
    if engine == POSTGRES_ENGINE:
        return None
    kind = "SQLite" if "sqlite" in engine else engine
    return (
        f"edge.ha: true needs PostgreSQL (the leader lock is a PostgreSQL advisory lock), but "
        f"DATABASE_URL names {kind}: set DATABASE_URL=postgres://USER@HOST:5432/NAME, shared by "
        f"every Edge of id {config.edge.id!r}, or turn edge.ha off"
    )


def lock_conninfo(database: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """psycopg connection parameters for the database Django uses."""
    db = database or settings.DATABASES["default"]
    params: dict[str, Any] = {"dbname": db["NAME"]}
    for key in ("USER", "PASSWORD", "HOST", "PORT"):
        name = key.lower()
        if db.get(key):
            params[name] = str(db[key])
    options = db.get("OPTIONS") or {}
    params.update({key: options[key] for key in _PASSED_OPTIONS if key in options})
    return params


@dataclass(frozen=True)
class RunningElector:
    """The elector following the lock, and the task it runs in (kept for the process's life)."""

    elector: Elector
    lock: PgLeaderLock
    task: asyncio.Task[None]


def start_elector(runtime: EdgeRuntime, loop: asyncio.AbstractEventLoop) -> RunningElector:
    """Seek the leader lock for ``runtime``'s Edge id and follow it, on ``loop`` (the one that
    serves the runtime)."""
    # psycopg only in an HA Edge (on PostgreSQL): about 10 MB that any other Edge goes without.
    from edge.ha.pg_lock import PgLeaderLock

    config = runtime.config
    lock = PgLeaderLock(
        lock_conninfo(),
        lock_key(config.edge.id),
        application_name=f"iop-edge leader lock {config.edge.id}"[:63],
    )
    elector = Elector(
        lock,
        runtime.leadership,
        take_over=lambda: take_over(runtime),
        fence=lambda reason: fence(runtime, reason),
    )

    def wake_elector() -> None:  # from the lock's thread
        loop.call_soon_threadsafe(elector.wake)

    lock.on_change = wake_elector
    runtime.commit_guard = lambda: leader_commit_guard(lock, config.edge.id)
    lock.start()
    task = loop.create_task(elector.run(), name="ha elector")
    return RunningElector(elector, lock, task)


def config_key(edge_id: str) -> int:
    """The transaction lock that orders an apply's commit and a takeover's read of the config."""
    return lock_key(f"{edge_id} config")


def leader_commit_guard(lock: PgLeaderLock, edge_id: str) -> LeaderCommitGuard:
    """This Edge's leadership as it stands now, to check in an apply's transaction."""
    holder = lock.backend_pid if lock.held_term is not None else None
    return LeaderCommitGuard(config_key(edge_id), lock.key, holder)


async def take_over(runtime: EdgeRuntime) -> None:
    """Make the cluster's config (from the database) the running one, budgets included."""
    config = await database_sync_to_async(cluster_config)(runtime)
    if config.revision != runtime.config.revision:
        log.info("takeover: serving the cluster's revision %s", config.revision)
        prepared = await asyncio.to_thread(runtime.prepare, config)
        runtime.swap_config(prepared)
    # The budgets start again from what the database metered: the last leader's usage, not
    # what this process counted in an earlier term.
    limiter = Limiter()
    await database_sync_to_async(load_budget_usage)(limiter)
    runtime.limiter = limiter


def cluster_config(runtime: EdgeRuntime) -> EdgeConfig:
    """The active revision's config; on the cluster's first start, the local file's, imported.
    The local file gets the cluster's YAML, so that a refresh that re-reads it starts there."""
    from refresh.persist import write_atomically
    from refresh.start import import_at_start

    path = runtime.config_path
    with transaction.atomic():
        # After any apply of the old leader still committing: its revision is the one served.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [config_key(runtime.config.edge.id)])
        active = ConfigRevision.objects.filter(active=True).only("revision", "yaml_text").first()
        if active is None:
            if path is None:
                return runtime.config
            text = path.read_text(encoding="utf-8")
            config = load_config_text(text)
            import_at_start(config, text, path)
            log.info("takeover: the cluster's first revision, %s, from %s", config.revision, path)
            return config
    config = load_config_text(active.yaml_text)
    if path is not None:
        _keep_file_in_step(path, active.yaml_text, config, write_atomically)
    return config


def _keep_file_in_step(path: Path, yaml_text: str, config: EdgeConfig, write: Any) -> None:
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current == yaml_text:
        return
    try:
        write(path, yaml_text, backup=current)
    except OSError as exc:
        log.warning("takeover: cannot write the cluster's config to %s: %s", path, exc)
        return
    log.warning(
        "takeover: %s differed from the cluster's revision %s; it now holds that revision "
        "(the previous file is in %s.bak)",
        path,
        config.revision,
        path.name,
    )


async def fence(runtime: EdgeRuntime, reason: str) -> None:
    """End what this Edge still serves after losing the lock (it admits nothing already)."""
    runtime.pool.fail_waiting()
    message = f"this Edge stopped leading ({reason}); retry the request"
    failed = 0
    for session in runtime.nodes.sessions():
        for run_id in list(session.runs):
            session.fail_run(run_id, EDGE_STANDBY, message, cancel=False)
            failed += 1
    sessions = runtime.nodes.sessions()
    log.warning("fence: %d runs failed, closing %d Node sessions", failed, len(sessions))
    await asyncio.gather(
        *(session.link.close_session(wire.CLOSE_STANDBY) for session in sessions),
        return_exceptions=True,
    )
    try:
        await runtime.usage.flush()
        await runtime.acks.flush()
    except Exception as exc:  # the database may be what failed
        log.warning("fence: buffered usage and acks not written: %s", exc)
