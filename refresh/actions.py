"""`run_refresh`: the one refresh action behind the endpoint and the admin (DESIGN §6).

Runs on the Edge's event loop, one refresh at a time: plan -> (apply) mirror + config file in
one database transaction -> swap the runtime snapshot -> push to the Nodes -> record.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from edge.config import EdgeConfig
from edge.config.canonical import node_canonical
from edge.mirror import import_config
from edge.models import ConfigRevision
from edge.runtime import EdgeRuntime
from nodes import wire
from nodes.sessions import NodeSession
from refresh.classify import node_configs_changed
from refresh.models import RefreshRecord
from refresh.plan import Mode, Plan, RefreshResult, new_refresh_id, plan_refresh

log = logging.getLogger(__name__)


async def run_refresh(
    runtime: EdgeRuntime,
    *,
    mode: Mode,
    config_yaml: str | None = None,
    base_revision: str | None = None,
    candidate_revision: str | None = None,
    requested_by: str,
    user_id: int | None = None,
    request_id: str = "",
    applied_from: int | None = None,
) -> RefreshResult:
    """Dry-run or apply a candidate config (the config file when ``config_yaml`` is None)."""
    async with runtime.refresh_lock:
        try:
            if config_yaml is None:
                config_yaml = await asyncio.to_thread(_read_config_file, runtime)
        except (OSError, UnicodeDecodeError) as exc:
            config_yaml = ""
            result = RefreshResult(
                refresh_id=new_refresh_id(),
                mode=mode,
                status="invalid",
                base_revision=runtime.config.revision,
                errors=[{"path": "config_file", "message": f"cannot read the config file: {exc}"}],
            )
        else:
            plan = plan_refresh(
                runtime.config,
                config_yaml,
                mode=mode,
                base_revision=base_revision,
                candidate_revision=candidate_revision,
            )
            if mode == "apply" and plan.applicable:
                await _apply(runtime, plan, config_yaml)
            result = plan.result
        await _record(result, config_yaml, requested_by, user_id, request_id, applied_from)
        log.info(
            "refresh %s (%s) by %s: %s, %d changes",
            result.refresh_id,
            mode,
            requested_by,
            result.status,
            len(result.classification.changes),
        )
        return result


def _read_config_file(runtime: EdgeRuntime) -> str:
    if runtime.config_path is None:
        raise FileNotFoundError("the Edge runs without a config file; send config_yaml")
    return runtime.config_path.read_text(encoding="utf-8")


async def _apply(runtime: EdgeRuntime, plan: Plan, config_yaml: str) -> None:
    candidate = plan.candidate
    assert candidate is not None
    previous = runtime.config
    changed = plan.result.status == "ok"
    if changed:
        try:
            await _persist(runtime.config_path, candidate, config_yaml)
        except OSError as exc:
            # Nothing was applied: the mirror rolled back and the runtime was not touched.
            plan.result.status = "invalid"
            plan.result.errors = [
                {"path": "config_file", "message": f"cannot write {runtime.config_path}: {exc}"}
            ]
            return
    # Copy-on-write: one synchronous step on the loop, so no request sees half a config.
    runtime.swap_config(candidate)
    plan.result.status = "applied" if changed else "no_change"
    if changed:
        plan.result.node_pushes = await _push(runtime, previous, candidate, plan.result.refresh_id)


@database_sync_to_async
def _persist(config_path: Path | None, candidate: EdgeConfig, config_yaml: str) -> None:
    """Mirror and config file together: a file that cannot be written rolls the mirror back.

    The backup holds the config that was running (the active revision's YAML), which differs
    from the file when the operator edited the file in place before this apply.
    """
    with transaction.atomic():
        running = ConfigRevision.objects.filter(active=True).first()
        import_config(candidate, config_yaml, source="refresh")
        if config_path is not None:
            write_atomically(
                config_path, config_yaml, backup=running.yaml_text if running else None
            )


def write_atomically(path: Path, text: str, backup: str | None) -> None:
    """Replace ``path`` in one rename; ``backup`` (if any) goes to ``<name>.bak`` first."""
    if backup is not None:
        _replace(path.with_name(path.name + ".bak"), backup)
    _replace(path, text)


def _replace(path: Path, text: str) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


async def _push(
    runtime: EdgeRuntime, previous: EdgeConfig, candidate: EdgeConfig, refresh_id: str
) -> list[dict[str, Any]]:
    """Send each changed Node its new config, then collect the acks concurrently.

    Called right after the swap: the frames are written back to back, before any other coroutine
    runs (sending to a session does not suspend). A session's frames arrive in order and a Node
    applies `config.refresh` before it reads its next frame, so every run routed by the old
    snapshot reaches a Node ahead of its new config and every run routed by the new one after it.
    """
    pushes: dict[str, dict[str, Any]] = {}
    waiting = []
    for node_id in node_configs_changed(previous.canonical, candidate.canonical):
        session, node = runtime.nodes.get(node_id), candidate.node(node_id)
        pushes[node_id] = {"node": node_id, "status": "not_connected", "error": None}
        if session is None or session.closed or node is None:
            continue
        ack = session.expect_ack(refresh_id)
        try:
            await session.send(
                wire.config_refresh(refresh_id, candidate.revision, node_canonical(node))
            )
        except ConnectionError:
            continue
        waiting.append(_await_ack(session, ack, refresh_id, pushes[node_id]))
    await asyncio.gather(*waiting)
    return list(pushes.values())


async def _await_ack(
    session: NodeSession, ack: asyncio.Future[dict[str, Any]], refresh_id: str, push: dict
) -> None:
    try:
        async with asyncio.timeout(settings.IOP_REFRESH_ACK_TIMEOUT_S):
            frame = await ack
    except TimeoutError:
        session.pending_acks.pop(refresh_id, None)
        push["status"] = "timeout"
        return
    except ConnectionError:
        return  # the session went away: not_connected
    if frame["status"] == "applied":
        push["status"] = "acked"
    else:
        push.update(status="rejected", error=frame.get("error"))


@database_sync_to_async
def _record(
    result: RefreshResult,
    config_yaml: str,
    requested_by: str,
    user_id: int | None,
    request_id: str,
    applied_from: int | None,
) -> None:
    RefreshRecord.objects.create(
        refresh_id=result.refresh_id,
        request_id=request_id,
        mode=result.mode,
        status=result.status,
        base_revision=result.base_revision,
        candidate_revision=result.candidate_revision or "",
        # An invalid candidate may hold the very credential the validator refused (DESIGN §8).
        candidate_yaml="" if result.status == "invalid" else config_yaml,
        result=result.to_dict(),
        requested_by=requested_by,
        user_id=user_id,
        applied_from_id=applied_from,
    )
